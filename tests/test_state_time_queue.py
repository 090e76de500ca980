"""TimeQueue hands out (time, item) pairs in the order a heap of (time, item) tuples would,
which the operators relied on before it (equal times in item order): with the compiled
core's heap of pairs (`c_heap`, streaming/_heap.c's TimeHeap) and with its Python twin."""

from __future__ import annotations

import heapq

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.state import TimeQueue

from .conftest import hand_written

PAIRS = st.lists(st.tuples(st.integers(-5, 5), st.sampled_from("abcde")), max_size=40)


@pytest.fixture(scope="module", params=[True, False], ids=["c-heap", "twin"])
def c_heap(request):
    """Both heaps of a queue: the compiled core's (where it is built: without it every queue
    has the twin's, so the two cases test the same) and the Python twin's."""
    return request.param


@settings(max_examples=300, deadline=None)
@given(PAIRS, st.lists(st.integers(-6, 6), max_size=6), PAIRS, st.booleans(), st.booleans())
def test_taken_in_the_order_of_a_tuple_heap(c_heap, first, bounds, later, anywhere, ordered):
    queue, heap = TimeQueue(first, mostly_ordered=ordered, c_heap=c_heap), list(first)
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


@pytest.mark.parametrize("ordered", [False, True])
def test_pop_time_hands_out_one_time_with_its_items_sorted(c_heap, ordered):
    queue = TimeQueue([(5, "b"), (3, "z"), (5, "a"), (3, "y"), (9, "c")], mostly_ordered=ordered,
                      c_heap=c_heap)
    assert queue.first() == 3
    assert queue.pop_time() == (3, ["y", "z"])  # several items at a time: a sorted list
    assert list(queue.pop_before(6)) == [(5, "a"), (5, "b")]
    assert len(queue) == 1 and queue.pairs() == [(9, "c")] and list(queue) == [(9, "c")]
    assert list(queue.pop_before(9)) == [] and queue.pop_time() == (9, ["c"])  # one item
    assert len(queue) == 0 and queue.first() is None


# Times mostly increasing with some out of order, long enough to cut the run's taken front
# (every 1,024 taken), and pops interleaved with pushes.
MOSTLY_IN_ORDER = st.lists(st.tuples(st.integers(-3, 40), st.integers(0, 2)), min_size=1,
                           max_size=3000)


@settings(max_examples=60, deadline=None)
@given(MOSTLY_IN_ORDER, st.booleans())
def test_a_long_mostly_ordered_walk_matches_the_tuple_heap(c_heap, steps, ordered):
    queue, heap = TimeQueue(mostly_ordered=ordered, c_heap=c_heap), []
    now = 0
    for n, (step, pops) in enumerate(steps):
        # Usually a little later than the last push, sometimes earlier (step < 0), and equal
        # times now and then (step 0).
        now += step
        queue.push(now, n)
        heapq.heappush(heap, (now, n))
        for _ in range(pops if n % 3 else 0):
            if not heap:
                break
            t, items = queue.pop_time()
            want = [heapq.heappop(heap)]
            while heap and heap[0][0] == want[0][0]:
                want.append(heapq.heappop(heap))
            assert (t, list(items)) == (want[0][0], [i for _, i in want])
        assert len(queue) == len(heap)
        assert queue.first() == (heap[0][0] if heap else None)
        assert queue.has_before(now) == (bool(heap) and heap[0][0] < now)
    assert queue.pairs() == sorted(heap)


def test_times_pushed_in_order_never_enter_the_heap(c_heap):
    queue = TimeQueue(((t, f"e{t}") for t in range(5000)), mostly_ordered=True, c_heap=c_heap)
    assert queue.held_apart() == [] and len(queue.run) == 5000
    taken = [queue.pop_time() for _ in range(3000)]
    assert taken == [(t, [f"e{t}"]) for t in range(3000)]
    # The taken front was cut as it grew: the run holds at most twice what is left.
    assert len(queue.run) - queue.head == 2000 and len(queue.run) <= 2 * 2000 + 1024
    queue.push(10, "late")  # below the run's end: into the heap, and taken first
    assert queue.held_apart() == [(10, "late")] and queue.first() == 10
    assert queue.has_before(11)
    assert not queue.has_before(10)
    assert queue.pop_time() == (10, ["late"]) and queue.first() == 3000
    while len(queue):
        queue.pop_time()
    queue.push(7, "again")  # the run was used up: it starts again, below where it ended
    assert queue.run[queue.head:] == [7] and queue.held_apart() == [] and queue.first() == 7


def test_a_queue_not_declared_ordered_keeps_every_time_in_its_heap(c_heap):
    queue = TimeQueue(((t, t) for t in range(100)), c_heap=c_heap)
    assert queue.run == [] and sorted(queue.held_apart()) == [(t, t) for t in range(100)]


def test_the_compiled_core_keeps_a_queues_heap_in_c_unless_told_not_to():
    heap_module = hand_written("streaming._heap")  # fails in CI without the build
    assert type(TimeQueue().timed) is heap_module.TimeHeap
    twin = TimeQueue([(3, "a"), (1, "b")], c_heap=False)
    assert twin.timed is None and twin.heap == [1, 3] and twin.items == {1: "b", 3: "a"}
