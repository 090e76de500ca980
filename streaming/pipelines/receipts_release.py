"""The receipt scorer's release gate, read from the real sink (`riskstream receipts release`).

Active decision: a decision fact that no other decision fact names as its predecessor. A
receipt with two active decisions has two live chains (a duplicate output).

Release gate (the seed's `receipt_stream_release`, kept here verbatim in behaviour because the
gate applies it at run time, applied twice):
  live part      events = every valid receipt seen; late_ids = reconciliation records;
                 output_keys = receipt_id of each active decision whose chain began live.
  repaired part  events = the reconciliation records; no exclusions;
                 output_keys = receipt_id of each active decision whose chain began in repair.
The overall result is the first hold (duplicate output before missing-or-extra), else accept.
Before both: nothing to judge (the scorer never committed a batch or accepted no receipt)
holds; after both: open gate blockers hold (docs/gates.md)."""

from __future__ import annotations

from sqlalchemy import select

from ..gates import HOLD_BLOCKED, HOLD_NOTHING, blockers, hold_reason
from ..operators.receipts import KIND, PIPELINE
from ..store import schema as S
from ..store.ops import Store, loads


def receipt_stream_release(events, output_keys, late_ids):
    eligible = {event["event_id"] for event in events
                if event["event_id"] not in late_ids}
    if len(output_keys) != len(set(output_keys)):
        return "hold:duplicate-output"
    if set(output_keys) != eligible:
        return "hold:missing-or-extra-output"
    return "accept:reconciled"



def decision_facts(store: Store) -> list[dict]:
    out = []
    for f in store.facts(PIPELINE, KIND):
        p = loads(f["payload"])
        out.append({**p, "fact_key": f["fact_key"], "predecessor_key": f["predecessor_key"],
                    "batch_seq": f["batch_seq"], "fact_status": f["status"]})
    return out


def active(facts: list[dict]) -> list[dict]:
    superseded = {f["predecessor_key"] for f in facts if f["predecessor_key"]}
    return [f for f in facts if f["fact_key"] not in superseded]


def chain_origin(facts: list[dict]) -> dict[str, str]:
    """fact_key -> origin of the chain's first fact."""
    by_key = {f["fact_key"]: f for f in facts}
    out = {}
    for f in facts:
        cur, hops = f, 0
        while cur["predecessor_key"] and cur["predecessor_key"] in by_key and hops < 10_000:
            cur = by_key[cur["predecessor_key"]]
            hops += 1
        out[f["fact_key"]] = cur["origin"]
    return out


def receipts_seen(store: Store) -> tuple[dict[str, dict], set[str]]:
    """Valid receipts (first upload each) and the IDs held as reconciliation records."""
    a = S.archive.c
    rows = store.rows(select(a.event_id, a.partition, a.offset, a.event_us, a.arrival_us,
                             a.payload, a.disposition)
                      .where(a.pipeline == PIPELINE, a.disposition.in_(
                          ("accepted", "routed_to_repair")))
                      .order_by(a.arrival_us, a.partition, a.offset))
    seen: dict[str, dict] = {}
    for r in rows:
        seen.setdefault(r["event_id"], r)
    q = S.replay_queue.c
    late = {r["event_id"] for r in store.rows(select(q.event_id, q.status_reason).where(
        q.pipeline == PIPELINE)) if r["status_reason"] != "duplicate_upload"}
    late -= {rid for rid, r in seen.items() if r["disposition"] == "accepted"}
    return seen, late


def release_gate(store: Store) -> dict:
    facts = decision_facts(store)
    act = active(facts)
    origin = chain_origin(facts)
    seen, late = receipts_seen(store)
    live_keys = [f["receipt_id"] for f in act if origin[f["fact_key"]] == "live"]
    repair_keys = [f["receipt_id"] for f in act if origin[f["fact_key"]] == "repair"]
    live = receipt_stream_release([{"event_id": rid} for rid in seen], live_keys, late)
    repaired = receipt_stream_release([{"event_id": rid} for rid in sorted(late)],
                                      repair_keys, set())
    results = (live, repaired)
    # Fail closed: a store the scorer never wrote, or one with nothing to judge, holds; so
    # does any open blocker (sink exception, accounting gap) until a decision resolves it.
    hold = hold_reason(store, PIPELINE)
    if hold is None and not seen:
        hold = f"{HOLD_NOTHING}: the receipt scorer has accepted no receipt"
    if hold and hold.startswith(HOLD_NOTHING):
        overall = HOLD_NOTHING
    elif "hold:duplicate-output" in results:
        overall = "hold:duplicate-output"
    elif "hold:missing-or-extra-output" in results:
        overall = "hold:missing-or-extra-output"
    elif hold:
        overall = HOLD_BLOCKED
    else:
        overall = "accept:reconciled"
    eligible = set(seen) - late
    return {
        "result": overall, "hold_reason": hold, "live": live, "repaired": repaired,
        "blockers": [b.as_dict() for b in blockers(store, PIPELINE)],
        "eligible_receipts": len(eligible), "reconciliation_records": len(late),
        "live_outputs": len(live_keys), "repaired_outputs": len(repair_keys),
        "duplicate_outputs": sorted({k for k in live_keys + repair_keys
                                     if (live_keys + repair_keys).count(k) > 1}),
        "missing_live": sorted(eligible - set(live_keys)),
        "extra_live": sorted(set(live_keys) - eligible),
        "missing_repaired": sorted(late - set(repair_keys)),
        "extra_repaired": sorted(set(repair_keys) - late),
    }
