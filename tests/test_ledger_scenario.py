"""The seed scenario end to end on SQLite and PostgreSQL: revision history, quarantine, the
temporal join under replay, signed repairs (and tampered ones), the ledger_snapshot oracle and
reconciliation."""

from __future__ import annotations

import os

import orjson
import pytest
from sqlalchemy import update

from riskstream_tools.references.ledger import reference_totals
from riskstream_tools.workloads.ledger_seed import at, generate, payment
from streaming.pipelines.ledger_accounting import reconcile
from streaming.repairs.ledger import run_ledger_repairs
from streaming.store.ops import Store
from streaming.store.tables_ledger import ledger_repair_requests as RR
from streaming.timeutil import parse_utc_us

from .ledgerutil import TEST_KEY, run_ledger, windows

H10 = ("acct-8", "2026-10-06T10:00Z")


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    out = tmp_path_factory.mktemp("ledger_seed")
    manifest = generate(11, str(out), payments=300)
    return str(out), manifest


def history(rows, account, hour):
    return [(r["revision"], r["status"], r["total_cents"], r["payment_count"], r["risk_count"],
             r["predecessor_key"]) for r in rows if (r["account_id"], r["event_hour"]) ==
            (account, hour)]


def test_scenario_history_repair_oracle_and_reconciliation(scenario, store_url):
    src, _ = scenario
    res = run_ledger(src, store_url, end_of_stream=True, checkpoint_every=200)
    assert res.facts_rejected == 0
    k = "acct-8|2026-10-06T10:00Z|"
    assert history(windows(store_url, True), *H10) == [
        (1, "provisional", 5750, 4, 0, None),          # 101, 102, 103, 104 rev 2
        (2, "revised", 6950, 5, 0, k + "1"),          # late pay-105 before the cutoff
        (3, "revised", 6950, 5, 1, k + "2"),          # merch-1 gambling from 10:15: pay-103
        (4, "final", 6950, 5, 1, k + "3"),
    ]
    store = Store(store_url)
    try:
        quarantined = {(q["topic"], q["reason"]) for q in store.quarantine_rows("ledger")}
        assert quarantined == {("payments", "conflicting_duplicate"),
                               ("merchant_categories", "overlapping_versions"),
                               ("merchant_categories", "category_equal_from")}
        reqs = store.rows(RR.select().order_by(RR.c.request_id))
        assert [(r["kind"], r["account_id"], r["event_hour"], r["subject_id"], r["status"],
                 r["key_source"]) for r in reqs] == [
            ("category", "acct-9", "2026-10-06T09:00Z", "cv-merch-4-crypto", "pending", "env"),
            ("payment", "acct-8", "2026-10-06T10:00Z", "pay-106", "pending", "env")]
        before = {(r["topic"], r["partition"]): r for r in reconcile(store)}
        assert all(r["closes"] for r in before.values())
        assert sum(r["pending"] for r in before.values()) == 2

        summary = run_ledger_repairs(store, TEST_KEY)
        assert summary["published"] == ["acct-8|2026-10-06T10:00Z|5",
                                        "acct-9|2026-10-06T09:00Z|3"]
        assert summary["held"] == []
        current = {(r["account_id"], r["event_hour"]): r for r in windows(store_url)}
        c10 = current[H10]
        assert (c10["revision"], c10["status"], c10["total_cents"], c10["payment_count"],
                c10["risk_count"], c10["predecessor_key"]) == \
            (5, "corrected", 7350, 6, 1, k + "4")
        c9 = current[("acct-9", "2026-10-06T09:00Z")]
        assert (c9["revision"], c9["status"], c9["total_cents"], c9["risk_count"]) == \
            (3, "corrected", 5300, 1)
        # A newer merch-1 version (grocery from 13:00) exists when the repair rebuilds 10:00;
        # pay-103 keeps the version effective at 10:20, pay-107 (13:30) takes the new one.
        assert current[("acct-8", "2026-10-06T13:00Z")]["risk_count"] == 0
        # Running the repair again changes nothing.
        again = run_ledger_repairs(store, TEST_KEY)
        assert again["pending"] == 0 and again["published"] == []

        # The seed's ledger_snapshot agrees with every final total.
        ref = reference_totals(src)
        got = {(a, parse_utc_us(h.replace("Z", ":00Z"))): r["total_cents"]
               for (a, h), r in current.items()}
        assert got == ref
        after = reconcile(store)
        assert all(r["closes"] for r in after)
        assert sum(r["repaired"] for r in after) == 2 and sum(r["pending"] for r in after) == 0
        assert sum(r["quarantined"] for r in after) == 3
        assert sum(r["duplicate"] for r in after) == 1
    finally:
        store.dispose()


def test_tampered_and_unsigned_requests_are_held(scenario, store_url):
    src, _ = scenario
    run_ledger(src, store_url, end_of_stream=True)
    store = Store(store_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(update(RR).where(RR.c.subject_id == "pay-106").values(account_id="acct-7"))
            conn.execute(update(RR).where(RR.c.subject_id == "cv-merch-4-crypto")
                         .values(signature=None))
        s = run_ledger_repairs(store, TEST_KEY)
        assert s["published"] == [] and s["repaired"] == []
        held = {h["request_id"].split("|")[0]: h["reason"] for h in s["held"]}
        assert held["payment"].startswith("bad_signature")
        assert held["category"].startswith("unsigned")
        rows = {r["subject_id"]: (r["status"], r["status_reason"])
                for r in store.rows(RR.select())}
        assert rows["pay-106"][0] == "held" and "tampered" in rows["pay-106"][1]
        assert rows["cv-merch-4-crypto"][0] == "held"
        assert [r["revision"] for r in windows(store_url, True) if
                (r["account_id"], r["event_hour"]) == H10] == [1, 2, 3, 4]
        rec = reconcile(store)
        assert all(r["closes"] for r in rec) and sum(r["held"] for r in rec) == 2
    finally:
        store.dispose()


def _write_log(root, payments: list[dict]) -> str:
    for topic, rows in (("payments", payments), ("merchant_categories", [])):
        os.makedirs(os.path.join(root, topic), exist_ok=True)
        with open(os.path.join(root, topic, "p0.jsonl"), "wb") as fh:
            for r in rows:
                fh.write(orjson.dumps(r) + b"\n")
    return str(root)


def test_correction_moving_a_payment_out_of_a_final_window(store_url, tmp_path):
    src = _write_log(tmp_path / "log", [
        payment("p1", "acct-1", "m-1", at(10, 5), at(10, 5), 100),
        payment("bg1", "acct-2", "m-1", at(12, 6), at(12, 6), 1),
        payment("p1", "acct-1", "m-1", at(12, 30), at(12, 31), 100, rev=2),
        payment("bg2", "acct-2", "m-1", at(12, 40), at(12, 40), 1),
    ])
    run_ledger(src, store_url)
    store = Store(store_url)
    try:
        reqs = sorted((r["event_hour"], r["reason"]) for r in store.rows(RR.select()))
        assert reqs == [("2026-10-06T10:00Z", "correction_beyond_retention"),
                        ("2026-10-06T12:00Z", "correction_beyond_retention")]
        s = run_ledger_repairs(store, TEST_KEY)
        # The old, final hour loses the payment; the new hour is still open: it waits.
        assert s["published"] == ["acct-1|2026-10-06T10:00Z|2"]
        assert s["waiting"] == ["payment|acct-1|2026-10-06T12:00Z|payments:0:2"]
        hist = history(windows(store_url, True), "acct-1", "2026-10-06T10:00Z")
        # The watermark jumped past both 11:00 and the 12:00 cutoff in one step: final only.
        assert [h[:4] for h in hist] == [(1, "final", 100, 1), (2, "corrected", 0, 0)]
    finally:
        store.dispose()
    run_ledger(src, store_url, end_of_stream=True)  # the watermark passes every cutoff
    store = Store(store_url)
    try:
        s = run_ledger_repairs(store, TEST_KEY)
        assert s["published"] == ["acct-1|2026-10-06T12:00Z|1"] and s["waiting"] == []
        (row,) = [r for r in windows(store_url) if r["event_hour"] == "2026-10-06T12:00Z"
                  and r["account_id"] == "acct-1"]
        assert (row["status"], row["total_cents"], row["predecessor_key"]) == \
            ("corrected", 100, None)
        assert all(r["closes"] for r in reconcile(store))
    finally:
        store.dispose()
