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


def test_a_pair_a_little_out_of_order_goes_into_the_run_at_its_place(c_heap):
    queue = TimeQueue(((t, f"e{t}") for t in range(0, 200, 2)), mostly_ordered=True,
                      c_heap=c_heap)
    queue.push(195, "near")  # three places before the end: in the run, between 194 and 196
    queue.push(194, "z")  # equal to a time held: in item order, after it
    queue.push(194, "a")  # and before it
    queue.push(198, "a")  # the last time, an item before the last one's: before it
    assert queue.held_apart() == []
    assert queue.run[-7:] == [194, 194, 194, 195, 196, 198, 198]
    assert queue.run_items[-7:] == ["a", "e194", "z", "near", "e196", "a", "e198"]
    queue.push(7, "far")  # further back than _NEAR places: into the heap
    assert queue.held_apart() == [(7, "far")]
    items: list = []
    assert queue.take_before(10, items) == 6 and items == ["e0", "e2", "e4", "e6", "far", "e8"]
    assert queue.pop_time() == (10, ["e10"])
    # With little of the run left, a pair before all of it goes to its front.
    assert queue.take_before(192, []) == 90
    assert queue.run[queue.head:] == [192, 194, 194, 194, 195, 196, 198, 198]
    queue.push(1, "first")
    assert queue.held_apart() == [] and queue.pop_time() == (1, ["first"])
    assert queue.pop_time() == (192, ["e192"])
    assert queue.pop_time() == (194, ["a", "e194", "z"])


def test_a_queue_not_declared_ordered_keeps_every_time_in_its_heap(c_heap):
    queue = TimeQueue(((t, t) for t in range(100)), c_heap=c_heap)
    assert queue.run == [] and sorted(queue.held_apart()) == [(t, t) for t in range(100)]


def test_the_compiled_core_keeps_a_queues_heap_in_c_unless_told_not_to():
    heap_module = hand_written("streaming._heap")  # fails in CI without the build
    assert type(TimeQueue().timed) is heap_module.TimeHeap
    twin = TimeQueue([(3, "a"), (1, "b")], c_heap=False)
    assert twin.timed is None and twin.heap == [1, 3] and twin.items == {1: "b", 3: "a"}


@settings(max_examples=200, deadline=None)
@given(MOSTLY_IN_ORDER, st.lists(st.integers(-3, 60), min_size=1, max_size=8), st.booleans(),
       st.booleans())
def test_taking_all_before_a_bound_is_taking_time_by_time(c_heap, steps, bounds, ordered,
                                                         with_times):
    # Two queues with the same pushes: one walked by `take_before`, one by `take_time` until
    # nothing is below the bound (what the operators did before). Equal times are common, and
    # some times land in the heap (step < 0), so both of its paths are walked.
    one = TimeQueue(mostly_ordered=ordered, c_heap=c_heap)
    other = TimeQueue(mostly_ordered=ordered, c_heap=c_heap)
    now = 0
    for n, (step, _) in enumerate(steps):
        now += step
        # Items pushed in an order other than theirs, so a time's items need sorting.
        one.push(now, -n)
        other.push(now, -n)
    for bound in bounds:
        items: list = ["kept"]  # what the list held before stays in front
        times: list | None = ["kept"] if with_times else None
        got = one.take_before(bound, items, times)
        want_items, want_times = [], []
        while other.has_before(bound):
            at: list = []
            t = other.take_time(at)
            want_items.extend(at)
            want_times.extend([t] * len(at))
        assert items == ["kept", *want_items] and got == len(want_items)
        if times is not None:
            assert times == ["kept", *want_times]
        assert len(one) == len(other) and one.pairs() == other.pairs()
        assert one.first() == other.first() and not one.has_before(bound)


def test_take_before_cuts_the_runs_taken_front_and_frees_what_it_took(c_heap):
    queue = TimeQueue(((t // 2, f"e{t}") for t in range(5000)), mostly_ordered=True,
                      c_heap=c_heap)
    items: list = []
    assert queue.take_before(1500, items) == 3000
    assert items == [f"e{t}" for t in range(3000)]
    # As take_time does: the front was cut once it was half the run.
    assert queue.head == 0 and queue.run[0] == 1500 and len(queue.run) == 2000
    assert queue.take_before(1501, items) == 2 and items[-2:] == ["e3000", "e3001"]
    # A taken place no longer holds its item until the front is cut.
    assert queue.run_items[:2] == [None, None] and queue.run_items[2] == "e3002"
    assert queue.take_before(1501, items) == 0 and len(queue) == 1998
