"""Property tests (hypothesis) over the real worker and store: arrival order does not change the
pairs within the lateness bound; beyond it, nothing is lost."""

from __future__ import annotations

import shutil
import tempfile
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riskstream_tools.references.join import fast_candidate_pairs
from streaming.store.ops import Store
from streaming.timeutil import iso, parse_utc_us

from .joinutil import T0, pair_set, run_join, write_log

MERCHANTS = ["m1", "m2", "m3"]

event = st.tuples(st.sampled_from(MERCHANTS), st.integers(0, 240),  # minute of event time
                  st.integers(0, 170),  # transport delay in seconds, below the 3-min lateness
                  st.integers(0, 1))  # partition


def build(pays, sigs, pay_offset, sig_offset, extra_delay=None):
    """Lay events out as a file log; per-topic offsets make one input arrive wholesale later."""
    parts: dict = {}
    events = {}
    for kind, items, offset in (("payments", pays, pay_offset), ("risk_signals", sigs, sig_offset)):
        for i, (m, minute, delay, part) in enumerate(items):
            eid = f"{'p' if kind == 'payments' else 's'}{i}"
            t = T0 + timedelta(minutes=minute)
            extra = (extra_delay or {}).get(eid, 0)
            a = t + timedelta(minutes=offset + extra, seconds=delay)
            obj = ({"payment_id": eid, "revision": 1, "merchant_id": m, "account_id": "a",
                    "amount_cents": 100} if kind == "payments" else
                   {"signal_id": eid, "revision": 1, "merchant_id": m, "score": 0.5})
            obj.update(event_time=iso(t), arrival_time=iso(a))
            parts.setdefault((kind, part), []).append((a, eid, obj))
            events[eid] = (m, parse_utc_us(iso(t)))
    laid = {k: [o for _, _, o in sorted(v, key=lambda x: (x[0], x[1]))] for k, v in parts.items()}
    return laid, events


def split(events):
    pay = {k: v for k, v in events.items() if k.startswith("p")}
    sig = {k: v for k, v in events.items() if k.startswith("s")}
    return pay, sig


PROFILE = settings(max_examples=25, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture,
                                          HealthCheck.too_slow])


@PROFILE
@given(pays=st.lists(event, min_size=1, max_size=25), sigs=st.lists(event, min_size=1, max_size=25),
       pay_offset=st.integers(0, 90), sig_offset=st.integers(0, 90))
def test_any_arrival_order_within_lateness_gives_the_reference(pays, sigs, pay_offset, sig_offset,
                                                               store_factory):
    d = tempfile.mkdtemp()
    try:
        laid, events = build(pays, sigs, pay_offset, sig_offset)
        src = write_log(f"{d}/src", laid, {"payments": 2, "risk_signals": 2})
        url = store_factory()
        run_join(src, url, end_of_stream=True, batch_size=7)
        p, s = split(events)
        assert pair_set(url) == fast_candidate_pairs(p, s)
        store = Store(url)
        assert store.queue("join") == []
        store.dispose()
    finally:
        shutil.rmtree(d)


@PROFILE
@given(pays=st.lists(event, min_size=1, max_size=25), sigs=st.lists(event, min_size=1, max_size=25),
       late=st.dictionaries(st.sampled_from([f"p{i}" for i in range(25)] +
                                            [f"s{i}" for i in range(25)]),
                            st.integers(5, 120), max_size=6))
def test_beyond_lateness_nothing_is_lost(pays, sigs, late, store_factory):
    d = tempfile.mkdtemp()
    try:
        laid, events = build(pays, sigs, 0, 0, late)
        src = write_log(f"{d}/src", laid, {"payments": 2, "risk_signals": 2})
        url = store_factory()
        run_join(src, url, end_of_stream=True, batch_size=5)
        store = Store(url)
        from sqlalchemy import select

        from streaming.store import schema as S
        a = S.archive.c
        disp = {r["event_id"]: r["disposition"] for r in store.rows(
            select(a.event_id, a.disposition).where(a.pipeline == "join"))}
        queued = {q["event_id"]: q["reason"] for q in store.queue("join")}
        store.dispose()
        # Every event is accepted live or sits in the replay queue; none is dropped.
        assert set(disp) == set(events)
        assert {e for e, x in disp.items() if x == "routed_to_repair"} == set(queued)
        assert set(disp.values()) <= {"accepted", "routed_to_repair"}
        assert all(r.startswith(("late_payment:", "late_signal:")) for r in queued.values())
        # Live pairs are exactly the reference over what was accepted live (on time, or late
        # with proof); the queued events are left for the rebuild.
        accepted = {k: v for k, v in events.items() if disp[k] == "accepted"}
        p, s = split(accepted)
        assert pair_set(url) == fast_candidate_pairs(p, s)
        # And whatever the reference pairs among events that were never delayed, live has them.
        on_time = {k: v for k, v in events.items() if k not in late}
        p2, s2 = split(on_time)
        assert fast_candidate_pairs(p2, s2) <= pair_set(url)
    finally:
        shutil.rmtree(d)
