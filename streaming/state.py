"""Keyed, time-indexed state: per key, entries ordered by event time.

Probes bisect into the eligible time range, so a probe touches only records that can match;
eviction pops a prefix. Record counts and bytes are tracked per key and in total so that the
hot key and the state peak are observable without walking the state."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from . import native

# A `TimeQueue`'s heap of times pushed and popped by the compiled core's hand-written C
# (streaming/_heap.c), heapq's algorithm comparing two ints in C: heapq's generic comparison
# made its push and pop 7.5% of the receipt scorer's instructions (docs/performance.md,
# fifty-first round). heapq itself where the compiled set is not in use. Decided once, when the
# package's build is (streaming.native.select runs before this import).
_HEAPPUSH: Final[Callable[[list[Any], Any], None]] = (
    native.hand_written("streaming._heap", "heappush") or heapq.heappush)
_HEAPPOP: Final[Callable[[list[Any]], Any]] = (
    native.hand_written("streaming._heap", "heappop") or heapq.heappop)
# A `TimeQueue`'s pairs pushed out of order, in the compiled core: (time, item) pairs in a C
# array (`TimeHeap`), instead of the heap of times above and a dictionary from each time to its
# items, which stay the Python twin (see TimeQueue). None where the compiled set is not in use.
_TIME_HEAP: Final[Any] = native.hand_written("streaming._heap", "TimeHeap")
_TH_PUSH: Final[Any] = native.hand_written("streaming._heap", "time_heap_push")
_TH_TAKE: Final[Any] = native.hand_written("streaming._heap", "time_heap_take")
_TH_PAIRS: Final[Any] = native.hand_written("streaming._heap", "time_heap_pairs")


# ---------------------------------------------------------------- searches of sorted times
def first_at_or_after(times: list[int], t: int, lo: int) -> int:
    """`bisect_left(times, t, lo)` on C integers: compiled, a call of the bisect module boxes
    its arguments and compares int objects (`bisect_right(times, t, lo)` is this search for
    t + 1: the times are ints)."""
    return _first_at_or_after_in(times, t, lo, len(times))


def first_at_or_after_near(times: list[int], t: int, lo: int, near: int) -> int:
    """`first_at_or_after(times, t, lo)`, searched outwards from index `near` (any int: it is
    clamped to [lo, len(times)]) in steps that double, then by halves between the last two.

    A receipt scorer's lookups of a merchant land next to where the one before landed: its
    window's bounds move forward a few entries per receipt scored, and eviction cuts a few
    entries off the front. A search from the middle of the list instead reads about ten
    times, each an int object written minutes of event time ago (a cache miss apiece). The
    answer does not depend on `near`; only the number of reads does."""
    n = len(times)
    if near < lo:
        near = lo
    elif near > n:
        near = n
    step = 1
    if near < n and times[near] < t:
        below = near  # the answer lies past it
        above = near + 1
        while above < n and times[above] < t:
            below = above
            step += step
            above = below + step
        return _first_at_or_after_in(times, t, below + 1, above if above < n else n)
    above = near  # the answer lies at or before it
    below = near - 1
    while below >= lo and times[below] >= t:
        above = below
        step += step
        below = above - step
    return _first_at_or_after_in(times, t, below + 1 if below >= lo else lo, above)


def _first_at_or_after_in(times: list[int], t: int, lo: int, hi: int) -> int:
    """`bisect_left(times, t, lo, hi)` on C integers."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if times[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


class Held:
    """The records an operator holds in state and their bytes: a record counts the size of its
    source line (`Record.size`) from when it is held until it leaves. The one measure of
    `state_bytes` every operator reports."""

    __slots__ = ("records", "bytes")

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0

    def hold(self, size: int, n: int = 1) -> None:
        """`n` records of `size` bytes in all came into state."""
        self.records += n
        self.bytes += size

    def release(self, size: int, n: int = 1) -> None:
        """`n` records of `size` bytes in all left state."""
        self.records -= n
        self.bytes -= size


class HeldEntry:
    """What a keyed side holds: an entry that knows its size (its source line's bytes, as
    `Held` counts them). The interval join's entries derive from it, so a side sums the sizes
    of the entries leaving it by reading a field: compiled, taking each through a callable
    (`operator.attrgetter`) was a generic attribute lookup and a call, about 870 instructions
    an entry, a tenth of an evicted payment's (callgrind; docs/performance.md, forty-ninth
    round)."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


class TimeIndex:
    """Entries of one key, ordered by (event time, insertion sequence).

    The order's two parts are kept in parallel lists of plain ints (`times`, `seqs`) beside
    the items, not as one list of (time, sequence) tuples: a search then compares ints, where
    each step compared two tuples item by item, and an entry holds no tuple (callgrind over
    20,000 join events: docs/performance.md, thirty-third round). A bound on time alone is a
    search of `times`; only an insertion among equal times, and a removal, read `seqs`."""

    __slots__ = ("times", "seqs", "items", "bytes")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.seqs: list[int] = []
        self.items: list[Any] = []
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.times)

    def insert(self, t: int, seq: int, item: Any, size: int) -> None:
        times, seqs = self.times, self.seqs
        n = len(times)
        if n == 0 or t > times[n - 1] or (t == times[n - 1] and seq >= seqs[n - 1]):
            times.append(t)
            seqs.append(seq)
            self.items.append(item)
        else:
            # After every entry at or below (t, seq): past the equal times, then back over
            # those of them with a later sequence.
            i = first_at_or_after(times, t + 1, 0)
            while i > 0 and times[i - 1] == t and seqs[i - 1] > seq:
                i -= 1
            times.insert(i, t)
            seqs.insert(i, seq)
            self.items.insert(i, item)
        self.bytes += size

    def range(self, lo: int, hi: int) -> list[Any]:
        """Items with lo <= t <= hi (both inclusive), oldest first: a slice, taken in C."""
        times = self.times
        first = first_at_or_after(times, lo, 0)
        return self.items[first:first_at_or_after(times, hi + 1, first)]

    def pop_before(self, bound: int) -> list[Any]:
        """Remove and return items with t < bound, oldest first."""
        i = first_at_or_after(self.times, bound, 0)
        if i == 0:
            return []
        out = self.items[:i]
        del self.times[:i]
        del self.seqs[:i]
        del self.items[:i]
        return out

    def remove(self, t: int, seq: int) -> Any:
        """Remove the entry (t, seq) and return its item, or None when none is held."""
        times, seqs = self.times, self.seqs
        i = first_at_or_after(times, t, 0)
        n = len(times)
        while i < n and times[i] == t:
            if seqs[i] == seq:
                del times[i]
                del seqs[i]
                return self.items.pop(i)
            i += 1
        return None

    def first_time(self) -> int | None:
        return self.times[0] if self.times else None


class KeyedSide(Held):
    """One input side of a keyed operator: key -> TimeIndex, with its held totals."""

    __slots__ = ("name", "keys")

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.keys: dict[str, TimeIndex] = {}

    def insert(self, key: str, t: int, seq: int, item: Any, size: int) -> TimeIndex:
        """Returns the key's index, for a caller that reads it next (the join's peaks)."""
        idx = self.keys.get(key)
        if idx is None:
            idx = self.keys[key] = TimeIndex()
        idx.insert(t, seq, item, size)
        self.hold(size)
        return idx

    def probe(self, key: str, lo: int, hi: int) -> list[Any]:
        idx = self.keys.get(key)
        if idx is None:
            return []
        return idx.range(lo, hi)

    def pop_before(self, key: str, bound: int) -> list[Any]:
        """Remove and return the entries (`HeldEntry`) of `key` with t < bound, oldest first."""
        idx = self.keys.get(key)
        if idx is None:
            return []
        last: int = idx.times[-1]  # an index in `keys` is never empty
        if last < bound:
            # Every entry goes (most evictions of a key that is not hot): the key's index
            # leaves whole, its list of items the answer, with no slicing of its three lists
            # (3.9% of the join operator's instructions: docs/performance.md, fifty-fifth
            # round).
            del self.keys[key]
            out = idx.items
            self.release(idx.bytes, len(out))
            return out
        out = idx.pop_before(bound)
        if out:
            freed = 0
            for item in out:
                e: HeldEntry = item  # checked once, then its field read natively
                freed += e.size
            idx.bytes -= freed
            self.release(freed, len(out))
            if not idx.times:
                del self.keys[key]
        return out

    def remove(self, key: str, t: int, seq: int, size: int) -> Any:
        idx = self.keys.get(key)
        if idx is None:
            return None
        item = idx.remove(t, seq)
        if item is not None:
            idx.bytes -= size
            self.release(size)
            if not idx.times:
                del self.keys[key]
        return item

    def key_stats(self) -> dict[str, tuple[int, int]]:
        return {k: (len(v), v.bytes) for k, v in self.keys.items()}


# How long the taken front of a TimeQueue's run may grow before it is cut off (see take_time).
_RUN_CUT: Final = 1024
# How far from the end of a TimeQueue's run a pair pushed out of order may go into it (see
# push): a list's insert moves fewer places than this. Over the join's bench recording every
# one of its queues' pairs pushed out of order belonged within 18 places of the end, seven in
# ten at the last place (docs/performance.md, sixtieth round).
_NEAR: Final = 64


class TimeQueue:
    """(time, item) pairs taken out oldest first, equal times in item order: what a heap of
    (time, item) tuples gives, kept as plain ints and items. A tuple heap compares tuples at
    every level of every push and pop (2.7 us a pop and push against 0.5 us for ints, measured
    over 22,000 entries); ints compare in C.

    A queue whose times mostly come in order (`mostly_ordered`: the join places entries and
    they leave state roughly as time goes on, about four pushes in five in order) holds them in
    two places. A pair pushed at or after the last one in the run (`run`, its times never
    decreasing, with `run_items` beside it, in (time, item) order) is appended there and later
    taken from `head` on: a read and a step each. A pair pushed a little before the run's end
    (within `_NEAR` places) is inserted at its place in the run; only the others go to the
    heap. A heap made each of them walk its levels twice, in and out (docs/performance.md,
    twenty-ninth round), and a dictionary from time to items made each of them a lookup and a
    store in and a search and a delete out, most of a pair's cost (fifty-fifth round): the
    run's pairs are in no dictionary. With the pairs near the end in the run too, a walk of
    every pair below a bound (`take_before`) is two slices of the run (sixtieth round). Any
    other queue (the receipt scorer's, three pushes in four out of order) keeps every pair in
    the heap: there the run's comparisons cost more than it saved.

    The heap, in the compiled core, is a `TimeHeap` (streaming/_heap.c, `timed`): the pairs
    in a C array ordered by time, a time's items sorted as they are taken. Its pushes and takes
    cost about half the twin's (docs/performance.md, fifty-ninth round). The twin, used
    without the compiled core or with `c_heap=False` (the tests hold both to the tuple heap),
    holds each of its times once on a list heap (`heap`): `items` maps it to its item, or to a
    list of its items when it has several (most hold one, and a list per time was an object
    the garbage collector walks on every full collection, where the tuples it replaced were
    untracked). Items are never lists there. A time may be in the run and in the heap both;
    it is taken out from both at once, its items sorted."""

    __slots__ = ("run", "run_items", "head", "heap", "items", "timed", "in_heap", "heap_first",
                 "size", "mostly_ordered")

    def __init__(self, pairs: Iterable[tuple[int, Any]] = (),
                 mostly_ordered: bool = False, c_heap: bool = True) -> None:
        self.mostly_ordered = mostly_ordered
        # Times not decreasing, their items beside them; [head:] not taken yet (both empty
        # unless ordered; a taken item's place holds None until the front is cut off).
        self.run: list[int] = []
        self.run_items: list[Any] = []
        self.head = 0
        # The compiled heap, or None: the twin's heap of times, each once, and their items.
        self.timed: Any = _TIME_HEAP() if c_heap and _TIME_HEAP is not None else None
        self.heap: list[int] = []
        self.items: dict[int, Any] = {}  # a heap time -> its item, or a list of its items
        # Pairs in the heap, and its earliest time while it holds any, kept here so that
        # asking for the earliest time or whether one is below a bound is no call into the
        # heap (with each a call and its boxed bound, the compiled heap's queries cost more
        # than its pushes saved).
        self.in_heap = 0
        self.heap_first = 0
        self.size = 0
        for t, item in pairs:
            self.push(t, item)

    def __len__(self) -> int:
        return self.size

    def push(self, t: Any, item: Any) -> None:
        # `t` is an int; typed Any so that the compiled core (streaming.native) keeps the
        # caller's int object instead of unboxing it and boxing a new one for the run or the
        # heap and the dict key: 64 bytes per push that the interpreter shares.
        self.size += 1
        if self.mostly_ordered:
            run = self.run
            n = len(run)
            if self.head == n:  # the run is used up: it starts again at t
                if n:
                    run.clear()
                    self.run_items.clear()
                    self.head = 0
                run.append(t)
                self.run_items.append(item)
                return
            time: int = t  # compared as a machine integer; `t` itself is what is stored
            last: int = run[n - 1]
            run_items = self.run_items
            # The run is in (time, item) order: an item equal in time to the last one is
            # compared with it, which few are.
            if time > last or (time == last and not item < run_items[n - 1]):
                run.append(t)
                run_items.append(item)
                return
            # A little out of order: into the run at its place, searched back from the end
            # over at most _NEAR places, which a list's insert then moves.
            head = self.head
            place = n - 1  # the pair goes before the run's last one
            while place > head:
                before: int = run[place - 1]
                if before < time or (before == time and not item < run_items[place - 1]):
                    break
                place -= 1
                if n - place >= _NEAR:
                    place = -1  # further back: the heap's
                    break
            if place >= 0:
                run.insert(place, t)
                run_items.insert(place, item)
                return
        time_in: int = t
        if self.in_heap == 0 or time_in < self.heap_first:
            self.heap_first = time_in
        self.in_heap += 1
        timed = self.timed
        if timed is not None:
            _TH_PUSH(timed, t, item)
            return
        items = self.items
        at = items.get(t)
        if at is None:
            items[t] = item
            _HEAPPUSH(self.heap, t)
        elif type(at) is list:
            at.append(item)
        else:
            items[t] = [at, item]

    def first(self) -> int | None:
        """The oldest time held, or None when empty."""
        run, head = self.run, self.head
        if head < len(run):
            at: int = run[head]
            return at if self.in_heap == 0 or at < self.heap_first else self.heap_first
        return self.heap_first if self.in_heap else None

    def has_before(self, bound: int) -> bool:
        """Whether a time below `bound` is held (the oldest one is)."""
        run, head = self.run, self.head
        return ((head < len(run) and run[head] < bound)
                or (self.in_heap > 0 and self.heap_first < bound))

    def _take_heap(self, into: list[Any]) -> int:
        """Take out the heap's oldest time: its items go into `into` (after any already
        there), and `into` is sorted; returns the time."""
        taken = self.heap_first
        before = len(into)
        timed = self.timed
        if timed is not None:
            after = _TH_TAKE(timed, into)  # the heap's earliest time now, or None
        else:
            heap = self.heap
            # `dict.pop`, though compiled it is a method looked up by name: a lookup and a
            # delete as two dictionary primitives cost more (callgrind, forty-ninth round),
            # each searching with the time boxed anew, not the key object the dictionary holds.
            held = self.items.pop(_HEAPPOP(heap))
            if type(held) is list:
                into.extend(held)
            else:
                into.append(held)
            if len(into) > 1:
                into.sort()
            after = heap[0] if heap else None
        self.in_heap -= len(into) - before
        if after is not None:
            self.heap_first = after
        return taken

    def take_time(self, into: list[Any]) -> int:
        """Take out the oldest time: its items go into `into`, an empty list, in item order;
        returns the time. The caller keeps one list for a walk of many times and reads it as
        a list: handing each time's items back in a new tuple or list cost an allocation and
        an iteration the compiled caller made through the generic protocol, together about 500
        instructions a time (docs/performance.md, fifty-fifth round)."""
        run, head = self.run, self.head
        n = len(run)
        if head < n:
            time: int = run[head]
            in_heap = self.in_heap > 0
            if not in_heap or time <= self.heap_first:
                run_items = self.run_items
                into.append(run_items[head])
                run_items[head] = None
                head += 1
                while head < n and run[head] == time:  # more items at this time
                    into.append(run_items[head])
                    run_items[head] = None
                    head += 1
                if in_heap and self.heap_first == time:  # the heap holds the time too
                    self._take_heap(into)
                elif len(into) > 1:
                    into.sort()
                if head >= _RUN_CUT and 2 * head >= n:
                    # The taken front cut off once it is half the run: each place is moved at
                    # most once on average, and the run holds no more than twice what is left.
                    del run[:head]
                    del run_items[:head]
                    head = 0
                self.head = head
                self.size -= len(into)
                return time
        # Below the run's next time: the run holds none of it.
        taken = self._take_heap(into)
        self.size -= len(into)
        return taken

    def take_before(self, bound: int, into: list[Any], times: list[int] | None = None) -> int:
        """Take out every pair with time < bound, in the order `take_time` called until
        `has_before(bound)` is false gives them: times ascending, a time's items in item
        order. Their items go into `into` and, when given, their times into `times`, one for
        each item; returns how many were taken.

        For a caller that pushes nothing into this queue while it walks what was taken (the
        join's eviction walks; a pair pushed below the bound during a walk of `take_time`
        would have come out in it). Where no time below the bound is in the heap, the run's
        pairs leave as two slices: taken time by time, each time was a call, a check of the
        heap and a cleared list, about 700 instructions (callgrind, docs/performance.md,
        sixtieth round)."""
        run, head = self.run, self.head
        if self.in_heap > 0 and self.heap_first < bound:
            # The heap holds some of them: time by time, as take_time merges the two.
            taken = 0
            one: list[Any] = []
            while self.has_before(bound):
                one.clear()
                t = self.take_time(one)
                into.extend(one)
                if times is not None:
                    for _ in one:
                        times.append(t)
                taken += len(one)
            return taken
        n = len(run)
        end = head
        while end < n:  # the run's times never decrease; a walk takes a few of them
            at: int = run[end]
            if at >= bound:
                break
            end += 1
        if end == head:
            return 0
        run_items = self.run_items
        # The run is in (time, item) order: its pairs leave as they are.
        into.extend(run_items[head:end])
        if times is not None:
            times.extend(run[head:end])
        i = head
        while i < end:  # a taken place holds None until the front is cut off, as in take_time
            run_items[i] = None
            i += 1
        taken = end - head
        if end >= _RUN_CUT and 2 * end >= n:
            del run[:end]
            del run_items[:end]
            end = 0
        self.head = end
        self.size -= taken
        return taken

    def pop_time(self) -> tuple[int, list[Any]]:
        """Take out the oldest time and its items, in item order (`take_time`, into a new
        list)."""
        items: list[Any] = []
        t = self.take_time(items)
        return t, items

    def pop_before(self, bound: int) -> Iterator[tuple[int, Any]]:
        """Take out, in order, every pair with time < bound. The items of one time leave
        together: a pair the caller pushes while taking comes out in this walk if it is below
        the bound, after the items of the time being handed out."""
        while self.has_before(bound):
            t, at = self.pop_time()
            for item in at:
                yield t, item

    def pairs(self) -> list[tuple[int, Any]]:
        """Every pair, in the order they would be taken out (for checkpoints and views)."""
        run, run_items = self.run, self.run_items
        out = [(run[i], run_items[i]) for i in range(self.head, len(run))]
        out.extend(self.held_apart())
        out.sort()
        return out

    def held_apart(self) -> list[tuple[int, Any]]:
        """The pairs held in the heap, not the run, in no particular order."""
        timed = self.timed
        if timed is not None:
            pairs: list[tuple[int, Any]] = _TH_PAIRS(timed)
            return pairs
        out: list[tuple[int, Any]] = []
        for t in self.heap:
            at = self.items[t]
            if type(at) is list:
                out.extend((t, item) for item in at)
            else:
                out.append((t, at))
        return out

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return iter(self.pairs())
