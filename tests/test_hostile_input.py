"""Hostile input through the whole worker: a consumed line rewritten after a crash, a record
from the far future, binary and non-UTF-8 lines, a checkpoint of the wrong shape, credentials
with a raw `@`. Each run goes on (or refuses with its documented exit code) in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys

import orjson
import pytest
from sqlalchemy import select, update

from streaming.host.checkpoints import compress_state
from streaming.store import schema as S
from streaming.store.ops import Store

from .conftest import need_service
from .joinutil import pair_set, run_join


def _cli(*args, check=False):
    proc = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args],
                          capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _copy(seed_dir, tmp_path, name="src"):
    copy = tmp_path / name
    shutil.copytree(seed_dir[0], copy)
    return copy


def _db_state(url):
    store = Store(url)
    try:
        counts = store.table_counts()
        facts = sorted((f["fact_key"], f["payload_hash"]) for f in store.facts("join"))
        return counts, facts
    finally:
        store.dispose()


def _queue(url):
    store = Store(url)
    try:
        return sorted((q["event_id"], q["reason"]) for q in store.queue("join"))
    finally:
        store.dispose()


# -- item 3: journal replay verifies what it re-reads ----------------------------------------

def test_line_of_a_journaled_batch_rewritten_after_a_crash_is_refused(seed_dir, tmp_path,
                                                                      store_url,
                                                                      seed_whole_in_batches):
    copy = _copy(seed_dir, tmp_path)
    run = ["join", "run", "--source", str(copy), "--store", store_url, "--batch-size", "50",
           "--checkpoint-every", "100", "--quiet"]
    crashed = _cli(*run, "--crash-at", "after-sink-write:3")
    assert crashed.returncode == 137, crashed.stderr
    store = Store(store_url)
    try:
        j = S.journal.c
        ranges = orjson.loads(store.rows(select(j.ranges).where(j.pipeline == "join",
                                                                j.seq == 3))[0]["ranges"])
        ck = store.latest_checkpoint("join")
        positions = orjson.loads(ck["meta"])["positions"]
    finally:
        store.dispose()
    first, last = ranges["payments:0"][0], ranges["payments:0"][1]
    assert positions["payments:0"] <= first  # beyond the checkpoint: only the journal knows it
    p0 = copy / "payments" / "p0.jsonl"
    original = p0.read_bytes()
    lines = original.split(b"\n")
    target = (first + last) // 2
    rec = orjson.loads(lines[target])
    assert "amount_cents" in rec
    rec["amount_cents"] += 1
    lines[target] = orjson.dumps(rec)
    p0.write_bytes(b"\n".join(lines))
    before = _db_state(store_url)
    proc = _cli(*run)
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "journal batch 3" in proc.stderr and "payments:0" in proc.stderr
    assert _db_state(store_url) == before
    # The unchanged recording restores and finishes as an uninterrupted run would.
    p0.write_bytes(original)
    assert _cli(*run).returncode == 0
    assert pair_set(store_url) == pair_set(seed_whole_in_batches)


# -- item 4: a record from the far future moves no clock ---------------------------------------

def test_far_future_payment_is_quarantined_and_moves_nothing(seed_dir, tmp_path, store_url,
                                                             seed_whole):
    copy = _copy(seed_dir, tmp_path)
    p0 = copy / "payments" / "p0.jsonl"
    lines = p0.read_bytes().split(b"\n")[:-1]
    k = len(lines) // 3
    far = orjson.loads(lines[k])
    far.update(payment_id="pay-far-future", event_time="9999-12-31T23:59:00Z",
               arrival_time="9999-12-31T23:59:00Z")
    lines.insert(k, orjson.dumps(far))
    p0.write_bytes(b"\n".join(lines) + b"\n")
    run_join(str(copy), store_url, end_of_stream=True)
    ref = seed_whole
    assert pair_set(store_url) == pair_set(ref)
    assert len(pair_set(ref)) > 1000
    assert _queue(store_url) == _queue(ref)
    store = Store(store_url)
    try:
        q = [r for r in store.quarantine_rows("join") if r["reason"] == "arrival_time_jump"]
        assert [(r["topic"], r["partition"], r["offset"]) for r in q] == [("payments", 0, k)]
        assert all(r["closes"] for r in store.accounting("join"))
    finally:
        store.dispose()


def _append_far_future(copy, name="pay-far-future") -> int:
    """Append a payment from 9999 as the last line of payments p0; returns its offset."""
    p0 = copy / "payments" / "p0.jsonl"
    lines = p0.read_bytes().split(b"\n")[:-1]
    far = orjson.loads(lines[-1])
    far.update(payment_id=name, event_time="9999-12-31T23:59:00Z",
               arrival_time="9999-12-31T23:59:00Z")
    p0.write_bytes(b"\n".join(lines + [orjson.dumps(far)]) + b"\n")
    return len(lines)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_far_future_payments_as_the_last_lines_are_quarantined_and_move_nothing(
        seed_dir, tmp_path, store_url, n, seed_whole):
    """One or several far-future records at the end of one partition are quarantined: they
    claim to arrive in the future, and their own partition cannot vouch for them (only
    another partition could). The clock stays in 2026: they move neither it nor a watermark,
    nor the source head the freshness metrics compare with."""
    copy = _copy(seed_dir, tmp_path)
    first = _append_far_future(copy, "pay-far-future-0")
    for i in range(1, n):
        _append_far_future(copy, f"pay-far-future-{i}")
    res = run_join(str(copy), store_url, end_of_stream=True)
    ref = seed_whole
    assert pair_set(store_url) == pair_set(ref)
    assert len(pair_set(ref)) > 1000
    assert _queue(store_url) == _queue(ref)
    store = Store(store_url)
    try:
        q = [r for r in store.quarantine_rows("join") if r["reason"] == "arrival_time_jump"]
        assert sorted((r["topic"], r["partition"], r["offset"]) for r in q) == [
            ("payments", 0, first + i) for i in range(n)]
        assert all("9999-12-31T23:59:00" in r["detail"] for r in q)
        assert all(r["closes"] for r in store.accounting("join"))
    finally:
        store.dispose()
    assert res.metrics["clock"] < "3000" and res.metrics["source_head"] < "3000"


def test_replay_after_the_log_grew_keeps_the_jump_decision(seed_dir, tmp_path, store_url):
    """The far-future last line is quarantined in a batch that commits, the run crashes
    before a checkpoint, and the producer then writes a record that would confirm it: the
    replay keeps the journaled decision, so the record stays in one bucket."""
    copy = _copy(seed_dir, tmp_path)
    at = _append_far_future(copy)
    run = ["join", "run", "--source", str(copy), "--store", store_url, "--batch-size", "50",
           "--checkpoint-every", "100000", "--quiet"]
    crashed = _cli(*run, "--crash-at", "after-sink-write:10")  # 471 records: batch 10 ends it
    assert crashed.returncode == 137, crashed.stderr
    store = Store(store_url)
    try:
        assert store.latest_checkpoint("join") is None
        q = [(r["partition"], r["offset"]) for r in store.quarantine_rows("join")
             if r["reason"] == "arrival_time_jump"]
        assert q == [(0, at)]
    finally:
        store.dispose()
    p0 = copy / "payments" / "p0.jsonl"
    follower = orjson.loads(p0.read_bytes().split(b"\n")[at])
    follower.update(payment_id="pay-after-far-future")
    p0.write_bytes(p0.read_bytes() + orjson.dumps(follower) + b"\n")
    assert _cli(*run).returncode == 0
    store = Store(store_url)
    try:
        archived = {r["event_id"] for r in store.rows(
            select(S.archive.c.event_id).where(S.archive.c.pipeline == "join"))}
        assert "pay-far-future" not in archived
        q = [(r["partition"], r["offset"]) for r in store.quarantine_rows("join")
             if r["reason"] == "arrival_time_jump"]
        assert (0, at) in q
        assert all(r["closes"] for r in store.accounting("join"))
    finally:
        store.dispose()


def test_max_arrival_jump_flag_is_typed_and_documented(seed_dir, tmp_path, sqlite_url):
    bad = _cli("join", "run", "--source", seed_dir[0], "--store", sqlite_url,
               "--max-arrival-jump", "soon", "--quiet")
    assert bad.returncode == 2 and "--max-arrival-jump" in bad.stderr
    helptext = _cli("join", "run", "--help").stdout
    assert "--max-arrival-jump" in helptext and "60" in helptext


# -- item 1: binary and non-UTF-8 lines are quarantined on every store --------------------------

@pytest.mark.parametrize("line, reason", [
    (b'{"payment_id": "pay-\x00-nul", "revision": 1}\x00\x01', "malformed_json"),
    (b'{"payment_id": "pay-\xff\xfe", "revision": 1}', "invalid_utf8"),
])
def test_binary_lines_are_quarantined_with_their_bytes_escaped(seed_dir, tmp_path, store_url,
                                                               line, reason):
    copy = _copy(seed_dir, tmp_path)
    p0 = copy / "payments" / "p0.jsonl"
    whole = p0.read_bytes()
    at = whole.count(b"\n")
    p0.write_bytes(whole + line + b"\n")
    res = run_join(str(copy), store_url, end_of_stream=True)
    assert res.records == 471
    store = Store(store_url)
    try:
        (q,) = [r for r in store.quarantine_rows("join")
                if (r["topic"], r["partition"], r["offset"]) == ("payments", 0, at)]
        assert q["reason"] == reason
        assert "\x00" not in q["raw"] and "\x00" not in q["detail"]
        assert "pay-" in q["raw"]
        assert ("\\x00" in q["raw"]) if b"\x00" in line else ("\\xff\\xfe" in q["raw"])
        assert all(r["closes"] for r in store.accounting("join"))
    finally:
        store.dispose()


# -- item 10: a checkpoint that decodes but has the wrong shape --------------------------------

@pytest.mark.parametrize("state", [{"operator": {}}, {"positions": [1, 2]}, [1, 2, 3]])
def test_checkpoint_of_the_wrong_shape_exits_3_in_one_line(seed_dir, store_url, state):
    src = seed_dir[0]
    run_join(src, store_url, checkpoint_every=200)
    store = Store(store_url)
    c = S.checkpoints.c
    with store.engine.begin() as conn:
        last = conn.execute(select(c.id).order_by(c.id.desc()).limit(1)).scalar()
        conn.execute(update(S.checkpoints).where(c.id == last).values(
            state=compress_state(orjson.dumps(state))))
    store.dispose()
    before = _db_state(store_url)
    proc = _cli("join", "run", "--source", src, "--store", store_url, "--quiet")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "shape" in proc.stderr
    assert _db_state(store_url) == before


# -- item 9: credentials with a raw @ never reach runs.settings or an error line ----------------

def test_password_with_at_sign_is_redacted_everywhere(seed_dir, tmp_path, sqlite_url):
    need_service("NATS", "127.0.0.1", 4222)
    nats = "nats://user:p@ssSECRETX@127.0.0.1:4222?stream=rs_hostile_absent&timeout=2"
    proc = _cli("join", "run", "--source", nats, "--store", sqlite_url, "--quiet")
    assert proc.returncode == 5, proc.stderr
    assert "SECRETX" not in proc.stderr + proc.stdout and "p@ss" not in proc.stderr
    pg = "postgresql://user:p@ssSECRETX@127.0.0.1:1/db"
    proc = _cli("join", "run", "--source", seed_dir[0], "--store", pg, "--quiet")
    assert proc.returncode == 7, proc.stderr
    assert "SECRETX" not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
    from streaming.host.settings import RunSettings
    shown = orjson.dumps(RunSettings(source=nats, store_url=pg).describe()).decode()
    assert "SECRETX" not in shown and "***@127.0.0.1:1" in shown


def test_store_url_with_at_sign_in_password_connects_and_is_stored_redacted(seed_dir, pg_url):
    """The test server trusts every password: the run connects only if the host was parsed
    after the last @, and runs.settings must not keep any part of the password."""
    url = pg_url.replace("postgresql://postgres@", "postgresql://postgres:p@ssSECRETX@")
    assert url != pg_url
    run_join(seed_dir[0], url)
    store = Store(pg_url)
    try:
        settings = [r["settings"] for r in store.rows(select(S.runs.c.settings))]
    finally:
        store.dispose()
    assert settings and all("SECRETX" not in x and "p@ss" not in x for x in settings)
    assert all("postgresql://***@127.0.0.1:5432/" in x for x in settings)
