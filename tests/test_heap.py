"""The compiled core's heap of times (streaming/_heap.c) held to its twin, heapq: the same
items in the same places after every push and pop, ints of any size and sign compared in C,
anything else through the rich comparison, and heapq's errors."""

from __future__ import annotations

import heapq

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from .conftest import hand_written

# Times as the state holds them (microseconds, one or two 30-bit digits), and ints past them:
# several digits, negative, zero, and the edges of a digit.
INTS = st.one_of(st.integers(-3, 3), st.integers(0, 2**62), st.integers(-2**90, 2**90),
                 st.sampled_from([2**30 - 1, 2**30, 2**60 - 1, 2**60, -2**30, -2**30 - 1]))
# A push (the item) or a pop (None).
STEPS = st.lists(st.one_of(INTS, st.none()), max_size=120)


@pytest.fixture(scope="module")
def c_heap():
    return hand_written("streaming._heap")


@settings(max_examples=400, deadline=None)
@given(steps=STEPS)
def test_every_push_and_pop_leaves_the_list_as_heapq_does(c_heap, steps):
    ours: list[int] = []
    theirs: list[int] = []
    for step in steps:
        if step is None:
            if not theirs:
                with pytest.raises(IndexError, match="index out of range"):
                    c_heap.heappop(ours)
                continue
            assert c_heap.heappop(ours) == heapq.heappop(theirs)
        else:
            c_heap.heappush(ours, step)
            heapq.heappush(theirs, step)
        assert ours == theirs
    drained = [c_heap.heappop(ours) for _ in range(len(ours))]
    assert drained == sorted(theirs) and ours == []


def test_the_same_int_objects_come_back_out_and_none_is_lost(c_heap):
    import sys

    items = [10**15 + i for i in (5, 3, 9, 1, 7)]
    counts = [sys.getrefcount(x) for x in items]
    heap: list[int] = []
    for k in range(len(items)):  # no loop name left holding the last item
        c_heap.heappush(heap, items[k])
    out = [c_heap.heappop(heap) for _ in items]
    assert out == sorted(items) and all(any(o is x for x in items) for o in out)
    del out
    assert [sys.getrefcount(x) for x in items] == counts


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.one_of(st.tuples(st.integers(-5, 5), st.text(max_size=2)),
                                st.none()), max_size=60))
def test_other_items_compare_as_heapq_compares_them(c_heap, steps):
    ours: list[tuple[int, str]] = []
    theirs: list[tuple[int, str]] = []
    for step in steps:
        if step is None:
            if theirs:
                assert c_heap.heappop(ours) == heapq.heappop(theirs)
        else:
            c_heap.heappush(ours, step)
            heapq.heappush(theirs, step)
        assert ours == theirs


def test_mixed_ints_and_floats_take_the_rich_comparison(c_heap):
    heap: list[float] = []
    for x in (3, 2.5, 1, 2**70, -1.5, 0):
        c_heap.heappush(heap, x)
    assert [c_heap.heappop(heap) for _ in range(6)] == [-1.5, 0, 1, 2.5, 3, 2**70]


class _Loud:
    def __init__(self, heap: list, raise_: bool) -> None:
        self.heap, self.raise_ = heap, raise_

    def __lt__(self, other: object) -> bool:
        if self.raise_:
            raise ValueError("not comparable")
        self.heap.clear()  # a comparison that changes the list under the sift
        return True


def test_heapqs_errors(c_heap):
    with pytest.raises(TypeError, match="heap argument must be a list"):
        c_heap.heappush((), 1)
    with pytest.raises(TypeError, match="heap argument must be a list"):
        c_heap.heappop(())
    with pytest.raises(TypeError, match="takes 2 arguments"):
        c_heap.heappush([])
    with pytest.raises(IndexError, match="index out of range"):
        c_heap.heappop([])
    heap: list = [1]
    with pytest.raises(ValueError, match="not comparable"):
        c_heap.heappush(heap, _Loud(heap, True))
    heap = [1]
    with pytest.raises(RuntimeError, match="list changed size during iteration"):
        c_heap.heappush(heap, _Loud(heap, False))


# ---------------------------------------------------------------- TimeHeap
# A push (time, item) or a take (None); times within 64 bits, equal ones often, items
# comparable strings (a time's items leave sorted).
TIMED_STEPS = st.lists(st.one_of(
    st.tuples(st.one_of(st.integers(-4, 4), st.sampled_from([-2**63, 2**63 - 1, 2**62, -2**62])),
              st.sampled_from("abcdef")),
    st.none()), max_size=150)


@settings(max_examples=400, deadline=None)
@given(steps=TIMED_STEPS)
def test_a_time_heap_takes_out_what_a_sorted_list_of_pairs_would(c_heap, steps):
    h = c_heap.TimeHeap()
    model: list[tuple[int, str]] = []
    for step in steps:
        if step is None:
            if not model:
                with pytest.raises(IndexError, match="empty TimeHeap"):
                    c_heap.time_heap_take(h, [])
                continue
            model.sort()
            t = model[0][0]
            want = [item for tt, item in model if tt == t]
            model = [p for p in model if p[0] != t]
            into: list[str] = []
            # What is left's earliest time comes back (None once empty).
            assert c_heap.time_heap_take(h, into) == (model[0][0] if model else None)
            assert into == want
        else:
            c_heap.time_heap_push(h, *step)
            model.append(step)
        assert len(h) == len(model)
        assert sorted(c_heap.time_heap_pairs(h)) == sorted(model)


def test_a_time_heap_take_sorts_what_the_list_held_before_with_its_own(c_heap):
    h = c_heap.TimeHeap()
    for t, item in [(7, "m"), (7, "c"), (9, "a")]:
        c_heap.time_heap_push(h, t, item)
    into = ["k", "z"]  # a queue's run items at the same time, appended first
    assert c_heap.time_heap_take(h, into) == 9 and into == ["c", "k", "m", "z"]
    assert c_heap.time_heap_pairs(h) == [(9, "a")]


def test_a_time_heap_refuses_times_past_64_bits_and_other_values(c_heap):
    h = c_heap.TimeHeap()
    with pytest.raises(OverflowError, match="64 bits"):
        c_heap.time_heap_push(h, 2**63, "x")
    with pytest.raises(OverflowError, match="64 bits"):
        c_heap.time_heap_push(h, -2**63 - 1, "x")
    with pytest.raises(TypeError, match="a time must be an int"):
        c_heap.time_heap_push(h, 1.5, "x")
    with pytest.raises(TypeError, match="must be a TimeHeap"):
        c_heap.time_heap_push([], 1, "x")
    assert len(h) == 0 and c_heap.time_heap_pairs(h) == []


def test_a_time_heap_holds_its_items_and_lets_the_collector_see_them(c_heap):
    import gc
    import sys
    import weakref

    class Node:
        pass

    item = object()
    before = sys.getrefcount(item)
    h = c_heap.TimeHeap()
    c_heap.time_heap_push(h, 5, item)
    assert sys.getrefcount(item) == before + 1
    into: list[object] = []
    c_heap.time_heap_take(h, into)
    held = sys.getrefcount(item)
    assert held == before + 1 and into == [item]  # the list's reference, not the heap's
    into.clear()
    assert sys.getrefcount(item) == before
    # A cycle through the heap (an item holding the heap) is found and freed by the collector.
    node = Node()
    node.heap = c_heap.TimeHeap()
    c_heap.time_heap_push(node.heap, 1, node)
    gone = weakref.ref(node)
    del node
    gc.collect()
    assert gone() is None
