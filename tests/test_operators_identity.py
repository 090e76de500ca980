"""The shared identity index: each classification outcome, what settling it emits, and
retention (eviction by event time, never of a live or changed identity)."""

from __future__ import annotations

from streaming.operators.base import ARCHIVE_ROW, DUPLICATE, STALE, Emit
from streaming.operators.identity import (CONFLICT, CORRECTION, LIVE, NEW, REV, IdentityIndex,
                                          settle)
from streaming.timeutil import US_PER_MIN

from .joinutil import pay, record

M = "merchant-1"
KEY, T, WHERE = 2, 3, 4  # row fields after [revision, hash] in these tests


def remember(ix: IdentityIndex, rec, where=LIVE) -> None:
    ix.remember(rec.id, [rec.revision, rec.payload_hash, rec.key, rec.event_us, where])


def test_each_outcome():
    ix = IdentityIndex(time_slot=T, where_slot=WHERE)
    first = record(pay("p", M, 0, rev=2, cents=100))
    assert ix.classify(first) == (NEW, None)
    remember(ix, first)
    row = ix["p"]
    assert ix.classify(record(pay("p", M, 0, rev=2, cents=100))) == (DUPLICATE, row)
    assert ix.classify(record(pay("p", M, 0, rev=2, cents=999))) == (CONFLICT, row)
    assert ix.classify(record(pay("p", M, 0, rev=1, cents=100))) == (STALE, row)
    assert ix.classify(record(pay("p", M, 5, rev=3, cents=100))) == (CORRECTION, row)
    # Another ID is unaffected.
    assert ix.classify(record(pay("q", M, 0, rev=2, cents=100))) == (NEW, None)
    assert len(ix) == 1 and "p" in ix and "q" not in ix


def test_settle_emits_the_terminal_outcomes_only():
    out = Emit()
    dup = record(pay("p", M, 0), offset=1)
    stale = record(pay("p", M, 0), offset=2)
    conflict = record(pay("p", M, 0), offset=3)
    assert settle(DUPLICATE, dup, out) and settle(STALE, stale, out)
    assert settle(CONFLICT, conflict, out)
    assert settle(CONFLICT, conflict, out, "told otherwise")
    assert not settle(NEW, dup, out) and not settle(CORRECTION, dup, out)
    rows = [dict(zip(ARCHIVE_ROW, row, strict=True)) for row in out.dispositions]
    assert [(r["offset"], r["disposition"]) for r in rows] == [(1, DUPLICATE), (2, STALE)]
    assert [(q.offset, q.reason, q.detail) for q in out.quarantine] == [
        (3, "conflicting_duplicate", "p revision 1 was seen with other content"),
        (3, "conflicting_duplicate", "told otherwise")]


def test_eviction_by_time_spares_live_and_changed_identities():
    ix = IdentityIndex(time_slot=T, where_slot=WHERE)
    old, kept_live, moved, young = (record(pay(i, M, m)) for i, m in
                                    (("old", 0), ("live", 1), ("moved", 2), ("young", 30)))
    for rec in (old, kept_live, moved, young):
        remember(ix, rec, where="evicted")
        ix.may_forget(rec.id, rec.event_us)
    ix["live"][WHERE] = LIVE  # back in live state since it was named
    newer = record(pay("moved", M, 40, rev=2))
    remember(ix, newer)  # a newer version at another time replaced the named row
    bound = old.event_us + 10 * US_PER_MIN
    assert ix.evict_before(bound) == 1
    assert sorted(ix) == ["live", "moved", "young"]
    # A forgotten ID is new again; the spared ones are still recognised.
    assert ix.classify(old)[0] == NEW
    assert ix.classify(record(pay("moved", M, 40, rev=2)))[0] == DUPLICATE
    # Candidates at or above the bound wait; nothing is forgotten twice.
    assert ix.evict_before(bound) == 0
    assert ix.evict_before(young.event_us + 1) == 1 and "young" not in ix


def test_a_row_named_at_one_time_and_moved_to_a_later_one_waits_for_the_later():
    # Not live either way: only the time it was named at tells the old candidate from the row.
    ix = IdentityIndex(time_slot=T, where_slot=WHERE)
    first = record(pay("m", M, 2))
    remember(ix, first, where="evicted")
    ix.may_forget("m", first.event_us)
    later = record(pay("m", M, 40, rev=2))
    remember(ix, later, where="queued")
    ix.may_forget("m", later.event_us)
    assert ix.evict_before(first.event_us + US_PER_MIN) == 0 and ix["m"][REV] == 2
    assert ix.evict_before(later.event_us + 1) == 1 and "m" not in ix


def test_without_where_every_candidate_below_the_bound_goes():
    ix = IdentityIndex(time_slot=2)
    for i, m in enumerate((0, 5, 20)):
        ix.remember(f"r{i}", [1, "h", m * US_PER_MIN])
        ix.may_forget(f"r{i}", m * US_PER_MIN)
    assert ix.evict_before(5 * US_PER_MIN + 1) == 2
    assert list(ix) == ["r2"]


def test_load_restores_rows_and_candidates():
    ix = IdentityIndex(time_slot=2)
    ix.load({"a": [1, "h", 10], "b": [1, "h", 50]}, [(50, "b"), (10, "a")])
    assert ix.evict_before(11) == 1 and list(ix) == ["b"]
    assert ix.evict_before(51) == 1 and len(ix) == 0


def test_left_state_marks_only_the_latest_versions():
    ix = IdentityIndex(time_slot=T, where_slot=WHERE)
    for rec in (record(pay("a", M, 0)), record(pay("b", M, 1)), record(pay("c", M, 2, rev=2))):
        remember(ix, rec)
    # "c" left state at revision 1, but revision 2 is the latest seen: its row stays live.
    for eid in ("a", "b", "c", "gone"):
        ix.left_state(eid, 1, "evicted")
    assert [ix[e][WHERE] for e in "abc"] == ["evicted", "evicted", LIVE]
    assert sorted(eid for _, eid in ix.candidates) == ["a", "b"]
    assert ix.evict_before(ix["c"][T] + US_PER_MIN) == 2
    assert "c" in ix and "a" not in ix and "b" not in ix
