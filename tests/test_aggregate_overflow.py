"""An aggregate that would leave the signed 64-bit range is never published and never stops a
run. Two fences: the contracts bound `amount_cents` (|cents| <= 10^12, docs/contracts.md), so a
record big enough to overflow is quarantined as `out_of_range` at the door; and the operators
still check every sum, routing a record that would push one out of range to repair (ledger) or
reconciliation (receipts) with the reason `aggregate_overflow`, should a bound ever be widened.
The second fence is driven below with records that bypass the contract."""

from __future__ import annotations

import os

import orjson
from sqlalchemy import select

from streaming.operators.base import ACCEPTED, AGGREGATE_OVERFLOW, ROUTED, Emit
from streaming.operators.ledger import REPAIR_TABLE
from streaming.operators.receipts import ReceiptScorer
from streaming.models.registry import INITIAL_ARTIFACT, Model
from streaming.store import schema as S
from streaming.store.ops import Store

from .joinutil import pay
from .ledgerutil import Driver, run_ledger
from .ledgerutil import rec as ledger_record
from .receiptsutil import rcpt, run_scorer, with_store
from .receiptsutil import record as receipt_record
from .receiptsutil import write_log as write_receipts

BIG = 2**63 - 1


def _dispositions(store: Store, pipeline: str) -> dict[str, str]:
    a = S.archive.c
    return {r["event_id"]: r["disposition"] for r in store.rows(
        select(a.event_id, a.disposition).where(a.pipeline == pipeline))}


def _quarantined(store: Store, pipeline: str) -> list[tuple[int, str]]:
    return sorted((q["offset"], q["reason"]) for q in store.quarantine_rows(pipeline))


def _with_cents(rec, cents: int):
    return rec.replace(payload={**rec.payload, "amount_cents": cents})


def test_ledger_amounts_beyond_the_bound_are_quarantined_and_the_run_goes_on(tmp_path,
                                                                             store_url):
    root = tmp_path / "log"
    os.makedirs(root / "payments")
    os.makedirs(root / "merchant_categories")
    rows = [pay("p1", "m1", 1, cents=BIG), pay("p2", "m1", 3, cents=BIG),
            pay("p3", "m1", 5, cents=-7), pay("p4", "m2", 70, cents=250, account="acct-2")]
    (root / "payments" / "p0.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    (root / "merchant_categories" / "p0.jsonl").write_bytes(b"")
    res = run_ledger(str(root), store_url, end_of_stream=True)
    assert res.records == 4
    store = Store(store_url)
    try:
        assert _quarantined(store, "ledger") == [(0, "out_of_range"), (1, "out_of_range")]
        assert _dispositions(store, "ledger") == {"p3": "accepted", "p4": "accepted"}
        totals = {}
        for f in store.facts("ledger"):
            p = orjson.loads(f["payload"])
            totals[(p["account_id"], p["revision"])] = p["total_cents"]
        assert totals[("acct-1", max(r for a, r in totals if a == "acct-1"))] == -7
        assert totals[("acct-2", 1)] == 250
        assert all(r["closes"] for r in store.accounting("ledger"))
    finally:
        store.dispose()


def test_ledger_operator_routes_the_payment_that_would_overflow_its_window():
    d = Driver()
    outs = []
    for i, (pid, minute, cents) in enumerate([("p1", 1, BIG), ("p2", 3, BIG), ("p3", 5, -7)]):
        r = _with_cents(ledger_record(pay(pid, "m1", minute), 0, i), cents)
        out = Emit()
        d.op.on_record(r, out)
        outs.append(out)
    assert [[disp for _, disp in o.disposed()] for o in outs] == [
        [ACCEPTED], [ROUTED], [ACCEPTED]]
    (req,) = outs[1].extra[REPAIR_TABLE]
    assert req["subject_id"] == "p2" and req["reason"] == AGGREGATE_OVERFLOW


def test_receipt_amounts_beyond_the_bound_are_quarantined_and_the_run_goes_on(tmp_path,
                                                                              store_url):
    src = write_receipts(tmp_path / "log", {0: [
        rcpt("r1", "m1", 0, cents=BIG), rcpt("r2", "m1", 3, cents=BIG),
        rcpt("r3", "m1", 6, cents=5), rcpt("r4", "m2", 4, cents=10),
        rcpt("r5", "m1", 9, cents=1)]})
    res = run_scorer(src, store_url, tmp_path / "models", end_of_stream=True)
    assert res.records == 5

    def check(store: Store):
        assert _quarantined(store, "receipts") == [(0, "out_of_range"), (1, "out_of_range")]
        assert _dispositions(store, "receipts") == {
            "r3": "accepted", "r4": "accepted", "r5": "accepted"}
        decisions = {}
        for f in store.facts("receipts"):
            p = orjson.loads(f["payload"])
            decisions[p["receipt_id"]] = (p["feature_count_7m"], p["feature_amount_7m"])
        assert decisions == {"r3": (0, 0), "r4": (0, 0), "r5": (1, 5)}
        assert all(r["closes"] for r in store.accounting("receipts"))

    with_store(store_url, check)


def test_receipt_operator_routes_the_receipt_whose_window_would_overflow():
    op = ReceiptScorer(Model.from_artifact(INITIAL_ARTIFACT))
    out = Emit()
    for i, (rid, minute, cents) in enumerate([("r1", 0, BIG), ("r2", 3, BIG), ("r3", 6, 5)]):
        op.on_record(_with_cents(receipt_record(rcpt(rid, "m1", minute), 0, i), cents), out)
    disp = dict(out.disposed())
    # r2's own window holds r1 only; r3's would hold r1 + r2: r3 is the one routed.
    assert disp == {"r1": ACCEPTED, "r2": ACCEPTED, "r3": ROUTED}
    assert [(e.event_id, e.reason) for e in out.queue] == [("r3", AGGREGATE_OVERFLOW)]
