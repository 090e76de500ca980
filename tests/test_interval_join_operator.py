"""The interval-join operator as a pure state machine: records and watermarks in, facts out.

No store, no source: these tests drive `on_record` / `on_watermark` by hand."""

from __future__ import annotations

from streaming.operators.base import ACCEPTED, DUPLICATE, ROUTED, STALE, Emit
from streaming.operators.interval_join import (RULE_VERSION, IntervalJoin, pair_id)
from streaming.timeutil import parse_utc_us

from .joinutil import at, pay, record, sig

M = "merchant-1"


def feed(op, items, out=None):
    """items: record dicts, or ("wm", topic, "minute") tuples."""
    out = out or Emit()
    for i, it in enumerate(items):
        if isinstance(it, tuple):
            _, topic, minute = it
            op.on_watermark(topic, parse_utc_us(at(minute)), out)
        else:
            op.on_record(record(it, offset=i), out)
    return out


def published(out):
    return {(f.payload["payment_id"], f.payload["signal_id"]) for f in out.facts
            if f.kind == "pair" and f.status == "current"}


def retired(out):
    return {(f.payload["payment_id"], f.payload["signal_id"]) for f in out.facts
            if f.kind == "pair" and f.status == "retired"}


def outcomes(out):
    return [(f.payload["payment_id"], f.status, f.payload["match_count"]) for f in out.facts
            if f.kind == "outcome"]


ENDPOINT_SIGNALS = [
    sig("s-lo", M, -47), sig("s-lo-out", M, -47, seconds=-1),
    sig("s-hi", M, 8), sig("s-hi-out", M, 8, seconds=1)]


def test_endpoints_inclusive_payment_first():
    op = IntervalJoin()
    out = feed(op, [pay("p", M, 0)] + ENDPOINT_SIGNALS)
    assert published(out) == {("p", "s-lo"), ("p", "s-hi")}


def test_endpoints_inclusive_signal_first():
    op = IntervalJoin()
    out = feed(op, ENDPOINT_SIGNALS + [pay("p", M, 0)])
    assert published(out) == {("p", "s-lo"), ("p", "s-hi")}


def test_pair_id_is_stable_and_names_rule_revisions():
    op = IntervalJoin()
    out = feed(op, [pay("p", M, 0), sig("s", M, 1)])
    [f] = [f for f in out.facts if f.kind == "pair"]
    assert f.payload["pair_id"] == pair_id(RULE_VERSION, "p", 1, "s", 1)
    assert f.logical_key == f"p|s|{RULE_VERSION}"
    assert pair_id(RULE_VERSION, "p", 1, "s", 2) != f.payload["pair_id"]


def test_provisional_then_retracted_then_final():
    op = IntervalJoin()
    out = feed(op, [pay("p", M, 0), sig("s", M, 5), ("wm", "risk_signals", 8.5)])
    assert outcomes(out) == [("p", "provisional", 0), ("p", "retracted", 1), ("p", "final", 1)]


def test_payment_with_match_on_arrival_has_no_provisional():
    op = IntervalJoin()
    out = feed(op, [sig("s", M, -5), pay("p", M, 0), ("wm", "risk_signals", 9)])
    assert outcomes(out) == [("p", "final", 1)]


def test_horizon_rule_uses_opposite_watermark_without_extra_lateness():
    op = IntervalJoin()
    out = feed(op, [pay("p", M, 0), ("wm", "risk_signals", 8)])
    assert "p" in op.pay_live  # risk_wm == t + 8 min: still retained
    feed(op, [("wm", "risk_signals", 8.01)], out)
    assert "p" not in op.pay_live
    # The emptied key gave up its entry; the fallback still bounds what was evicted.
    assert M not in op.evicted_max_pay and op._evicted_max_pay(M) >= parse_utc_us(at(0))
    feed(op, [sig("s", M, 30), ("wm", "payments", 77)])
    assert "s" in op.sig_live  # payment_wm == s + 47 min
    feed(op, [("wm", "payments", 77.01)])
    assert "s" not in op.sig_live
    assert op.horizon_violations() == []


def test_payment_age_alone_never_evicts():
    # Without the opposite watermark moving, even very old payments stay (no wall-clock timer).
    op = IntervalJoin()
    out = feed(op, [pay("p", M, 0), ("wm", "payments", 600)])
    op.on_clock(parse_utc_us(at(900)), out)
    assert "p" in op.pay_live


def test_too_short_ttl_loses_a_valid_match():
    op = IntervalJoin(ttl_us=5 * 60_000_000)
    # Only the TTL mode asks the host for a clock tick after every record.
    assert op.clocked and not IntervalJoin().clocked
    out = Emit()
    s = record(sig("s", M, -40))
    op.on_record(s, out)
    op.on_clock(parse_utc_us(at(-34)), out)  # 6 min of source time later
    op.on_record(record(pay("p", M, 0)), out)
    assert published(out) == set()
    assert op.counters["ttl_evictions"] == 1


def test_duplicate_stale_and_conflict():
    op = IntervalJoin()
    out = feed(op, [pay("p", M, 0, cents=100), pay("p", M, 0, arrival=1, cents=100)])
    assert [d for _, d in out.disposed()] == [ACCEPTED, DUPLICATE]
    out = feed(op, [pay("p", M, 0, cents=999)])
    assert out.quarantine[0].reason == "conflicting_duplicate"
    out = feed(op, [pay("p", M, 0, rev=2, cents=120), pay("p", M, 0, cents=100)])
    assert [d for _, d in out.disposed()] == [ACCEPTED, STALE]


def test_signal_revision_in_horizon_retires_old_pair_and_publishes_new():
    op = IntervalJoin()
    out = feed(op, [sig("s", M, -5, score=0.1), pay("p", M, 0), sig("s", M, -5, rev=2, score=0.9)])
    old = pair_id(RULE_VERSION, "p", 1, "s", 1)
    new = pair_id(RULE_VERSION, "p", 1, "s", 2)
    [ret] = [f for f in out.facts if f.status == "retired"]
    assert ret.payload["pair_id"] == old and ret.payload["successor_pair_id"] == new
    assert [f.payload["pair_id"] for f in out.facts if f.status == "current"] == [old, new]


def test_signal_revision_that_moves_out_of_range_restores_provisional():
    op = IntervalJoin()
    out = feed(op, [pay("p", M, 0), sig("s", M, 5), sig("s", M, 20, rev=2)])
    assert retired(out) == {("p", "s")}
    assert outcomes(out) == [("p", "provisional", 0), ("p", "retracted", 1),
                             ("p", "provisional", 0)]


def test_correction_beyond_horizon_goes_to_queue_and_changes_nothing_live():
    op = IntervalJoin()
    out = feed(op, [pay("p", M, 0), sig("s", M, 2), ("wm", "risk_signals", 30),
                    ("wm", "payments", 30)])
    assert "p" not in op.pay_live
    before = len(out.facts)
    feed(op, [pay("p", M, 4, rev=2, cents=500)], out)
    assert len(out.facts) == before
    [q] = out.queue
    assert q.reason == "correction:old_version_not_in_state"
    assert q.detail["old_revision"] == 1 and q.revision == 2
    assert out.disposed()[-1][1] == ROUTED


def test_late_payment_joins_live_only_with_proof():
    op = IntervalJoin()
    out = feed(op, [pay("p1", M, 100), ("wm", "payments", 97)])
    # p2 at 60 is late (payment_wm 97); no signal of M was ever evicted: it joins live.
    feed(op, [pay("p2", M, 60)], out)
    assert out.disposed()[-1][1] == ACCEPTED and op.counters["late_joined"] == 1
    # A signal at 20 is beyond its horizon on arrival (20 + 47 < 97): it matches p2, then goes.
    feed(op, [sig("s", M, 20)], out)
    assert ("p2", "s") in published(out) and "s" not in op.sig_live
    assert op.evicted_max_sig[M] == parse_utc_us(at(20))
    # p3 at 62 is late and s (20 >= 62 - 47) may have been its counterpart: no proof, queued.
    feed(op, [pay("p3", M, 62)], out)
    assert out.queue[-1].event_id == "p3"
    assert out.queue[-1].reason == "late_payment:counterpart_evicted"


def test_late_signal_near_a_queued_payment_is_queued_too():
    op = IntervalJoin()
    out = feed(op, [pay("p", M, 0), sig("s0", M, 2), ("wm", "risk_signals", 30),
                    ("wm", "payments", 30), pay("p", M, 4, rev=2)])
    assert out.queue[-1].event_id == "p"
    feed(op, [sig("s-late", M, 6)], out)  # late (risk_wm 30); p's correction is queued nearby
    assert out.queue[-1].event_id == "s-late"
    assert out.queue[-1].reason.startswith("late_signal:")


def test_snapshot_restore_round_trip_continues_identically():
    items = [pay("a", M, 0), sig("s1", M, -10), pay("b", M, 3), ("wm", "risk_signals", 5)]
    rest = [sig("s2", M, 4), ("wm", "risk_signals", 20), ("wm", "payments", 60)]
    op1 = IntervalJoin()
    feed(op1, items)
    out1 = feed(op1, rest)
    op2 = IntervalJoin()
    out2 = feed(op2, items)
    import orjson
    op3 = IntervalJoin()
    op3.restore(orjson.loads(orjson.dumps(op2.snapshot())))
    assert op3.peak == op2.peak and op3.peak["hot_key"] == M
    assert op3.peak["records"] == 3 and op3.peak["hot_key_records"] == 3
    out3 = feed(op3, rest)
    assert [(f.fact_key, f.payload_hash) for f in out1.facts] == \
        [(f.fact_key, f.payload_hash) for f in out3.facts]
    assert op3.peak == op1.peak and op1.peak["records"] == 4
    # The counters continue too, the pairs published (a machine int beside the map) included.
    before = sum(1 for f in out2.facts if f.kind == "pair" and f.status == "current")
    after = sum(1 for f in out3.facts if f.kind == "pair" and f.status == "current")
    assert (before, after) == (2, 2)
    assert op3.counters == op1.counters
    assert (op2.counters["pairs_published"], op3.counters["pairs_published"]) == (2, 4)
    assert op3.state_metrics()["pairs_published"] == 4


def test_eviction_counts_continue_through_a_restore_and_reach_the_metrics():
    """The evicted payments and signals are counted as machine ints beside the counters map:
    a snapshot holds them, a restore goes on from them, and the metrics read them."""
    import orjson
    first = [pay("a", M, 0), sig("s1", M, -10), pay("b", M, 3), sig("s2", M, 4),
             ("wm", "risk_signals", 20), ("wm", "payments", 60)]
    later = [pay("c", M, 70), sig("s3", M, 68), ("wm", "risk_signals", 90),
             ("wm", "payments", 140)]
    op = IntervalJoin()
    feed(op, first)
    assert (op.counters["evicted_payments"], op.counters["evicted_signals"]) == (2, 2)
    again = IntervalJoin()
    again.restore(orjson.loads(orjson.dumps(op.snapshot())))
    feed(again, later)
    feed(op, later)
    assert (again.counters["evicted_payments"], again.counters["evicted_signals"]) == (3, 3)
    assert again.counters == op.counters
    metrics = again.state_metrics()
    assert (metrics["evicted_payments"], metrics["evicted_signals"]) == (3, 3)


def test_old_identities_are_pruned_below_the_watermark_and_redelivery_is_queued_not_dropped():
    op = IntervalJoin(identity_retention_us=60 * 60_000_000)
    out = feed(op, [pay("old", M, 0), sig("s", M, 1), ("wm", "risk_signals", 30),
                    ("wm", "payments", 30)])
    assert op.pay_ids["old"].where == "evicted"
    feed(op, [("wm", "risk_signals", 200), ("wm", "payments", 200)], out)
    assert "old" not in op.pay_ids and "s" not in op.sig_ids
    assert op.counters["identities_pruned"] == 2
    feed(op, [pay("old", M, 0, arrival=200)], out)  # a very late redelivery
    assert out.queue[-1].event_id == "old" and out.disposed()[-1][1] == ROUTED
