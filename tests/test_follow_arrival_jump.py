"""Follow mode and arrival-time jumps: a live record whose arrival nothing vouches for (the
newest message of its subject, from the future and far ahead of its partition and of every
other subject) is held back, moving no clock, until later records judge it: a later record of
its subject arriving earlier again makes it an `arrival_time_jump`, another subject reaching
its time confirms it. A partition that resumes after a quiet spell is read at once. A snapshot
read judges it against what the stream holds; a follow source opened while it is the newest
message holds it too."""

from __future__ import annotations

import time

import pytest

from streaming.contracts import PAYMENT, RISK_SIGNAL
from streaming.sources.nats import NatsSource
from streaming.sources.nats_follow import NatsFollowSource
from streaming.sources.records import DEFAULT_MAX_ARRIVAL_JUMP_US, JUMP_LOOKAHEAD
from streaming.timeutil import parse_utc_us
from tests.followutil import publish, throwaway_stream
from tests.joinutil import at, pay, sig, write_log

pytestmark = pytest.mark.nats

TOPICS = ["payments", "risk_signals"]
FIELDS = {"payments": PAYMENT.arrival_time_field,
          "risk_signals": RISK_SIGNAL.arrival_time_field}
FAR = "9999-12-31T23:59:00Z"


@pytest.fixture
def url():
    yield from throwaway_stream("jump")


def _publish(tmp_path, url, name: str, parts: dict) -> None:
    root = write_log(tmp_path / name, parts, {"payments": 2, "risk_signals": 1})
    publish(root, url)


def _poll_until(src: NatsFollowSource, want: int, seconds: float = 10.0) -> list:
    got: list = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        got.extend(src.poll(100, 0.2))
    return got


def _far_payment(pid: str) -> dict:
    rec = pay(pid, "m1", 0)
    rec.update(event_time=FAR, arrival_time=FAR)
    return rec


def test_live_far_future_record_is_held_until_judged(tmp_path, url):
    _publish(tmp_path, url, "a", {
        ("payments", 0): [pay(f"a{i}", "m1", i) for i in range(6)],
        ("payments", 1): [pay(f"b{i}", "m2", i) for i in range(6)],
        ("risk_signals", 0): [sig(f"s{i}", "m1", i) for i in range(6)]})
    src = NatsFollowSource(url, TOPICS, FIELDS)
    try:
        recs = list(src.merged({}))
        assert len(recs) == 18 and not any(r.fault for r in recs)
        positions = {(r.topic, r.partition): r.offset + 1 for r in recs}
        p0 = ("payments", 0)
        # The newest message of its subject, from 9999: held, its subject not caught up.
        _publish(tmp_path, url, "b", {p0: [_far_payment("pay-far")]})
        time.sleep(1.0)
        assert src.poll(100, 0.5) == []
        assert src.end_offset(p0) == 6
        assert not src.caught_up(p0, 6, parse_utc_us(at(10)))
        assert src.lag(positions)["payments:0"] == 1
        # Another subject moving on in 2026 does not confirm it.
        _publish(tmp_path, url, "c", {("payments", 1): [pay("b6", "m2", 6)]})
        got = _poll_until(src, 1)
        assert [(r.partition, r.offset, r.fault) for r in got] == [(1, 6, None)]
        # Its subject goes on at 2026: it was a jump, merged at its predecessor's arrival.
        _publish(tmp_path, url, "d", {p0: [pay("a7", "m1", 7)]})
        got = _poll_until(src, 2)
        assert [(r.partition, r.offset) for r in got] == [(0, 6), (0, 7)]
        assert got[0].fault is not None and got[0].fault[0] == "arrival_time_jump"
        assert FAR[:16] in got[0].fault[1]
        assert got[0].arrival_us == parse_utc_us(at(5))
        assert got[1].fault is None and got[1].arrival_us == parse_utc_us(at(7))
        # A journal replay reads the decision back by offset.
        assert src.read_at(p0, 6).fault == got[0].fault
        # Three hours of quiet on every subject, then p0 resumes: it arrived in the past (the
        # recording is from 2026-10), so it is read at once, moving the clock on.
        _publish(tmp_path, url, "e", {p0: [pay("a8", "m1", 190)]})
        got = _poll_until(src, 1)
        assert [(r.partition, r.offset, r.fault) for r in got] == [(0, 8, None)]
        assert got[0].arrival_us == parse_utc_us(at(190))
        # Another far-future record, then another subject reaching its time confirms it.
        _publish(tmp_path, url, "f", {p0: [_far_payment("pay-far-2")]})
        time.sleep(1.0)
        assert src.poll(100, 0.5) == []
        far_sig = sig("s-far", "m1", 0)
        far_sig.update(event_time=FAR, arrival_time=FAR)
        _publish(tmp_path, url, "g", {("risk_signals", 0): [far_sig]})
        got = _poll_until(src, 2)
        assert sorted((r.topic, r.offset, r.fault) for r in got) == [
            ("payments", 9, None), ("risk_signals", 6, None)]
    finally:
        src.close()


def test_newest_far_future_message_at_open(tmp_path, url):
    _publish(tmp_path, url, "a", {
        ("payments", 0): [pay(f"a{i}", "m1", i) for i in range(6)] + [_far_payment("pay-far")],
        ("payments", 1): [pay(f"b{i}", "m2", i) for i in range(6)],
        ("risk_signals", 0): [sig(f"s{i}", "m1", i) for i in range(6)]})
    # A bounded read judges it by the other partitions: a jump, moving no clock.
    snap = NatsSource(url, TOPICS, FIELDS, DEFAULT_MAX_ARRIVAL_JUMP_US)
    recs = list(snap.merged({}))
    faults = [(r.partition, r.offset) for r in recs if r.fault]
    assert faults == [(0, 6)]
    assert max(r.arrival_us for r in recs) == parse_utc_us(at(5))
    # A follow source holds it: the live tail delivers it and later records judge it.
    src = NatsFollowSource(url, TOPICS, FIELDS)
    try:
        assert src.end_offset(("payments", 0)) == 6
        assert len(list(src.merged({}))) == 18
        time.sleep(1.0)
        assert src.poll(100, 0.5) == []
        _publish(tmp_path, url, "b", {("payments", 0): [pay("a7", "m1", 7)]})
        got = _poll_until(src, 2)
        assert [(r.offset, r.fault is not None) for r in got] == [(6, True), (7, False)]
    finally:
        src.close()


def test_cluster_of_far_future_messages_on_one_subject_is_quarantined(tmp_path, url):
    """More far-future messages than the look-ahead, on one subject: they claim the future, so
    their own subject's later records cannot release them; once it goes on in 2026 all are
    jumps and no clock moved."""
    _publish(tmp_path, url, "a", {
        ("payments", 0): [pay(f"a{i}", "m1", i) for i in range(6)],
        ("payments", 1): [pay(f"b{i}", "m2", i) for i in range(6)],
        ("risk_signals", 0): [sig(f"s{i}", "m1", i) for i in range(6)]})
    src = NatsFollowSource(url, TOPICS, FIELDS)
    p0 = ("payments", 0)
    n = JUMP_LOOKAHEAD + 4
    try:
        assert len(list(src.merged({}))) == 18
        _publish(tmp_path, url, "b", {p0: [_far_payment(f"pay-far-{i}") for i in range(n)]})
        time.sleep(1.5)
        assert src.poll(100, 0.5) == []  # all held: nothing vouches for them
        assert src.end_offset(p0) == 6
        _publish(tmp_path, url, "c", {p0: [pay("a7", "m1", 7)]})
        got = _poll_until(src, n + 1)
        assert [r.offset for r in got] == list(range(6, 7 + n))
        assert all(r.fault is not None and r.fault[0] == "arrival_time_jump"
                   and r.arrival_us == parse_utc_us(at(5)) for r in got[:n])
        assert got[n].fault is None and got[n].arrival_us == parse_utc_us(at(7))
        assert all(src.read_at(p0, 6 + i).fault == got[i].fault for i in range(n))
    finally:
        src.close()
