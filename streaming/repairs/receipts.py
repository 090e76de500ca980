"""Receipt repairs, shared by the CLI and the orchestration layer (no CLI code here).

`run_receipt_reconciliation` scores the reconciliation records (receipts beyond the allowed
delay) in batch against the merchant history reconstructed from the archive at each receipt's
occurrence time, with the pinned model, and rescores the published decisions they would have
changed (same merchant, occurred in (t, t + 7 min]). Changed decisions get a new scoring
revision with a predecessor link; unchanged ones get nothing.

`run_receipt_repin` is the explicit correction to another model revision: every active
decision is rescored with it (new scoring revision, predecessor link) and a new pin is
recorded, which the live scorer adopts when it next starts.

Both write facts, queue statuses and pins in one transaction, and both refuse while the live
scorer has committed batches no checkpoint covers (a crashed run must be restored first, so
that its replay and the repair never race for the same revision numbers)."""

from __future__ import annotations

from bisect import bisect_left

from sqlalchemy import select, update

from ..models.pins import latest_pin, record_pin
from ..models.registry import Model, Registry
from ..gates import hold_reason
from ..operators.base import AGGREGATE_OVERFLOW
from ..operators.receipts import KIND, PIPELINE, WINDOW_US, decision_fact
from ..store import schema as S
from ..store.ops import Store, fact_rows, loads, write_facts
from ..timeutil import NEG_INF, POS_INF, parse_utc_us, us_to_iso
from ..workers import input_watermark, unfinished


class RepairRefused(RuntimeError):
    exit_code = 6


def _require_quiescent(store: Store) -> None:
    # Fail closed: nothing to judge, or open gate blockers (a sink exception, an accounting
    # gap) of the scorer, and no repair publishes anything.
    hold = hold_reason(store, PIPELINE)
    if hold:
        raise RepairRefused(f"{hold}; nothing was written.")
    for w in unfinished(store, PIPELINE):
        raise RepairRefused(
            f"the receipt scorer ({w.key}) committed batches up to {w.last_journal_seq} but its "
            f"latest checkpoint covers {w.covered}: it stopped without finishing (crash?). Run "
            f"`riskstream receipts run` to restore and replay first; nothing was written.")


def _pinned_model(store: Store, model_dir: str | None) -> tuple[int, Model]:
    pinned = latest_pin(store, PIPELINE)
    if pinned is not None:
        return pinned
    # The scorer never ran on this store: the registry's current revision is what it would pin.
    return 0, Registry(model_dir).current()


def _live_watermark(store: Store) -> int:
    return input_watermark(store, PIPELINE, "receipts")


def _history(store: Store, merchant: str, lo: int, hi: int) -> tuple[list[int], list[int],
                                                                     dict[str, dict]]:
    """The merchant's known receipts (accepted or routed to repair, one per receipt_id) with
    occurrence in [lo, hi): sorted times, amounts, and rows by id."""
    a = S.archive.c
    q = S.replay_queue.c
    rows = store.rows(select(a.event_id, a.event_us, a.payload, a.payload_hash, a.disposition,
                             a.topic, a.partition, a.offset)
                      .where(a.pipeline == PIPELINE, a.topic == "receipts", a.key == merchant,
                             a.event_us >= lo, a.event_us < hi,
                             a.disposition.in_(("accepted", "routed_to_repair")))
                      .order_by(a.event_us, a.event_id, a.batch_seq, a.offset))
    # Receipts whose sums would overflow never count in anyone's features.
    overflow = {(r["topic"], r["partition"], r["offset"]) for r in store.rows(
        select(q.topic, q.partition, q.offset).where(
            q.pipeline == PIPELINE, q.key == merchant, q.reason == AGGREGATE_OVERFLOW))}
    by_id: dict[str, dict] = {}
    for r in rows:
        if (r["topic"], r["partition"], r["offset"]) in overflow:
            continue
        by_id.setdefault(r["event_id"], r)
    ordered = sorted(by_id.values(), key=lambda r: (r["event_us"], r["event_id"]))
    times = [r["event_us"] for r in ordered]
    amounts = [loads(r["payload"])["amount_cents"] for r in ordered]
    return times, amounts, by_id


def _features(times: list[int], amounts: list[int], t: int) -> tuple[int, int]:
    lo = bisect_left(times, t - WINDOW_US)
    hi = bisect_left(times, t)
    return hi - lo, sum(amounts[lo:hi])


def active_decisions(store: Store) -> dict[str, dict]:
    """receipt_id -> current decision payload (the current view)."""
    return {r["logical_key"]: loads(r["payload"]) for r in store.current(PIPELINE, KIND)}


def run_receipt_reconciliation(store: Store, start_us: int | None = None,
                               end_us: int | None = None, model_dir: str | None = None) -> dict:
    """Repair the pending reconciliation records with occurrence in [start_us, end_us]."""
    _require_quiescent(store)
    pin_seq, model = _pinned_model(store, model_dir)
    lo = NEG_INF if start_us is None else start_us
    hi = POS_INF if end_us is None else end_us
    q = S.replay_queue.c
    entries = store.rows(select(S.replay_queue).where(
        q.pipeline == PIPELINE, q.status == "pending", q.event_us >= lo, q.event_us <= hi)
        .order_by(q.event_us, q.event_id, q.id))
    wm = _live_watermark(store)
    current = active_decisions(store)
    facts = []
    statuses: list[tuple[int, str, str]] = []  # (queue id, status, reason)
    repaired, rescored, duplicates, held = [], [], [], []
    unchanged = 0
    by_merchant: dict[str, list[dict]] = {}
    for e in entries:
        by_merchant.setdefault(e["key"], []).append(e)
    for merchant, items in sorted(by_merchant.items()):
        t_min = min(e["event_us"] for e in items)
        t_max = max(e["event_us"] for e in items)
        times, amounts, by_id = _history(store, merchant, t_min - WINDOW_US,
                                         t_max + WINDOW_US + 1)
        a = S.archive.c
        done_ids: set[str] = set()
        touched: list[int] = []
        for e in items:
            rid = e["event_id"]
            if e["reason"] == AGGREGATE_OVERFLOW:
                held.append(rid)
                statuses.append((e["id"], "held", f"{AGGREGATE_OVERFLOW}: the merchant's "
                                 f"7-minute sums with this receipt leave the 64-bit range"))
                continue
            pos = store.rows(select(a.disposition, a.payload_hash, a.payload).where(
                a.pipeline == PIPELINE, a.topic == e["topic"], a.partition == e["partition"],
                a.offset == e["offset"]))[0]
            first = by_id.get(rid)
            if rid in done_ids or (first is not None and first["disposition"] == "accepted"):
                if first is not None and first["payload_hash"] != pos["payload_hash"]:
                    held.append(rid)
                    statuses.append((e["id"], "held", "conflicting_content_for_receipt_id"))
                else:
                    duplicates.append(rid)
                    statuses.append((e["id"], "processed", "duplicate_upload"))
                continue
            done_ids.add(rid)
            p = loads(pos["payload"])
            t = e["event_us"]
            cnt, amt = _features(times, amounts, t)
            prev = current.get(rid)
            rev = prev["scoring_revision"] + 1 if prev else 1
            f = decision_fact(
                receipt_id=rid, merchant_id=merchant, store_id=p["store_id"], occurred_us=t,
                amount_cents=p["amount_cents"], scoring_revision=rev, scorer=model.scorer,
                count=cnt, amount_7m=amt, watermark_us=wm, status="repaired", origin="repair",
                reason="beyond_allowed_delay",
                predecessor_revision=rev - 1 if prev else None)
            facts.append(f)
            current[rid] = f.payload
            repaired.append(f.fact_key)
            statuses.append((e["id"], "processed", f"repaired:{f.fact_key}"))
            touched.append(t)
        # Rescore published decisions the repaired receipts would have changed.
        if not touched:
            continue
        for rid, d in sorted(current.items()):
            if d["merchant_id"] != merchant or d["origin"] == "repair" and rid in done_ids:
                continue
            t2 = parse_utc_us(d["occurred_at"])
            if not any(t < t2 <= t + WINDOW_US for t in touched):
                continue
            cnt, amt = _features(times, amounts, t2)
            if (cnt, amt, model.revision) == (d["feature_count_7m"], d["feature_amount_7m"],
                                              d["model_revision"]):
                unchanged += 1
                continue
            rev = d["scoring_revision"] + 1
            f = decision_fact(
                receipt_id=rid, merchant_id=merchant, store_id=d["store_id"], occurred_us=t2,
                amount_cents=d["amount_cents"], scoring_revision=rev, scorer=model.scorer,
                count=cnt, amount_7m=amt, watermark_us=wm, status="rescored", origin=d["origin"],
                reason="reconciled_history", predecessor_revision=rev - 1)
            facts.append(f)
            current[rid] = f.payload
            rescored.append(f.fact_key)
    with store.engine.begin() as conn:
        res = write_facts(conn, PIPELINE, fact_rows(facts), None)
        for qid, status, reason in statuses:
            conn.execute(update(S.replay_queue).where(q.id == qid).values(
                status=status, status_reason=reason))
    return {"window": [us_to_iso(lo), us_to_iso(hi)], "model_revision": model.revision,
            "model_pin_seq": pin_seq, "records": len(entries), "repaired": repaired,
            "rescored": rescored, "unchanged": unchanged, "duplicates": duplicates,
            "held": held, "facts_written": res.written, "facts_noop": res.noop,
            "facts_rejected": res.rejected, "rejected_keys": res.rejected_keys}


def run_receipt_repin(store: Store, revision: str, model_dir: str | None = None) -> dict:
    """Re-pin the scorer to `revision` and rescore every active decision with it."""
    _require_quiescent(store)
    model = Registry(model_dir).load(revision)
    pinned = latest_pin(store, PIPELINE)
    previous = pinned[1].revision if pinned else None
    if previous == model.revision:
        return {"model_revision": model.revision, "previous_revision": previous,
                "rescored": [], "note": "already pinned; nothing to correct"}
    wm = _live_watermark(store)
    facts = []
    for rid, d in sorted(active_decisions(store).items()):
        rev = d["scoring_revision"] + 1
        facts.append(decision_fact(
            receipt_id=rid, merchant_id=d["merchant_id"], store_id=d["store_id"],
            occurred_us=parse_utc_us(d["occurred_at"]), amount_cents=d["amount_cents"],
            scoring_revision=rev, scorer=model.scorer, count=d["feature_count_7m"],
            amount_7m=d["feature_amount_7m"], watermark_us=wm, status="repinned",
            origin=d["origin"], reason=f"explicit_repin:{previous}->{model.revision}",
            predecessor_revision=rev - 1))
    with store.engine.begin() as conn:
        res = write_facts(conn, PIPELINE, fact_rows(facts), None)
        pin_seq = record_pin(store, model, "explicit_repin", previous, PIPELINE, conn=conn)
    return {"model_revision": model.revision, "previous_revision": previous,
            "model_pin_seq": pin_seq, "rescored": [f.fact_key for f in facts],
            "facts_written": res.written, "facts_rejected": res.rejected}
