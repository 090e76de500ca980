"""The contract bounds and canonical instants on real runs (file log -> SQLite / PostgreSQL):
records that used to stop a pipeline for good are quarantined with a reason and the run goes
on; the same record with its instants spelled differently is a duplicate, not a conflict."""

from __future__ import annotations

import os

import orjson

from riskstream_tools.workloads.ledger_seed import at as lat
from riskstream_tools.workloads.ledger_seed import payment, version

from .joinutil import pair_set, pay, run_join, sig, write_log
from .ledgerutil import run_ledger, windows
from .storeutil import with_store

M = "merchant-1"


def test_join_quarantines_poison_records_and_counts_respelled_duplicates(store_url, tmp_path):
    p1 = pay("p-1", M, 0)
    s1 = sig("s-1", M, 0)
    payments = [
        p1,
        {**p1, "event_time": "2026-10-06T12:00:00+02:00",
         "arrival_time": "2026-10-06T10:00:00.000000Z"},
        {**pay("p-big", M, 0), "revision": 2147483648},
        {**pay("p-huge", M, 0), "revision": 9223372036854775808},
        pay("p\u0000", M, 0),
        pay("p" * 201, M, 0),
        pay("a|b", M, 0),
        {**pay("p-cents", M, 0), "amount_cents": 9223372036854775807},
        pay("p-2", M, 1),
    ]
    signals = [s1, {**sig("s-hot", M, 0), "score": 7},
               {**s1, "event_time": "2026-10-06T09:00:00-01:00"}, sig("b\u001fc", M, 0)]
    src = write_log(tmp_path / "log", {("payments", 0): payments, ("risk_signals", 0): signals})
    run_join(src, store_url, end_of_stream=True)
    q = with_store(store_url, lambda s: s.quarantine_rows("join"))
    assert [(r["topic"], r["offset"], r["reason"]) for r in q] == [
        ("payments", 2, "out_of_range"), ("payments", 3, "out_of_range"),
        ("payments", 4, "bad_id"), ("payments", 5, "bad_id"), ("payments", 6, "bad_id"),
        ("payments", 7, "out_of_range"),
        ("risk_signals", 1, "out_of_range"), ("risk_signals", 3, "bad_id")]
    acct = with_store(store_url, lambda s: s.accounting("join"))
    assert [(a["topic"], a["read"], a["accepted"], a["duplicate"], a["quarantined"],
             a["closes"]) for a in acct] == [("payments", 9, 2, 1, 6, True),
                                             ("risk_signals", 4, 1, 1, 2, True)]
    assert pair_set(store_url) == {("p-1", "s-1"), ("p-2", "s-1")}


def test_ledger_quarantines_amounts_that_would_overflow_a_window(store_url, tmp_path):
    root = tmp_path / "log"
    for topic in ("payments", "merchant_categories"):
        os.makedirs(root / topic)
    t = lat(10, 5)
    lines = [payment("pay-max-1", "acct-1", "m-1", t, t, 9223372036854775807),
             payment("pay-max-2", "acct-1", "m-1", t, t, 9223372036854775807),
             payment("pay-ok", "acct-1", "m-1", t, t, 700),
             payment("pay-late", "acct-2", "m-1", lat(11, 30), lat(11, 30), 5)]
    with open(root / "payments" / "p0.jsonl", "wb") as fh:
        fh.write(b"".join(orjson.dumps(o) + b"\n" for o in lines))
    with open(root / "merchant_categories" / "p0.jsonl", "wb") as fh:
        fh.write(orjson.dumps(version("v-1", "m-1", "grocery", False, lat(0), None, lat(7)))
                 + b"\n")
    run_ledger(str(root), store_url, end_of_stream=True)
    q = with_store(store_url, lambda s: s.quarantine_rows("ledger"))
    assert [(r["offset"], r["reason"]) for r in q] == [(0, "out_of_range"), (1, "out_of_range")]
    totals = {(w["account_id"], w["event_hour"]): w["total_cents"] for w in windows(store_url)}
    assert totals[("acct-1", "2026-10-06T10:00Z")] == 700


def test_join_quarantines_a_line_with_raw_nul_and_invalid_utf8_and_goes_on(store_url, tmp_path):
    # PostgreSQL text refuses NUL: the raw line is stored with `\x00` (and invalid UTF-8 as
    # `\xNN`) so the quarantine insert succeeds and the batch, with its good records, commits.
    good = orjson.dumps(pay("p-1", M, 0))
    nul_line = good[:-1] + b',"note":"a\x00b"}'
    bad_utf8 = b'{"payment_id": "p-\xff"}'
    src = write_log(tmp_path / "log", {("payments", 0): [nul_line, bad_utf8, pay("p-2", M, 1)],
                                       ("risk_signals", 0): [sig("s-1", M, 0)]})
    run_join(src, store_url, end_of_stream=True)
    q = with_store(store_url, lambda s: s.quarantine_rows("join"))
    assert [(r["topic"], r["offset"], r["reason"]) for r in q] == [
        ("payments", 0, "malformed_json"), ("payments", 1, "invalid_utf8")]
    assert q[0]["raw"] == good[:-1].decode() + ',"note":"a\\x00b"}'
    assert q[1]["raw"] == '{"payment_id": "p-\\xff"}'
    acct = with_store(store_url, lambda s: s.accounting("join"))
    assert [(a["topic"], a["read"], a["accepted"], a["quarantined"], a["closes"])
            for a in acct] == [("payments", 3, 1, 2, True), ("risk_signals", 1, 1, 0, True)]
    assert pair_set(store_url) == {("p-2", "s-1")}
