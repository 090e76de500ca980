"""The receipt scorer compared with its occurrence-order reference, from the store alone.

The reference (`riskstream_tools.references.receipts.reference_decisions`) scores every receipt
in one batch pass in occurrence order with the pinned model: no watermark, no sink, no
checkpoint. The receipts are the valid ones the scorer read (first upload of each, from the
archive), the model is the latest pin the store holds. Each active decision must equal its
reference on features, score, decision and model revision; a receipt without an active decision
is missing, a decision for a receipt the reference does not know is extra. Nothing to compare
is not a match."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from streaming.models.pins import latest_pin
from streaming.operators.receipts import PIPELINE
from streaming.pipelines.receipts_release import active, decision_facts
from streaming.store import schema as S
from streaming.store.ops import Store, loads

from ..references.receipts import reference_decisions

COMPARED = ("feature_count_7m", "feature_amount_7m", "score", "decision", "model_revision")
SHOWN = 20


def _receipts_read(store: Store) -> list[dict]:
    a = S.archive.c
    rows = store.rows(select(a.payload).where(
        a.pipeline == PIPELINE, a.disposition.in_(("accepted", "routed_to_repair")))
        .order_by(a.arrival_us, a.partition, a.offset))
    return [loads(r["payload"]) for r in rows]


def reference_check(store: Store) -> dict:
    """{result, model_revision, receipts, decisions, equal, differ, missing, extra}; result is
    `match`, `differs` or `nothing-to-compare`."""
    pin = latest_pin(store, PIPELINE)
    receipts = _receipts_read(store)
    decisions = {f["receipt_id"]: f for f in active(decision_facts(store))}
    out: dict[str, Any] = {"model_revision": pin[1].revision if pin else None, "receipts": 0,
           "decisions": len(decisions), "equal": 0, "differ": [], "missing": [], "extra": []}
    if pin is None or not receipts:
        out["result"] = "nothing-to-compare"
        return out
    reference = reference_decisions(receipts, pin[1])
    out["receipts"] = len(reference)
    for rid in sorted(reference):
        got = decisions.get(rid)
        if got is None:
            out["missing"].append(rid)
            continue
        diff = {k: {"live": got[k], "reference": reference[rid][k]} for k in COMPARED
                if got[k] != reference[rid][k]}
        if diff:
            out["differ"].append({"receipt_id": rid, "fields": diff})
        else:
            out["equal"] += 1
    out["extra"] = sorted(set(decisions) - set(reference))
    out["result"] = "match" if not (out["differ"] or out["missing"] or out["extra"]) \
        else "differs"
    return out


def render_lines(c: dict) -> list[str]:
    lines = [f"reference check: {c['result']} ({c['equal']} of {c['receipts']} receipts equal "
             f"the occurrence-order reference with model {c['model_revision']}; "
             f"{len(c['differ'])} differ, {len(c['missing'])} missing, {len(c['extra'])} extra)"]
    for d in c["differ"][:SHOWN]:
        fields = ", ".join(f"{k} {v['live']} vs {v['reference']}" for k, v in d["fields"].items())
        lines.append(f"  differs {d['receipt_id']}: {fields}")
    for name in ("missing", "extra"):
        if c[name]:
            lines.append(f"  {name}: {', '.join(c[name][:SHOWN])}"
                         f"{' ...' if len(c[name]) > SHOWN else ''}")
    return lines
