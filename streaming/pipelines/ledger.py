"""The account-hour ledger pipeline: contracts, policy numbers, operator factory, health wording
and the machine-readable consumer contract (source and output schemas)."""

from __future__ import annotations

from typing import Any

from ..contracts import MERCHANT_CATEGORY, PAYMENT
from ..host.settings import PipelineSpec, RunSettings
from ..operators.ledger import (CATEGORIES, MAX_BACKLOG_AGE_US, PAYMENTS, RETENTION_US,
                                RULE_VERSION, WATERMARK_DELAY_US, LedgerOperator)
from ..repairs.ledger import RepairKey

NAME = "ledger"


def fmt_duration(us: int) -> str:
    s = int(abs(us) // 1_000_000)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{sec:02d}s" if sec else f"{m}m"
    return f"{sec}s"


def policy(retention_us: int = RETENTION_US) -> dict:
    """The consumer-facing numbers, recorded in every run's metadata and checkpoint."""
    return {"watermark_delay": fmt_duration(WATERMARK_DELAY_US),
            "retention": fmt_duration(retention_us),
            "max_backlog_age": fmt_duration(MAX_BACKLOG_AGE_US),
            "rule_version": RULE_VERSION}


def health(op: LedgerOperator, snap: dict) -> dict:
    """Process health and event-time freshness, reported apart."""
    ck = snap.get("process", {}).get("restored_from_checkpoint")
    process = f"healthy (restored from checkpoint {ck})" if ck else "healthy (fresh start)"
    head = snap.get("source_head_us")
    wm = op.wm
    if head is None or wm <= -(2**61):
        freshness = "unknown (no payments watermark yet)"
        behind = None
    else:
        # How far the published event time trails what the source holds, beyond the declared
        # watermark delay. Within the maximum backlog age it counts as current.
        behind = max(0, head - WATERMARK_DELAY_US - wm) if wm < 2**61 else 0
        if behind <= MAX_BACKLOG_AGE_US:
            freshness = f"current (behind by {fmt_duration(behind)} event time, within " \
                        f"{fmt_duration(MAX_BACKLOG_AGE_US)})"
        else:
            freshness = f"behind by {fmt_duration(behind)} event time"
    return {"health": {"process": process, "freshness": freshness,
                       "behind_us": behind, **policy(op.retention)}}


def make_spec(key: RepairKey, retention_us: int = RETENTION_US) -> PipelineSpec:
    def make_operator(settings: RunSettings) -> LedgerOperator:
        return LedgerOperator(key.sign, key.source, retention_us)

    return PipelineSpec(
        name=NAME,
        contracts={PAYMENTS: PAYMENT, CATEGORIES: MERCHANT_CATEGORY},
        lateness_us={PAYMENTS: WATERMARK_DELAY_US, CATEGORIES: 0},
        make_operator=make_operator,
        reference_versions=lambda op: {**policy(op.retention), "repair_key": key.describe(),
                                       "category_versions": len(op.cats)},
        health=health,
    )


def run_extra(key: RepairKey, retention_us: int = RETENTION_US) -> dict:
    return {**policy(retention_us), "repair_key": key.describe()}


# ---------------------------------------------------------------------------- output schemas
WINDOW_FIELDS: dict[str, tuple[dict[str, Any], str]] = {
    "account_id": ({"type": "string"}, "account the window belongs to"),
    "event_hour": ({"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:00Z$"},
                   "start of the event-time hour (UTC)"),
    "revision": ({"type": "integer", "minimum": 1}, "1, 2, ... per account-hour"),
    "status": ({"enum": ["provisional", "revised", "final", "corrected"]},
               "provisional/revised are never final; corrected comes from a signed repair"),
    "total_cents": ({"type": "integer"}, "sum of amount_cents over deduplicated payments"),
    "payment_count": ({"type": "integer", "minimum": 0}, "deduplicated payments"),
    "risk_count": ({"type": "integer", "minimum": 0},
                   "payments whose category version effective at their event time is high_risk"),
    "category_counts": ({"type": "object", "additionalProperties": {"type": "integer"}},
                        "payments per effective category ('uncategorized' when none)"),
}


def output_schemas() -> dict[str, dict]:
    props = {k: {**s, "description": d} for k, (s, d) in WINDOW_FIELDS.items()}
    window = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ledger_window",
        "description": ("One revision of an account-hour. Fact key 'account|hour|revision' "
                        "(e.g. acct-8|2026-10-06T10:00Z|2), logical key 'account|hour'; every "
                        "revision after the first names its predecessor. Watermark delay "
                        f"{fmt_duration(WATERMARK_DELAY_US)}, retention "
                        f"{fmt_duration(RETENTION_US)}, maximum backlog age "
                        f"{fmt_duration(MAX_BACKLOG_AGE_US)}."),
        "type": "object", "required": list(WINDOW_FIELDS), "properties": props,
        "additionalProperties": False,
    }
    from ..repairs.ledger import SIGNED_FIELDS
    request = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ledger_repair_request",
        "description": ("A signed repair request: HMAC-SHA256 (hex) over the canonical JSON "
                        "(sorted keys) of the signed fields."),
        "type": "object",
        "required": list(SIGNED_FIELDS) + ["signature", "status"],
        "properties": {
            **{f: {"type": "integer"} for f in ("hour_us", "partition", "offset",
                                                 "subject_revision", "watermark_us")},
            **{f: {"type": "string"} for f in ("request_id", "account_id", "event_hour",
                                                "topic", "subject_id", "subject_hash",
                                                "reason")},
            "kind": {"enum": ["payment", "category"]},
            "signature": {"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"},
            "status": {"enum": ["pending", "held", "repaired"]},
        },
        "x-signed-fields": list(SIGNED_FIELDS),
    }
    return {"ledger_window": window, "ledger_repair_request": request}


def all_schemas() -> dict[str, dict]:
    """File name stem -> schema: sources (from the contracts) and outputs."""
    return {f"source.{PAYMENTS}": PAYMENT.json_schema(),
            f"source.{CATEGORIES}": MERCHANT_CATEGORY.json_schema(),
            **{f"output.{k}": v for k, v in output_schemas().items()}}
