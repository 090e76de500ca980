"""Arrival order on the real worker and store: all of a merchant's signals before its payments,
and the reverse, give the same pairs (the seed's candidate_pairs)."""

from __future__ import annotations

from datetime import timedelta

from riskstream_tools.references.join import candidate_pairs
from streaming.timeutil import parse_utc_us

from .joinutil import T0, at, pair_set, pay, run_join, sig, write_log

M = "merchant-29"
PAYMENTS = [pay(f"pay-{i}", M, m) for i, m in enumerate((0, 20, 45, 90))]
SIGNALS = [sig(f"risk-{i}", M, m) for i, m in enumerate((-47, -30, 8, 9, 40, 52, 53, 100))]


def shifted(objs, minutes):
    """Each record arrives `minutes` after its event time (the whole input delayed)."""
    out = []
    for o in objs:
        t = parse_utc_us(o["event_time"])
        a = T0 + timedelta(microseconds=t - parse_utc_us(at(0))) + timedelta(minutes=minutes)
        out.append({**o, "arrival_time": a.strftime("%Y-%m-%dT%H:%M:%SZ")})
    return out


def reference():
    return candidate_pairs({o["payment_id"]: (o["merchant_id"], parse_utc_us(o["event_time"]))
                            for o in PAYMENTS},
                           {o["signal_id"]: (o["merchant_id"], parse_utc_us(o["event_time"]))
                            for o in SIGNALS})


def test_all_signals_before_payments_and_the_reverse_give_the_same_pairs(tmp_path, store_factory):
    expected = reference()
    assert ("pay-0", "risk-0") in expected and ("pay-0", "risk-2") in expected
    # Signals first: every payment arrives 300 min after its event time.
    signals_first = write_log(tmp_path / "sf", {("payments", 0): shifted(PAYMENTS, 300),
                                                ("risk_signals", 0): shifted(SIGNALS, 0)})
    # Payments first: every signal arrives 300 min late.
    payments_first = write_log(tmp_path / "pf", {("payments", 0): shifted(PAYMENTS, 0),
                                                 ("risk_signals", 0): shifted(SIGNALS, 300)})
    a, b = store_factory(), store_factory()
    run_join(signals_first, a, end_of_stream=True)
    run_join(payments_first, b, end_of_stream=True)
    assert pair_set(a) == pair_set(b) == expected


def test_the_seed_example_pairs_once_across_a_crash_and_replay(tmp_path):
    """The seed snippet: pay-47 x risk-83 (merchant-29) and risk-84 on another merchant. The
    first attempt crashes after the sink received the match; the replay adds no second row."""
    import subprocess
    import sys

    from streaming.store.ops import Store
    src = write_log(tmp_path / "seed", {
        ("payments", 0): [{"payment_id": "pay-47", "revision": 1, "merchant_id": "merchant-29",
                           "account_id": "acct-8", "amount_cents": 2600,
                           "event_time": "2026-10-06T10:47:00Z",
                           "arrival_time": "2026-10-06T10:47:05Z"}],
        ("risk_signals", 0): [
            {"signal_id": "risk-84", "revision": 1, "merchant_id": "merchant-61", "score": 0.4,
             "event_time": "2026-10-06T10:51:00Z", "arrival_time": "2026-10-06T10:51:02Z"},
            {"signal_id": "risk-83", "revision": 1, "merchant_id": "merchant-29", "score": 0.9,
             "event_time": "2026-10-06T10:52:00Z", "arrival_time": "2026-10-06T10:52:02Z"}]})
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    cmd = [sys.executable, "-m", "streaming.cli.main", "join", "run", "--source", src,
           "--store", url, "--batch-size", "1", "--checkpoint-every", "10", "--quiet"]
    first = subprocess.run(cmd + ["--crash-at", "after-sink-write:3"], capture_output=True,
                           text=True, timeout=120)
    assert first.returncode == 137
    assert pair_set(url) == {("pay-47", "risk-83")}  # the sink has the match; no checkpoint yet
    subprocess.run(cmd + ["--end-of-stream"], check=True, capture_output=True, timeout=120)
    store = Store(url)
    publish = [f for f in store.facts("join", "pair") if f["status"] == "current"]
    store.dispose()
    assert pair_set(url) == {("pay-47", "risk-83")}
    assert len(publish) == 1
