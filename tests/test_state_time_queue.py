"""TimeQueue hands out (time, item) pairs in the order a heap of (time, item) tuples would,
which the operators relied on before it (equal times in item order)."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.state import TimeQueue

PAIRS = st.lists(st.tuples(st.integers(-5, 5), st.sampled_from("abcde")), max_size=40)


@settings(max_examples=300, deadline=None)
@given(PAIRS, st.lists(st.integers(-6, 6), max_size=6), PAIRS, st.booleans())
def test_taken_in_the_order_of_a_tuple_heap(first, bounds, later, anywhere):
    queue, heap = TimeQueue(first), list(first)
    heapq.heapify(heap)
    assert len(queue) == len(heap) and queue.pairs() == sorted(heap)
    for bound in bounds:
        # Both walked the same way: a pair pushed after each pair taken out. The operators
        # push at or above the bound only (the next eviction time of a key); `anywhere` pushes
        # below it too.
        pushes = [(t if anywhere else max(t, bound), item) for t, item in later]
        pushes_q, pushes_h = list(pushes), list(pushes)
        got, want = [], []
        for t, item in queue.pop_before(bound):
            got.append((t, item))
            if pushes_q:
                queue.push(*pushes_q.pop())
        while heap and heap[0][0] < bound:
            want.append(heapq.heappop(heap))
            if pushes_h:
                heapq.heappush(heap, pushes_h.pop())
        if anywhere:
            # A time's items are handed out together, so a pair pushed below the time being
            # handed out comes after that time's items: the same pairs, in another order.
            assert sorted(got) == sorted(want)
        else:
            assert got == want
        assert len(queue) == len(heap) and queue.pairs() == sorted(heap)
    assert queue.first() == (heap[0][0] if heap else None)


def test_pop_time_hands_out_one_time_with_its_items_sorted():
    queue = TimeQueue([(5, "b"), (3, "z"), (5, "a"), (3, "y"), (9, "c")])
    assert queue.first() == 3
    assert queue.pop_time() == (3, ["y", "z"])  # several items at a time: a sorted list
    assert list(queue.pop_before(6)) == [(5, "a"), (5, "b")]
    assert len(queue) == 1 and queue.pairs() == [(9, "c")] and list(queue) == [(9, "c")]
    assert list(queue.pop_before(9)) == [] and queue.pop_time() == (9, ("c",))  # one item
    assert len(queue) == 0 and queue.first() is None
