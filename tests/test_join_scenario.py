"""The seed scenario end to end on the real store (SQLite and PostgreSQL): result rows and IDs."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from riskstream_tools.references.join import candidate_pairs, fast_candidate_pairs
from streaming.store import schema as S
from streaming.store.ops import Store
from streaming.timeutil import parse_utc_us

from .joinutil import outcomes, pair_set, pairs, run_join


def accepted_latest(store_url):
    """Latest accepted revision of every event, from the archive: the reference's input."""
    store = Store(store_url)
    a = S.archive.c
    rows = store.rows(select(S.archive).where(a.pipeline == "join", a.disposition == "accepted"))
    store.dispose()
    pay, sig = {}, {}
    for r in rows:
        d = pay if r["topic"] == "payments" else sig
        if r["event_id"] not in d or d[r["event_id"]][0] < r["revision"]:
            d[r["event_id"]] = (r["revision"], r["key"], r["event_us"], r["arrival_us"])
    return ({k: (v[1], v[2]) for k, v in pay.items()}, {k: (v[1], v[2]) for k, v in sig.items()},
            pay, sig)


@pytest.fixture
def seed_run(seed_dir, store_url):
    src, manifest = seed_dir
    res = run_join(src, store_url, end_of_stream=True)
    return src, manifest, store_url, res


def test_seed_pairs_equal_both_references(seed_run):
    _, manifest, url, res = seed_run
    p, s, _, _ = accepted_latest(url)
    live = pair_set(url)
    assert live == fast_candidate_pairs(p, s) == candidate_pairs(p, s)
    assert len(live) > 1000
    assert res.metrics["state"]["horizon_violations"] == 0


def test_seed_endpoints_both_arrival_orders(seed_run):
    _, manifest, url, _ = seed_run
    live = pair_set(url)
    _, _, pay, sig = accepted_latest(url)
    for label in ("A", "B"):
        case = manifest["cases"][f"endpoint_{label}"]
        pid = case["payment_id"]
        for sid in case["match"]:
            assert (pid, sid) in live
        for sid in case["no_match"]:
            assert (pid, sid) not in live
        sigs = case["match"] + case["no_match"]
        if case["order"] == "payment-first":
            assert all(pay[pid][3] < sig[x][3] for x in sigs)
        else:
            assert all(pay[pid][3] > sig[x][3] for x in sigs)


def test_seed_revisions_duplicates_and_quarantine(seed_run):
    _, manifest, url, _ = seed_run
    rows = pairs(url, include_retired=True)
    rev = [r for r in rows if r["signal_id"] == "risk-rev" and r["payment_id"] == "pay-rev-sig"]
    assert sorted((r["signal_rev"], r["status"]) for r in rev) == [(1, "retired"), (2, "current")]
    cur = [r for r in pairs(url) if r["payment_id"] == "pay-rev-pay"]
    assert cur and {r["payment_rev"] for r in cur} == {2}
    store = Store(url)
    acct = {(r["topic"], r["partition"]): r for r in store.accounting("join")}
    reasons = sorted(q["reason"] for q in store.quarantine_rows("join"))
    a = S.archive.c
    disp = {(r["event_id"], r["revision"], r["disposition"]) for r in store.rows(
        select(a.event_id, a.revision, a.disposition).where(a.disposition.in_(("duplicate",
                                                                                "stale"))))}
    store.dispose()
    assert all(r["closes"] for r in acct.values())
    assert sum(r["read"] for r in acct.values()) == manifest["events"]
    assert reasons == sorted(["conflicting_duplicate", "event_time_after_arrival", "malformed_json",
                              "missing_field", "naive_time", "non_integer_cents"])
    assert disp == {("pay-dup", 1, "duplicate"), ("pay-rev-pay", 1, "stale")}


def test_seed_old_correction_is_queued_with_its_date_and_changes_nothing_live(seed_run):
    _, manifest, url, _ = seed_run
    case = manifest["cases"]["old_correction"]
    store = Store(url)
    q = store.queue("join")
    store.dispose()
    assert [(e["event_id"], e["revision"], e["queue_date"], e["reason"], e["status"])
            for e in q] == [("pay-old", 2, "2026-10-06", "correction:old_version_not_in_state",
                             "pending")]
    assert q[0]["event_us"] == parse_utc_us(case["new_event_time"])
    live = [r for r in pairs(url) if r["payment_id"] == "pay-old"]
    assert {r["payment_rev"] for r in live} == {1}
    assert case["loses"] in {r["signal_id"] for r in live}
    assert case["gains"] not in {r["signal_id"] for r in live}
    assert outcomes(url)["pay-old"]["status"] == "final"


def test_seed_outcomes_are_final_after_end_of_stream_and_match_counts(seed_run):
    _, _, url, _ = seed_run
    outs = outcomes(url)
    live = pair_set(url)
    counts = {}
    for p, _ in live:
        counts[p] = counts.get(p, 0) + 1
    assert {o["status"] for o in outs.values()} == {"final"}
    for pid, o in outs.items():
        assert o["match_count"] == counts.get(pid, 0), pid


def test_without_end_of_stream_outcomes_stay_provisional_and_can_continue(seed_dir, sqlite_url):
    src, _ = seed_dir
    run_join(src, sqlite_url)
    outs = outcomes(sqlite_url)
    assert "provisional" in {o["status"] for o in outs.values()} or \
        len([o for o in outs.values() if o["status"] == "final"]) < len(outs)
    # Finalizing later gives exactly the uninterrupted end-of-stream result.
    res = run_join(src, sqlite_url, end_of_stream=True)
    assert res.records == 0 and res.end_of_stream
    p, s, _, _ = accepted_latest(sqlite_url)
    assert pair_set(sqlite_url) == fast_candidate_pairs(p, s)
    assert {o["status"] for o in outcomes(sqlite_url).values()} == {"final"}


def test_too_short_ttl_loses_the_named_valid_match(seed_dir, sqlite_url, tmp_path):
    src, manifest = seed_dir
    case = manifest["cases"]["ttl"]
    run_join(src, sqlite_url, end_of_stream=True)
    assert (case["payment_id"], case["signal_id"]) in pair_set(sqlite_url)
    ttl_url = f"sqlite:///{tmp_path}/ttl.sqlite"
    res = run_join(src, ttl_url, end_of_stream=True, ttl_us=5 * 60_000_000)
    ttl_pairs = pair_set(ttl_url)
    assert (case["payment_id"], case["signal_id"]) not in ttl_pairs
    assert ttl_pairs < pair_set(sqlite_url)
    assert res.metrics["state"]["ttl_evictions"] > 0


def test_idle_partition_holds_risk_wm_and_idle_after_resumes_cleanup(seed_dir, tmp_path):
    src, manifest = seed_dir
    quiet_from = parse_utc_us(manifest["cases"]["idle_partition"]["quiet_from"])
    burst_at = parse_utc_us(manifest["cases"]["idle_partition"]["burst_at"])
    held_url = f"sqlite:///{tmp_path}/held.sqlite"
    idle_url = f"sqlite:///{tmp_path}/idle.sqlite"
    run_join(src, held_url, batch_size=10, checkpoint_every=100)
    run_join(src, idle_url, batch_size=10, checkpoint_every=100, idle_after_us=60 * 60_000_000)
    held = Store(held_url).metrics_trace("join")
    idle = Store(idle_url).metrics_trace("join")
    lateness = 3 * 60_000_000
    # Held: until the burst, risk_wm never passes the idle partition's last event - 3 min.
    before_burst = [m for m in held if m["clock_us"] < burst_at]
    assert before_burst and max(m["input_wm"]["risk_signals"] for m in before_burst) \
        <= quiet_from - lateness
    # Idle-after 60 min: partition 2 (quiet for over two hours) is marked idle and risk_wm moves
    # on before the burst. The 50-minute-delayed partition 1 is never quiet that long, so it is
    # not mistaken for idle (a shorter idle_after would, and its records would turn late).
    idle_before = [m for m in idle if m["clock_us"] < burst_at]
    assert any(2 in m["idle_partitions"]["risk_signals"] for m in idle_before)
    assert max(m["input_wm"]["risk_signals"] for m in idle_before) > quiet_from + 60 * 60_000_000
    # State grows while held; with idleness evictions resume, so the peak is lower.
    peak_held = max(m["state"]["state_records"] for m in held)
    peak_idle = max(m["state"]["state_records"] for m in idle)
    assert peak_idle < peak_held
    assert all(m["state"]["horizon_violations"] == 0 for m in held + idle)
    # Hot key peak is recorded and is the hot merchant.
    assert held[-1]["state"]["peak"]["hot_key"] == manifest["hot_merchant"]
    assert held[-1]["state"]["peak"]["hot_key_records"] > 20
    # The resumed partition's backlog is late under idleness: joined with proof or queued,
    # never dropped; every one is accounted for.
    store = Store(idle_url)
    a = S.archive.c
    burst = store.rows(select(a.event_id, a.disposition).where(
        a.topic == "risk_signals", a.partition == 2, a.event_id.like("risk-idle-b%")))
    queued = {e["event_id"] for e in store.queue("join") if e["topic"] == "risk_signals"}
    store.dispose()
    assert len(burst) == 5
    assert {r["event_id"] for r in burst if r["disposition"] == "routed_to_repair"} == queued
    assert queued, "under idleness at least one backlog signal must be late without proof"
