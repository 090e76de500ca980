"""Pressure: a sink throttled in worker-clock time until the backlog reaches a known size, then
full capacity. The numbers follow from the workload: 8 category versions at 09:00:00 and one
payment every 0.25 s from 09:00:00 (4 records/s); sink ticks every second of worker clock."""

from __future__ import annotations

import pytest

from riskstream_tools.workloads.ledger_seed import generate
from streaming.host.throttle import ThrottleSettings
from streaming.store.ops import Store

from .ledgerutil import facts_digest, run_ledger


@pytest.fixture(scope="module")
def pressure(tmp_path_factory):
    out = tmp_path_factory.mktemp("ledger_pressure")
    generate(5, str(out), payments=600, rate=4.0, scenario=False)
    return str(out)


def test_throttle_fills_to_limit_then_drains_at_capacity(pressure, store_url, tmp_path):
    res = run_ledger(pressure, store_url, end_of_stream=True,
                     throttle=ThrottleSettings(sink_rate=1, backlog_limit=240, capacity_rate=10))
    b = res.backlog
    # Fill: after the tick at 09:00:k the sink has committed k records and 8 + 4k were read,
    # so the backlog is 8 + 3k; after the tick at 09:01:16 it is 236 and the 240th uncommitted
    # record is the payment arriving at 09:01:16.75.
    assert b["limit_reached_at"] == "2026-10-06T09:01:16.750000Z"
    assert (b["peak_backlog"], b["peak_at"]) == (240, "2026-10-06T09:01:16.750000Z")
    assert b["fill_s"] == 76.75 and b["growth_rate"] == pytest.approx((316 - 76) / 76.75)
    # Drain: capacity 10/s against 4 arrivals/s: 230 left after the tick at 09:01:17, then
    # 6 fewer per tick; the tick at 09:01:56 commits the last 6.
    assert b["drained_at"] == "2026-10-06T09:01:56Z"
    assert b["time_to_drain_s"] == 39.25
    assert b["net_drain_rate"] == pytest.approx(240 / 39.25)
    assert b["arrival_rate_drain"] == pytest.approx(156 / 39.25)
    assert b["expected_net_drain_rate"] == pytest.approx(10 - 156 / 39.25)
    assert (b["read"], b["committed"]) == (608, 608)
    assert any("net drain 6.115 rec/s" in line for line in res.backlog_lines)
    store = Store(store_url)
    try:
        trace = store.metrics_trace("ledger")
        first_capacity = next(m for m in trace if m["backlog"]["sink_phase"] == "capacity")
        # Committed by then: 76 + 10 records (8 versions, payments 0..77); the oldest
        # uncommitted is payment 78, arrived 09:00:19.5, at worker clock 09:01:17.
        assert first_capacity["backlog"]["backlog_records"] == 230
        assert first_capacity["backlog"]["backlog_age_s"] == 57.5
        assert first_capacity["event_time_lag_s"]["payments"] > 300
        throttled = [m for m in trace if m["backlog"]["sink_phase"] == "throttled"]
        assert [m["backlog"]["backlog_records"] for m in throttled[:3]] == [11, 14, 17]
        assert max(m["backlog"]["backlog_records"] for m in trace) == 236
        throttled_digest = facts_digest(store)
    finally:
        store.dispose()
    # The throttle moves batch boundaries only: the published facts equal an unthrottled run.
    plain = f"sqlite:///{tmp_path}/plain.sqlite"
    run_ledger(pressure, plain, end_of_stream=True)
    other = Store(plain)
    try:
        assert facts_digest(other) == throttled_digest and throttled_digest[0] >= 20
    finally:
        other.dispose()
