"""The ledger operator as a pure state machine: revisions, deduplication, the temporal join,
routing beyond retention and checkpoint round trips."""

from __future__ import annotations

import orjson

from riskstream_tools.workloads.ledger_seed import at, payment, version
from streaming.operators.base import ACCEPTED, DUPLICATE, ROUTED, STALE, Emit
from streaming.operators.ledger import (I_ACCOUNT, I_EVENT, I_HOUR, I_MERCHANT, REPAIR_TABLE,
                                       LedgerOperator)
from streaming.repairs.ledger import verify

from .ledgerutil import TEST_KEY, Driver

H10 = "acct-8|2026-10-06T10:00Z"


def cat_v(vid, merchant, category, high, start, end=None, arrival=None):
    return version(vid, merchant, category, high, start, end, arrival or at(7))


def pay(pid, minute_h, minute_m, cents, merchant="m-1", arrival=None, rev=1, account="acct-8"):
    t = at(minute_h, minute_m)
    return payment(pid, account, merchant, t, arrival or t, cents, rev)


def windows_of(out: Emit) -> list[tuple[str, int, str, int, int]]:
    return [(f.logical_key, f.payload["revision"], f.status, f.payload["total_cents"],
             f.payload["risk_count"]) for f in out.facts]


def test_provisional_then_revision_two_then_final():
    d = Driver()
    d.feed(cat_v("v1", "m-1", "grocery", False, at(0)))
    d.feed(pay("p1", 10, 5, 2600))
    d.feed(pay("p2", 10, 30, 900))
    out = d.feed(pay("bg", 11, 5, 1, account="acct-x"))  # payments_wm reaches 11:00
    assert windows_of(out) == [(H10, 1, "provisional", 3500, 0)]
    assert out.facts[0].fact_key == "acct-8|2026-10-06T10:00Z|1"
    late = d.feed(pay("p3", 10, 45, 1200, arrival=at(11, 15)))
    assert [disp for _, disp in late.disposed()] == [ACCEPTED]
    assert windows_of(late) == [(H10, 2, "revised", 4700, 0)]
    assert late.facts[0].predecessor_key == "acct-8|2026-10-06T10:00Z|1"
    final = d.feed(pay("bg2", 12, 6, 1, account="acct-x"))  # payments_wm reaches 12:01
    assert (H10, 3, "final", 4700, 0) in windows_of(final)
    assert H10 not in d.op.windows


def test_duplicate_same_content_no_effect_other_content_quarantined():
    d = Driver()
    d.feed(pay("p1", 10, 5, 2600))
    same = d.feed(pay("p1", 10, 5, 2600, arrival=at(10, 20)))
    assert [disp for _, disp in same.disposed()] == [DUPLICATE] and not same.facts
    other = d.feed(pay("p1", 10, 5, 9999, arrival=at(10, 21)))
    assert not other.disposed() and not other.facts
    assert [(q.reason, q.offset) for q in other.quarantine] == [("conflicting_duplicate", 2)]
    stale_then = d.feed(pay("p1", 10, 5, 3000, rev=2, arrival=at(10, 22)))
    assert [disp for _, disp in stale_then.disposed()] == [ACCEPTED]
    stale = d.feed(pay("p1", 10, 5, 2600, rev=1, arrival=at(10, 23)))
    assert [disp for _, disp in stale.disposed()] == [STALE]
    assert d.op.windows[H10].payments["p1"][2] == 3000


def test_category_change_after_payment_follows_event_time():
    d = Driver()
    d.feed(cat_v("v1", "m-1", "grocery", False, at(0)))
    d.feed(pay("before", 10, 10, 900))
    d.feed(pay("after", 10, 20, 1500))
    d.feed(pay("bg", 11, 5, 1, account="acct-x"))
    change = d.feed(cat_v("v2", "m-1", "gambling", True, at(10, 15), arrival=at(11, 20)))
    assert [disp for _, disp in change.disposed()] == [ACCEPTED]
    f = change.facts[0]
    assert (f.payload["revision"], f.payload["risk_count"]) == (2, 1)
    assert f.payload["category_counts"] == {"gambling": 1, "grocery": 1}
    # A newer version from 13:00 changes nothing at 10:xx: no revision.
    newer = d.feed(cat_v("v3", "m-1", "grocery", False, at(13), arrival=at(11, 30)))
    assert not newer.facts and [disp for _, disp in newer.disposed()] == [ACCEPTED]
    assert d.op.cats.effective("m-1", d.op.ids["after"][5])[2] == "v2"


def test_overlapping_and_equal_from_versions_quarantined_with_reason():
    d = Driver()
    d.feed(cat_v("a", "m-3", "fuel", False, at(0), at(12)))
    overlap = d.feed(cat_v("b", "m-3", "fuel", True, at(11), at(23)))
    equal = d.feed(cat_v("c", "m-3", "pharmacy", False, at(0)))
    inside = d.feed(cat_v("d", "m-3", "toys", False, at(6)))
    same = d.feed(cat_v("a", "m-3", "fuel", False, at(0), at(12), arrival=at(8)))
    assert [q.reason for q in overlap.quarantine] == ["overlapping_versions"]
    assert "overlaps version a" in overlap.quarantine[0].detail
    assert [q.reason for q in equal.quarantine] == ["category_equal_from"]
    assert [q.reason for q in inside.quarantine] == ["overlapping_versions"]
    assert [disp for _, disp in same.disposed()] == [DUPLICATE]
    assert [v[2] for v in d.op.cats.by_merchant["m-3"]] == ["a"]


def test_payment_beyond_retention_becomes_signed_request():
    d = Driver()
    d.feed(pay("p1", 10, 5, 2600))
    d.feed(pay("bg", 12, 6, 1, account="acct-x"))
    out = d.feed(pay("p9", 10, 50, 400, arrival=at(12, 30)))
    assert [disp for _, disp in out.disposed()] == [ROUTED] and not out.facts
    (req,) = out.extra[REPAIR_TABLE]
    assert (req["kind"], req["account_id"], req["event_hour"], req["subject_id"], req["reason"]) \
        == ("payment", "acct-8", "2026-10-06T10:00Z", "p9", "beyond_retention")
    assert verify(TEST_KEY, req) is None
    assert verify(TEST_KEY, {**req, "account_id": "acct-9"}).startswith("bad_signature")


def test_category_change_for_final_window_routes_to_repair():
    d = Driver()
    d.feed(cat_v("v1", "m-4", "books", False, at(0)))
    d.feed(pay("p1", 9, 40, 5000, merchant="m-4", account="acct-9"))
    d.feed(pay("bg", 11, 6, 1, account="acct-x"))
    out = d.feed(cat_v("v2", "m-4", "crypto", True, at(9, 30), arrival=at(11, 10)))
    assert [disp for _, disp in out.disposed()] == [ROUTED] and not out.facts
    (req,) = out.extra[REPAIR_TABLE]
    assert (req["kind"], req["account_id"], req["event_hour"]) == \
        ("category", "acct-9", "2026-10-06T09:00Z")


def test_snapshot_restore_continues_identically():
    stream = [cat_v("v1", "m-1", "grocery", False, at(0)), pay("p1", 10, 5, 2600),
              pay("p2", 10, 20, 900), pay("bg", 11, 5, 1, account="acct-x"),
              cat_v("v2", "m-1", "gambling", True, at(10, 15), arrival=at(11, 20)),
              pay("p1", 10, 5, 2600, arrival=at(11, 21)), pay("p3", 10, 40, 5, arrival=at(11, 30)),
              pay("bg2", 12, 6, 1, account="acct-x"), pay("p4", 10, 50, 7, arrival=at(12, 30))]
    whole = Driver()
    expected = [whole.feed(o) for o in stream]
    first = Driver()
    for o in stream[:4]:
        first.feed(o)
    snap = first.op.snapshot()
    import orjson
    restored = LedgerOperator(TEST_KEY.sign, TEST_KEY.source)
    restored.restore(orjson.loads(orjson.dumps(snap, option=orjson.OPT_NON_STR_KEYS)))
    second = Driver(restored)
    second.max_event, second.offset = first.max_event, first.offset
    got = [second.feed(o) for o in stream[4:]]
    key = lambda outs: [[(f.fact_key, f.payload_hash) for f in o.facts] for o in outs]  # noqa: E731
    assert key(got) == key(expected[4:])
    assert [o.extra for o in got] == [o.extra for o in expected[4:]]
    # The counters, the per-payment one included, are checkpointed and go on from there:
    # p1, p2 and bg accepted before the snapshot, p3 and bg2 after it (p1's redelivery is a
    # duplicate; p4 comes when its window is final, and is routed).
    assert snap["counters"]["payments_accepted"] == 3
    assert second.op.counters == whole.op.counters
    assert (whole.op.counters["payments_accepted"], whole.op.counters["duplicates"],
            whole.op.counters["routed_payments"]) == (5, 1, 1)
    assert whole.op.state_metrics()["payments_accepted"] == 5


def test_identities_share_their_account_merchant_and_hour_objects():
    """Decoding gives each payment its own copies of its account and merchant IDs and its hour;
    the identities, which the ledger keeps for good, hold one object of each, live and after a
    restore (where every value decodes as its own object again)."""
    d = Driver()
    for i in range(4):
        d.feed(pay(f"p{i}", 10, 5 + i, 100, account="".join(["acct-", "8"]),
                   merchant="".join(["m-", "1"])))
    d.feed(pay("q", 10, 40, 100, account="acct-9", merchant="m-2"))

    def objects(op: LedgerOperator, slot: int) -> set[int]:
        return {id(op.ids[f"p{i}"][slot]) for i in range(4)}

    hour = int(at(10).timestamp()) * 1_000_000
    restored = LedgerOperator(TEST_KEY.sign, TEST_KEY.source)
    restored.restore(orjson.loads(orjson.dumps(d.op.snapshot())))
    for op in (d.op, restored):
        assert [op.ids[f"p{i}"][I_ACCOUNT:I_MERCHANT + 1] for i in range(4)] == \
            [["acct-8", hour, "m-1"]] * 4
        assert op.ids["q"][I_ACCOUNT:I_MERCHANT + 1] == ["acct-9", hour, "m-2"]
        for slot in (I_ACCOUNT, I_HOUR, I_MERCHANT):
            assert len(objects(op, slot)) == 1
    assert restored.snapshot() == orjson.loads(orjson.dumps(d.op.snapshot()))


def test_versions_that_settle_share_no_values_a_correction_does():
    """A duplicate, a conflict or a stale version keeps nothing, so its account, merchant and
    hour are not added to the values the identities share; a correction's are, and its
    identity holds them."""
    d = Driver()
    d.feed(pay("p1", 10, 5, 100, rev=2))
    outs = [d.feed(pay("p1", 10, 5, 100, rev=2)),
            d.feed(pay("p1", 10, 5, 100, rev=2, account="acct-conflict", merchant="m-conflict")),
            d.feed(pay("p1", 11, 5, 100, rev=1, account="acct-stale", merchant="m-stale"))]
    assert [disp for _, disp in outs[0].disposed()] == [DUPLICATE]
    assert [q.reason for q in outs[1].quarantine] == ["conflicting_duplicate"]
    assert [disp for _, disp in outs[2].disposed()] == [STALE]
    hour_10, hour_11 = (int(at(h).timestamp()) * 1_000_000 for h in (10, 11))
    assert d.op._texts.keys() == {"acct-8", "m-1"}
    assert d.op._hours.keys() == {hour_10}
    moved = d.feed(pay("p1", 10, 20, 300, rev=3, account="".join(["acct-", "moved"]),
                       merchant="m-2"))
    assert [disp for _, disp in moved.disposed()] == [ACCEPTED]
    assert d.op._texts.keys() == {"acct-8", "m-1", "acct-moved", "m-2"}
    assert d.op._hours.keys() == {hour_10}
    row = d.op.ids["p1"]
    assert row[I_ACCOUNT:I_MERCHANT + 1] == ["acct-moved", hour_10, "m-2"]
    assert row[I_ACCOUNT] is d.op._texts["acct-moved"]
    assert row[I_HOUR] is d.op._hours[hour_10]
    assert hour_11 not in d.op._hours


def test_incremental_window_aggregates_equal_a_full_recomputation():
    # Payments, corrections (moving merchant, amount and hour) and category versions (open and
    # closed, some rejected) in a seeded random order: after every record each open window's
    # running aggregates equal `window_content` over its payments, also after a restore.
    import random

    import orjson

    from streaming.operators.ledger import window_content
    rng = random.Random(8)
    merchants = ["m-1", "m-2", "m-3"]
    revs: dict[str, int] = {}
    d = Driver(delay_min=90)
    clock = [10 * 60]

    def check(op):
        for w in op.windows.values():
            full = window_content(w.account, w.hour,
                                  ((p[1], p[2], p[3]) for p in w.payments.values()), op.cats)
            assert w.content() == full

    for i in range(600):
        clock[0] += rng.randint(0, 2)
        h, m = divmod(clock[0], 60)
        arrival = at(h, m)
        roll = rng.random()
        if roll < 0.15:
            start = rng.randint(9 * 60, h * 60 + m)
            end = start + rng.randint(5, 90) if rng.random() < 0.4 else None
            obj = cat_v(f"v{i}", rng.choice(merchants), rng.choice(["grocery", "travel", "bet"]),
                        rng.random() < 0.5, at(*divmod(start, 60)),
                        at(*divmod(end, 60)) if end else None, arrival=arrival)
        else:
            pid = f"p{rng.randint(0, 120)}" if roll < 0.35 else f"p{i}"
            revs[pid] = revs.get(pid, 0) + 1
            ev = max(9 * 60, clock[0] - rng.randint(0, 80))
            obj = payment(pid, rng.choice(["acct-1", "acct-2"]), rng.choice(merchants),
                          at(*divmod(ev, 60)), arrival, rng.randint(1, 5000), revs[pid])
        d.feed(obj)
        check(d.op)
        if i == 300:
            restored = LedgerOperator(TEST_KEY.sign, TEST_KEY.source)
            restored.restore(orjson.loads(orjson.dumps(d.op.snapshot(),
                                                       option=orjson.OPT_NON_STR_KEYS)))
            check(restored)
            assert {k: w.content() for k, w in restored.windows.items()} == \
                {k: w.content() for k, w in d.op.windows.items()}
    assert d.op.counters["corrections_live"] > 20 and d.op.counters["category_versions"] > 20
    assert d.op.counters["revised"] > 10


def test_payments_back_and_forth_between_hours_land_in_their_own_windows():
    """An account's payments alternating between two open hours (a late one after the next
    hour opened, then the next hour again) each land in the window of their own hour, however
    the operator finds the window's key; after a restore too."""
    d = Driver()
    d.feed(pay("a1", 10, 50, 100))
    d.feed(pay("a2", 11, 5, 20))  # the account's 11:00 window opens after its 10:00 one
    d.feed(pay("a3", 10, 55, 3, arrival=at(11, 6)))  # late, back in 10:00
    d.feed(pay("a4", 11, 7, 4000))
    h11 = "acct-8|2026-10-06T11:00Z"
    assert {k: (w.total, sorted(w.payments)) for k, w in d.op.windows.items()} == {
        H10: (103, ["a1", "a3"]), h11: (4020, ["a2", "a4"])}
    # A live payment's identity row and its window's entry hold one event-time object.
    assert d.op.ids["a4"][I_EVENT] is d.op.windows[h11].payments["a4"][3]
    restored = LedgerOperator(d.op.sign, d.op.key_source)
    restored.restore(orjson.loads(orjson.dumps(d.op.snapshot())))
    d.op = restored
    d.feed(pay("a5", 10, 56, 5, arrival=at(11, 8)))
    d.feed(pay("a6", 11, 9, 6))
    assert {k: (w.total, sorted(w.payments)) for k, w in d.op.windows.items()} == {
        H10: (108, ["a1", "a3", "a5"]), h11: (4026, ["a2", "a4", "a6"])}
