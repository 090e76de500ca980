"""Keyed, time-indexed state: per key, entries ordered by event time.

Probes bisect into the eligible time range, so a probe touches only records that can match;
eviction pops a prefix. Record counts and bytes are tracked per key and in total so that the
hot key and the state peak are observable without walking the state."""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
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
            i = bisect_right(times, t)
            while i > 0 and times[i - 1] == t and seqs[i - 1] > seq:
                i -= 1
            times.insert(i, t)
            seqs.insert(i, seq)
            self.items.insert(i, item)
        self.bytes += size

    def range(self, lo: int, hi: int) -> list[Any]:
        """Items with lo <= t <= hi (both inclusive), oldest first: a slice, taken in C."""
        times = self.times
        return self.items[bisect_left(times, lo):bisect_right(times, hi)]

    def pop_before(self, bound: int) -> list[Any]:
        """Remove and return items with t < bound, oldest first."""
        i = bisect_left(self.times, bound)
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
        i = bisect_left(times, t)
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

    def insert(self, key: str, t: int, seq: int, item: Any, size: int) -> None:
        idx = self.keys.get(key)
        if idx is None:
            idx = self.keys[key] = TimeIndex()
        idx.insert(t, seq, item, size)
        self.hold(size)

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


# How long the taken front of a TimeQueue's run may grow before it is cut off (see pop_time).
_RUN_CUT: Final = 1024


class TimeQueue:
    """(time, item) pairs taken out oldest first, equal times in item order: what a heap of
    (time, item) tuples gives, kept as the distinct times (plain ints) and the items at each
    time. A tuple heap compares tuples at every level of every push and pop (2.7 us a pop and
    push against 0.5 us for ints, measured over 22,000 entries); ints compare in C.

    A queue whose times mostly come in increasing order (`mostly_ordered`: the join places
    entries and they leave state roughly as time goes on, about four pushes in five in order)
    holds them in two places: a run of times pushed in increasing order (`run`, taken from
    `head` on, a read and a step each), and a heap of the others. A heap made each of them
    walk its levels twice, in and out (docs/performance.md, twenty-ninth round). The oldest
    time is the smaller of the two fronts; a time is in one of the two, never both. Any other
    queue (the receipt scorer's, three pushes in four out of order) keeps every time in the
    heap: there the run's comparisons cost more than it saved.

    A time with one item holds the item itself, not a list of one: most times hold one, and
    a list per time was an object the garbage collector walks on every full collection, where
    the tuples it replaced were untracked (a million of them in a receipt scorer's dedup
    horizon). Items are never lists."""

    __slots__ = ("run", "head", "heap", "items", "size", "mostly_ordered")

    def __init__(self, pairs: Iterable[tuple[int, Any]] = (),
                 mostly_ordered: bool = False) -> None:
        self.mostly_ordered = mostly_ordered
        self.run: list[int] = []  # increasing; run[head:] not taken yet (empty unless ordered)
        self.head = 0
        self.heap: list[int] = []  # the times pushed out of order
        self.items: dict[int, Any] = {}  # time -> its item, or a list of its items
        self.size = 0
        for t, item in pairs:
            self.push(t, item)

    def __len__(self) -> int:
        return self.size

    def push(self, t: Any, item: Any) -> None:
        # `t` is an int; typed Any so that the compiled core (streaming.native) keeps the
        # caller's int object instead of unboxing it and boxing a new one for the dict key and
        # another for the run or heap: 64 bytes per push that the interpreter shares.
        items = self.items
        at = items.get(t)
        if at is None:
            items[t] = item
            if not self.mostly_ordered:
                _HEAPPUSH(self.heap, t)
                self.size += 1
                return
            run = self.run
            n = len(run)
            time: int = t  # compared as a machine integer; `t` itself is what is stored
            if self.head == n:  # the run is used up: it starts again at t
                if n:
                    run.clear()
                    self.head = 0
                run.append(t)
            elif time > run[n - 1]:
                run.append(t)
            else:
                _HEAPPUSH(self.heap, t)
        elif type(at) is list:
            at.append(item)
        else:
            items[t] = [at, item]
        self.size += 1

    def first(self) -> int | None:
        """The oldest time held, or None when empty."""
        run, heap, head = self.run, self.heap, self.head
        if head < len(run):
            return run[head] if not heap or run[head] < heap[0] else heap[0]
        return heap[0] if heap else None

    def has_before(self, bound: int) -> bool:
        """Whether a time below `bound` is held (the oldest one is)."""
        run, heap, head = self.run, self.heap, self.head
        return (head < len(run) and run[head] < bound) or (len(heap) > 0 and heap[0] < bound)

    def pop_time(self) -> tuple[int, list[Any] | tuple[Any]]:
        """Take out the oldest time and its items, in item order."""
        run, heap, head = self.run, self.heap, self.head
        if head < len(run) and (not heap or run[head] < heap[0]):
            t = run[head]
            head += 1
            if head >= _RUN_CUT and 2 * head >= len(run):
                # The taken front cut off once it is half the run: each time is moved at
                # most once on average, and the run holds no more than twice what is left.
                del run[:head]
                head = 0
            self.head = head
        else:
            t = _HEAPPOP(heap)
        # `dict.pop`, though compiled it is a method looked up by name: a lookup and a delete
        # as two dictionary primitives cost more (callgrind, forty-ninth round), each searching
        # with the time boxed anew, not the key object the dictionary holds.
        at = self.items.pop(t)
        if type(at) is not list:
            self.size -= 1
            return t, (at,)
        at.sort()
        self.size -= len(at)
        return t, at

    def pop_before(self, bound: int) -> Iterator[tuple[int, Any]]:
        """Take out, in order, every pair with time < bound. The items of one time leave
        together: a pair the caller pushes while taking comes out in this walk if it is below
        the bound, after the items of the time being handed out."""
        while self.has_before(bound):
            t, at = self.pop_time()
            for item in at:
                yield t, item

    def _at(self, t: int) -> list[Any]:
        at = self.items[t]
        return sorted(at) if type(at) is list else [at]

    def pairs(self) -> list[tuple[int, Any]]:
        """Every pair, in the order they would be taken out (for checkpoints and views)."""
        return [(t, item) for t in sorted(self.run[self.head:] + self.heap)
                for item in self._at(t)]

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return iter(self.pairs())
