"""Recorded decisions on what holds a pipeline's gates (an open sink exception, an accounting
gap, an unexplained quarantine row). A blocker stays open until one decision names it."""

from __future__ import annotations

from sqlalchemy import Column, Integer, String, Table, Text, UniqueConstraint

from .schema import metadata

gate_decisions = Table(
    "gate_decisions", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("pipeline", String(32), nullable=False),
    Column("blocker_id", String(300), nullable=False),  # e.g. sx-12, gap:payments:0:120:119
    Column("decision", String(32), nullable=False),
    Column("decided_by", String(200), nullable=False),
    Column("reason", Text, nullable=False),
    Column("decided_at", String(40), nullable=False),
    UniqueConstraint("pipeline", "blocker_id", name="uq_gate_decision"),
)
