"""Bad receipts land in quarantine with a specific reason and their source position, and the
accounting closes per partition."""

from __future__ import annotations

import os

import orjson

from .receiptsutil import rcpt, run_scorer, with_store


def _score_lines(lines: list[bytes], store_url, tmp_path) -> None:
    """Score a one-partition log holding exactly `lines`, in this order (receiptsutil's
    write_log would sort them by upload time, and cannot write a line that is not JSON)."""
    os.makedirs(tmp_path / "log" / "receipts")
    with open(tmp_path / "log" / "receipts" / "p0.jsonl", "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")
    run_scorer(tmp_path / "log", store_url, tmp_path / "models", end_of_stream=True)


def test_bad_receipts_are_quarantined_with_reasons(store_url, tmp_path):
    naive = rcpt("naive", "m1", 2)
    naive["occurred_at"] = naive["occurred_at"].replace("Z", "")
    floaty = rcpt("floaty", "m1", 3)
    floaty["amount_cents"] = 12.5
    future = rcpt("future", "m1", 20, upload=4)  # occurred 16 min after its upload
    missing = rcpt("missing", "m1", 5)
    del missing["store_id"]
    lines = [orjson.dumps(rcpt("ok", "m1", 1)), orjson.dumps(naive), orjson.dumps(floaty),
             orjson.dumps(future), b"{not json", orjson.dumps(missing),
             orjson.dumps(rcpt("ok2", "m1", 6))]
    _score_lines(lines, store_url, tmp_path)
    q = with_store(store_url, lambda s: s.quarantine_rows("receipts"))
    assert [(r["offset"], r["reason"]) for r in q] == [
        (1, "naive_time"), (2, "non_integer_cents"), (3, "event_time_after_arrival"),
        (4, "malformed_json"), (5, "missing_field")]
    (acct,) = with_store(store_url, lambda s: s.accounting("receipts"))
    assert (acct["read"], acct["accepted"], acct["quarantined"], acct["closes"]) == \
        (7, 2, 5, True)


def test_receipts_out_of_bounds_are_quarantined_and_the_run_goes_on(store_url, tmp_path):
    big1 = {**rcpt("big-1", "m1", 1), "amount_cents": 9223372036854775807}
    big2 = {**rcpt("big-2", "m1", 2), "amount_cents": 9223372036854775807}
    piped = rcpt("r|1", "m1", 3)
    nul = rcpt("r\u00001", "m1", 3)
    long_store = rcpt("long", "m1", 3, store="s" * 201)
    respelled = {**rcpt("ok", "m1", 1), "occurred_at": rcpt("ok", "m1", 1)["occurred_at"]
                 .replace("Z", "+00:00")}
    lines = [orjson.dumps(o) for o in (rcpt("ok", "m1", 1), big1, big2, piped, nul, long_store,
                                       respelled, rcpt("ok2", "m1", 4))]
    _score_lines(lines, store_url, tmp_path)
    q = with_store(store_url, lambda s: s.quarantine_rows("receipts"))
    assert [(r["offset"], r["reason"]) for r in q] == [
        (1, "out_of_range"), (2, "out_of_range"), (3, "bad_id"), (4, "bad_id"), (5, "bad_id")]
    (acct,) = with_store(store_url, lambda s: s.accounting("receipts"))
    assert (acct["read"], acct["accepted"], acct["duplicate"], acct["quarantined"],
            acct["closes"]) == (8, 2, 1, 5, True)
