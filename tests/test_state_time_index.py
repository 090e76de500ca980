"""A key's time index (`streaming.state.TimeIndex`) against the plain definition it keeps:
entries sorted by (event time, insertion sequence), searched by time. Generated operations in
any order, times repeated often and sequences out of order too (a restore inserts entries in
the order its checkpoint lists them)."""

from __future__ import annotations

from bisect import insort

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.state import HeldEntry, KeyedSide, TimeIndex

times = st.integers(-5, 5)
seqs = st.integers(0, 40)
ops = st.lists(st.one_of(
    st.tuples(st.just("insert"), times, seqs),
    st.tuples(st.just("range"), times, times),
    st.tuples(st.just("pop_before"), times, st.just(0)),
    st.tuples(st.just("remove"), times, seqs),
), max_size=80)


@settings(max_examples=400, deadline=None)
@given(ops)
def test_time_index_is_a_sorted_list_of_time_and_sequence(steps: list[tuple[str, int, int]]
                                                          ) -> None:
    index = TimeIndex()
    model: list[tuple[int, int, str, int]] = []  # (time, sequence, item, bytes), sorted
    held = 0
    for n, (op, a, b) in enumerate(steps):
        if op == "insert":
            if any((t, s) == (a, b) for t, s, _, _ in model):
                continue  # (time, sequence) names one entry
            item, size = f"item{n}", 100 + n
            index.insert(a, b, item, size)
            insort(model, (a, b, item, size))
            held += size
        elif op == "range":
            assert index.range(a, b) == [i for t, _, i, _ in model if a <= t <= b]
        elif op == "pop_before":
            assert index.pop_before(a) == [i for t, _, i, _ in model if t < a]
            model = [m for m in model if m[0] >= a]
        else:
            found = [m for m in model if (m[0], m[1]) == (a, b)]
            assert index.remove(a, b) == (found[0][2] if found else None)
            model = [m for m in model if (m[0], m[1]) != (a, b)]
        assert len(index) == len(model)
        assert index.items == [i for _, _, i, _ in model]
        assert index.first_time() == (model[0][0] if model else None)
    # What an insert adds; taking entries out is the keyed side's to account (KeyedSide).
    assert index.bytes == held


def test_an_insert_among_equal_times_goes_by_its_sequence() -> None:
    index = TimeIndex()
    for seq, item in ((5, "e"), (1, "a"), (9, "z"), (3, "c")):
        index.insert(100, seq, item, 1)
    index.insert(50, 7, "early", 1)
    index.insert(100, 4, "d", 1)
    assert index.items == ["early", "a", "c", "d", "e", "z"]
    assert index.range(100, 100) == ["a", "c", "d", "e", "z"]
    assert index.remove(100, 4) == "d"
    assert index.remove(100, 4) is None
    assert index.pop_before(100) == ["early"]
    assert index.first_time() == 100


def test_a_keyed_side_releases_the_sizes_of_the_entries_it_gives_up() -> None:
    """`KeyedSide.pop_before` hands back a key's entries below the bound, oldest first, and
    takes their sizes (each entry's own, `HeldEntry.size`) off the key's and the side's
    bytes; a key left empty is dropped."""
    side = KeyedSide("payments")
    a = [HeldEntry(size) for size in (120, 300, 75)]
    b = [HeldEntry(size) for size in (1000, 40)]
    for t, e in zip((10, 20, 30), a, strict=True):
        side.insert("a", t, t, e, e.size)
    for t, e in zip((5, 50), b, strict=True):
        side.insert("b", t, t, e, e.size)
    assert (side.records, side.bytes) == (5, 1535)
    assert side.pop_before("a", 25) == a[:2]
    assert (side.records, side.bytes, side.keys["a"].bytes) == (3, 1115, 75)
    assert side.pop_before("b", 5) == []  # the bound is exclusive
    assert side.pop_before("missing", 100) == []
    assert side.pop_before("a", 31) == a[2:]
    assert "a" not in side.keys
    assert (side.records, side.bytes) == (2, 1040)
    assert side.pop_before("b", 51) == b  # every entry of a key at once: its index leaves whole
    assert "b" not in side.keys and (side.records, side.bytes) == (0, 0)
