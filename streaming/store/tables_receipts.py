"""Receipt scorer tables: the history of pinned model revisions.

A pin row is written when a scorer first pins a model (from the registry's pointer) and when
an operator re-pins explicitly (`receipts rescore --model`). The artifact is stored with it, so
the store alone can replay and reconcile with the pinned model wherever it runs."""

from __future__ import annotations

from sqlalchemy import Column, Index, Integer, String, Table, Text

from .schema import metadata

receipt_model_pins = Table(
    "receipt_model_pins", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),  # the pin sequence
    Column("pipeline", String(32), nullable=False),
    Column("model_revision", String(64), nullable=False),
    Column("artifact", Text, nullable=False),
    Column("reason", String(200), nullable=False),  # initial_pin | explicit_repin
    Column("previous_revision", String(64)),
    Column("created_at", String(40), nullable=False),
)
Index("ix_receipt_pins", receipt_model_pins.c.pipeline, receipt_model_pins.c.id)
