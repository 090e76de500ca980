"""The interval-join rule is stated twice, once in the live operator and once in the DuckDB
rebuild (`join_rebuild`); on generated workloads the two must give identical pairs and final
outcomes, field for field.

Workloads: hot keys (most events on one merchant), signals at exactly -47 min and +8 min from a
payment and one second beyond either bound, and revisions of payments and signals that move
their event time (across a bound) and change the amount or score. A revision that moves a record
to another key is always queued by the live path (its state is per key), so the generator keeps
the key. Every record arrives within
the lateness bound and every revision before the record it revises is final, so the live path
applies all of them and the queue stays empty: any difference is a difference of the rule."""

from __future__ import annotations

import shutil
import tempfile
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming import join_published as P
from streaming import join_rebuild as R
from streaming.store.ops import Store
from streaming.timeutil import US_PER_DAY, iso, parse_utc_us

from .joinutil import T0, run_join, write_log

MERCHANTS = ["hot", "hot", "hot", "hot", "m1", "m2"]  # sampled: one hot key
LOWER, UPPER = timedelta(minutes=47), timedelta(minutes=8)
SECOND = timedelta(seconds=1)
# Signal offsets from a payment: at each bound exactly, one second inside, one second beyond.
EDGES = [-LOWER, -LOWER + SECOND, -LOWER - SECOND, UPPER, UPPER - SECOND, UPPER + SECOND,
         timedelta(0)]

revision = st.one_of(
    st.none(),
    st.fixed_dictionaries({
        "shift_s": st.sampled_from([-1, 0, 1, 30, 60]),  # moves the event time (across a bound)
        "after_s": st.integers(1, 40),  # arrives this long after the record it revises
    }))
payment = st.fixed_dictionaries({
    "merchant": st.sampled_from(MERCHANTS), "minute": st.integers(50, 200),
    "delay_s": st.integers(0, 60), "cents": st.integers(1, 10_000), "rev": revision})
signal = st.fixed_dictionaries({
    "of_payment": st.integers(0, 1_000),  # anchored on a payment (modulo their number)
    "edge": st.sampled_from(EDGES), "free_minute": st.one_of(st.none(), st.integers(0, 240)),
    "merchant": st.one_of(st.none(), st.sampled_from(MERCHANTS)),
    "delay_s": st.integers(0, 60), "score": st.floats(0, 1, allow_nan=False, width=32),
    "rev": revision})


def _records(kind: str, i: int, spec: dict, t, merchant: str) -> list[tuple]:
    """(arrival, order, record) for the first revision and the optional second one."""
    eid = f"{kind[0]}{i}"

    def obj(rev: int, when, m: str, arrival) -> dict:
        base = ({"payment_id": eid, "account_id": "acct-1",
                 "amount_cents": spec["cents"] + rev - 1} if kind == "payments" else
                {"signal_id": eid, "score": round(spec["score"], 3) if rev == 1 else 0.9})
        return {**base, "revision": rev, "merchant_id": m, "event_time": iso(when),
                "arrival_time": iso(arrival)}

    arrival = t + timedelta(seconds=spec["delay_s"])
    out = [(arrival, eid, 1, obj(1, t, merchant, arrival))]
    r = spec["rev"]
    if r is not None:
        t2 = t + timedelta(seconds=r["shift_s"])
        a2 = max(arrival, t2) + timedelta(seconds=r["after_s"])
        out.append((a2, eid, 2, obj(2, t2, merchant, a2)))
    return out


def layout(pays: list[dict], sigs: list[dict]) -> dict:
    """One partition per topic, each in arrival order."""
    parts: dict[tuple[str, int], list] = {("payments", 0): [], ("risk_signals", 0): []}
    times = []
    for i, p in enumerate(pays):
        t = T0 + timedelta(minutes=p["minute"])
        times.append((t, p["merchant"]))
        parts[("payments", 0)] += _records("payments", i, p, t, p["merchant"])
    for i, s in enumerate(sigs):
        anchor_t, anchor_m = times[s["of_payment"] % len(times)]
        t = (T0 + timedelta(minutes=s["free_minute"]) if s["free_minute"] is not None
             else anchor_t + s["edge"])
        parts[("risk_signals", 0)] += _records("risk_signals", i, s, t,
                                               s["merchant"] or anchor_m)
    return {k: [o for *_, o in sorted(v, key=lambda x: x[:3])] for k, v in parts.items()}


def live_and_rebuilt(src: str, url: str) -> tuple[list, list, list, list]:
    run_join(src, url, end_of_stream=True, batch_size=11)
    store = Store(url)
    try:
        assert store.queue("join") == [], "every record was meant to be applied live"
        day = parse_utc_us(iso(T0)) // US_PER_DAY * US_PER_DAY
        merchants = sorted({m for m in MERCHANTS})
        cand = R.build_candidate(store, [], pieces=[P.Piece(m, day, day + US_PER_DAY - 1)
                                                    for m in merchants])
        live_pairs = [{k: v for k, v in r.items() if k != "status"}
                      for r in P.published_pairs(store)]
        return live_pairs, cand.pairs, P.published_outcomes(store), cand.outcomes
    finally:
        store.dispose()


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pays=st.lists(payment, min_size=1, max_size=14),
       sigs=st.lists(signal, min_size=0, max_size=24))
def test_rebuild_equals_live_operator(pays, sigs):
    d = tempfile.mkdtemp()
    try:
        src = write_log(f"{d}/src", layout(pays, sigs))
        live_pairs, rebuilt_pairs, live_outcomes, rebuilt_outcomes = live_and_rebuilt(
            src, f"sqlite:///{d}/ops.sqlite")
        assert rebuilt_pairs == live_pairs
        assert rebuilt_outcomes == live_outcomes
        assert len(live_outcomes) == len(pays)
    finally:
        shutil.rmtree(d)


def test_bounds_are_inclusive_on_both_sides(tmp_path):
    """The fixed corner the generator aims at: signals at exactly -47 min and +8 min pair, one
    second beyond either bound does not, in both paths."""
    pays = [{"merchant": "hot", "minute": 100, "delay_s": 0, "cents": 5, "rev": None}]
    sigs = [{"of_payment": 0, "edge": e, "free_minute": None, "merchant": None, "delay_s": 0,
             "score": 0.5, "rev": None} for e in EDGES]
    src = write_log(tmp_path / "src", layout(pays, sigs))
    live_pairs, rebuilt_pairs, _, _ = live_and_rebuilt(src, f"sqlite:///{tmp_path}/ops.sqlite")
    assert rebuilt_pairs == live_pairs
    paired = {r["signal_id"] for r in live_pairs}
    assert paired == {f"r{i}" for i, e in enumerate(EDGES) if -LOWER <= e <= UPPER}
    assert len(paired) == 5
