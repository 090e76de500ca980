"""The live tail's polls (`streaming.sources.nats_follow`): a poll hands out at most what it
is asked for (a few more only where held records are released), the rest following in order at
the next poll, with the deliveries' JetStream timestamps kept for the end-to-end latency."""

from __future__ import annotations

import time

import pytest

from streaming.contracts import PAYMENT, RISK_SIGNAL
from streaming.sources.nats_follow import NatsFollowSource
from tests.followutil import publish, throwaway_stream
from tests.joinutil import pay, sig, write_log

TOPICS = ["payments", "risk_signals"]
FIELDS = {"payments": PAYMENT.arrival_time_field,
          "risk_signals": RISK_SIGNAL.arrival_time_field}


@pytest.fixture
def url():
    yield from throwaway_stream("tail")


@pytest.mark.nats
def test_a_poll_hands_out_at_most_its_limit_and_the_rest_in_order(tmp_path, url):
    publish(write_log(tmp_path / "a", {("payments", 0): [pay("a0", "m1", 0)],
                                       ("risk_signals", 0): [sig("s0", "m1", 0)]}), url)
    src = NatsFollowSource(url, TOPICS, FIELDS)
    try:
        assert len(list(src.merged({}))) == 2
        publish(write_log(tmp_path / "b", {
            ("payments", 0): [pay(f"a{i}", "m1", i) for i in range(1, 14)],
            ("risk_signals", 0): [sig(f"s{i}", "m1", i) for i in range(1, 10)]}), url)
        deadline = time.monotonic() + 10
        while src.lag({("payments", 0): 1, ("risk_signals", 0): 1}) != {
                "payments:0": 13, "risk_signals:0": 9} and time.monotonic() < deadline:
            time.sleep(0.05)
        polls: list[list] = []
        while sum(len(p) for p in polls) < 22 and time.monotonic() < deadline:
            got = src.poll(5, 0.2)
            assert len(got) <= 5
            if got:
                polls.append(got)
        got = [r for p in polls for r in p]
        assert [len(p) for p in polls[:4]] == [5, 5, 5, 5]
        for topic, n in (("payments", 13), ("risk_signals", 9)):
            assert [r.offset for r in got if r.topic == topic] == list(range(1, n + 1))
        assert not any(r.fault for r in got)
        # The deliveries' JetStream timestamps are kept for the end-to-end latency.
        stamps = src.take_stamps({"payments:0": [1, 13], "risk_signals:0": [1, 9]})
        assert len(stamps) == 22 and all(s > 1_700_000_000 * 10**9 for s in stamps)
    finally:
        src.close()


@pytest.mark.nats
def test_records_a_release_pushes_past_the_limit_wait_for_the_next_poll(tmp_path, url):
    far = pay("a-far", "m1", 0)
    far.update(event_time="9999-12-31T23:59:00Z", arrival_time="9999-12-31T23:59:00Z")
    publish(write_log(tmp_path / "a", {("payments", 0): [pay("a0", "m1", 0)],
                                       ("risk_signals", 0): [sig("s0", "m1", 0)]}), url)
    src = NatsFollowSource(url, TOPICS, FIELDS)
    p0 = ("payments", 0)
    try:
        assert len(list(src.merged({}))) == 2
        # From the future and nothing confirms it: held back.
        publish(write_log(tmp_path / "b", {p0: [far]}), url)
        time.sleep(1.0)
        assert src.poll(5, 0.5) == []
        # Five more of its subject; the first shows it was a jump, releasing it with itself.
        publish(write_log(tmp_path / "c", {p0: [pay(f"a{i}", "m1", i) for i in range(1, 6)]}),
                url)
        deadline = time.monotonic() + 10
        while src.lag({p0: 1})["payments:0"] < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        first = src.poll(5, 0.5)
        assert [(r.offset, r.fault is not None) for r in first] == [
            (1, True), (2, False), (3, False), (4, False), (5, False)]
        # The last delivery went back to the inbox, in order, for the next poll.
        assert [(r.offset, r.fault) for r in src.poll(5, 0.5)] == [(6, None)]
    finally:
        src.close()
