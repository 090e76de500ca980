"""An aggregate that would leave the signed 64-bit range is never published and never stops a
run: the record that would push it out is routed to repair (ledger) or reconciliation
(receipts) with the reason `aggregate_overflow`, and the repair paths hold it there."""

from __future__ import annotations

import os

import orjson
from sqlalchemy import select

from streaming.repairs.ledger import run_ledger_repairs
from streaming.repairs.receipts import run_receipt_reconciliation
from streaming.store import schema as S
from streaming.store.ops import Store
from streaming.store.tables_ledger import ledger_repair_requests as RR

from .joinutil import pay
from .ledgerutil import TEST_KEY, run_ledger
from .receiptsutil import rcpt, run_scorer, with_store
from .receiptsutil import write_log as write_receipts

BIG = 2**63 - 1


def _dispositions(store: Store, pipeline: str) -> dict[str, str]:
    a = S.archive.c
    return {r["event_id"]: r["disposition"] for r in store.rows(
        select(a.event_id, a.disposition).where(a.pipeline == pipeline))}


def test_ledger_window_total_beyond_int64_is_routed_and_held(tmp_path, store_url):
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
        assert _dispositions(store, "ledger") == {
            "p1": "accepted", "p2": "routed_to_repair", "p3": "accepted", "p4": "accepted"}
        windows = {}
        for f in store.facts("ledger"):
            p = orjson.loads(f["payload"])
            windows[(p["account_id"], p["revision"])] = p["total_cents"]
        assert windows[("acct-1", max(r for a, r in windows if a == "acct-1"))] == BIG - 7
        assert windows[("acct-2", 1)] == 250
        reqs = store.rows(select(RR))
        assert [(r["subject_id"], r["reason"]) for r in reqs] == [("p2", "aggregate_overflow")]
        assert all(r["closes"] for r in store.accounting("ledger"))
        summary = run_ledger_repairs(store, TEST_KEY)
        assert summary["published"] == []
        assert [h["reason"].split(":")[0] for h in summary["held"]] == ["aggregate_overflow"]
        (req,) = store.rows(select(RR))
        assert req["status"] == "held" and "64-bit range" in req["status_reason"]
    finally:
        store.dispose()


def test_receipt_feature_sum_beyond_int64_goes_to_reconciliation_and_is_held(tmp_path,
                                                                            store_url):
    src = write_receipts(tmp_path / "log", {0: [
        rcpt("r1", "m1", 0, cents=BIG), rcpt("r2", "m1", 3, cents=BIG),
        rcpt("r3", "m1", 6, cents=5), rcpt("r4", "m2", 4, cents=10),
        rcpt("r5", "m1", 9, cents=1)]})
    models = tmp_path / "models"
    res = run_scorer(src, store_url, models, end_of_stream=True)
    assert res.records == 5

    def check(store: Store):
        # r2's own window holds r1 only; r3's would hold r1 + r2: r3 is the one routed.
        assert _dispositions(store, "receipts") == {
            "r1": "accepted", "r2": "accepted", "r3": "routed_to_repair", "r4": "accepted",
            "r5": "accepted"}
        decisions = {}
        for f in store.facts("receipts"):
            p = orjson.loads(f["payload"])
            decisions[p["receipt_id"]] = (p["feature_count_7m"], p["feature_amount_7m"])
        # r5 reads [2 min, 9 min): r2 only, since r3 joined no state.
        assert decisions == {"r1": (0, 0), "r2": (1, BIG), "r4": (0, 0), "r5": (1, BIG)}
        queue = store.queue("receipts")
        assert [(e["event_id"], e["reason"]) for e in queue] == [("r3", "aggregate_overflow")]
        assert all(r["closes"] for r in store.accounting("receipts"))
        summary = run_receipt_reconciliation(store, model_dir=str(models))
        assert summary["repaired"] == [] and summary["rescored"] == []
        (entry,) = store.queue("receipts")
        assert entry["status"] == "held" and entry["status_reason"].startswith(
            "aggregate_overflow")

    with_store(store_url, check)
