"""What every source shares: the raw record, decoding a line and its arrival time, the
arrival-jump rule, and the deterministic merge by arrival (with the in-memory partition buffer
a snapshot source fills). One definition, so a recording replays in the same order from the
file log and from NATS JetStream."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from ..timeutil import NEG_INF, US_PER_HOUR, TimeFormatError, parse_utc_us, us_to_iso

TP = tuple[str, int]

# A record whose arrival time is more than this beyond its partition's latest arrival is a
# clock fault of the producer (`arrival_time_jump`): it is quarantined and moves no clock.
DEFAULT_MAX_ARRIVAL_JUMP_US = US_PER_HOUR
JUMP_LOOKAHEAD = 16  # later records read to tell an arrival jump from a resumed partition


class SourceError(RuntimeError):
    pass


@dataclass(slots=True)
class RawRecord:
    topic: str
    partition: int
    offset: int
    line: bytes
    obj: object  # decoded JSON object, or an Exception if the line did not decode
    arrival_us: int  # the line's arrival time, or its predecessor's when it has none
    # Set when the source itself judges the record unusable (reason, detail); the host
    # quarantines it without validating. Today: `arrival_time_jump`.
    fault: tuple[str, str] | None = None


def decode_own(line: bytes, arrival_field: str) -> tuple[object, int | None]:
    """A line's JSON object (or the decode error) and its own arrival time (None: unusable)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return exc, None
    if not isinstance(obj, dict):
        return obj, None
    try:
        return obj, parse_utc_us(obj.get(arrival_field))
    except TimeFormatError:
        return obj, None


def arrival_jump(own: int | None, prev: int, next_owns: list[int | None],
                 max_jump_us: int | None) -> str | None:
    """Why a record's arrival time is a producer clock fault, or None.

    A jump is an arrival more than `max_jump_us` past the partition's latest arrival `prev`
    (or a partition's first arrival) that the partition does not follow: one of its next
    JUMP_LOOKAHEAD records (`next_owns`, their own arrivals) arrives more than the bound
    earlier again. A partition that goes on from the new time resumed after a quiet spell, and
    a record that nothing follows yet cannot be told from one: neither is a jump."""
    if max_jump_us is None or own is None:
        return None
    if prev > NEG_INF and own - prev <= max_jump_us:
        return None
    for nxt in next_owns:
        if nxt is not None and own - nxt > max_jump_us:
            return f"a later record of the partition arrives at {us_to_iso(nxt)}"
    return None


def jump_fault(own: int, prev: int, why: str, arrival_field: str,
               max_jump_us: int) -> tuple[str, str]:
    since = f"latest arrival {us_to_iso(prev)}" if prev > NEG_INF else "first record"
    return ("arrival_time_jump",
            f"{arrival_field} {us_to_iso(own)} is more than {max_jump_us // 1_000_000}s ahead of "
            f"the partition ({since}) and {why}; it moves no clock")


def decode_partition(lines: list[bytes], arrival_field: str,
                     max_jump_us: int | None = DEFAULT_MAX_ARRIVAL_JUMP_US
                     ) -> tuple[list[object], list[int]]:
    """Decode one partition's lines: the JSON objects (or the decode error) and the arrival
    times used to merge partitions. Shared by every source so they replay in the same order.
    A line without a usable arrival time, or with an arrival jump (returned as a
    `SourceFault`), keeps its predecessor's arrival: it is consumed right after it."""
    decoded = [decode_own(line, arrival_field) for line in lines]
    arrivals: list[int] = []
    objs: list[object] = []
    prev = NEG_INF
    for i, (obj, own) in enumerate(decoded):
        nxt = [o for _, o in decoded[i + 1:i + 1 + JUMP_LOOKAHEAD]]
        why = arrival_jump(own, prev, nxt, max_jump_us)
        if why is not None:
            # a jump is only found between two known arrival times under a set bound
            assert own is not None and max_jump_us is not None
            objs.append(SourceFault(*jump_fault(own, prev, why, arrival_field, max_jump_us), obj))
        else:
            objs.append(obj)
            if own is not None and own > prev:
                prev = own
        arrivals.append(prev)
    return objs, arrivals


class SourceFault:
    """A decoded object the source judged unusable, with the reason (in-memory sources keep
    objects in lists; `RawRecord.fault` is filled from it)."""

    __slots__ = ("reason", "detail", "obj")

    def __init__(self, reason: str, detail: str, obj: object):
        self.reason, self.detail, self.obj = reason, detail, obj


def raw_record(topic: str, part: int, off: int, line: bytes, obj: object,
               arr: int) -> RawRecord:
    if isinstance(obj, SourceFault):
        return RawRecord(topic, part, off, line, obj.obj, arr, (obj.reason, obj.detail))
    return RawRecord(topic, part, off, line, obj, arr)


def merge_by_arrival(tps: list[TP], positions: dict[TP, int], lines: dict[TP, list[bytes]],
                     objs: dict[TP, list[object]], arrivals: dict[TP, list[int]]
                     ) -> Iterator[RawRecord]:
    """Records of every partition from `positions` on, merged by (arrival, topic, partition,
    offset); each partition stays in offset order."""
    heap: list[tuple[int, str, int, int]] = []
    for tp in tps:
        off = positions.get(tp, 0)
        if off < len(arrivals.get(tp, ())):
            heap.append((arrivals[tp][off], tp[0], tp[1], off))
    heapq.heapify(heap)
    while heap:
        arr, topic, part, off = heapq.heappop(heap)
        tp = (topic, part)
        yield raw_record(topic, part, off, lines[tp][off], objs[tp][off], arr)
        nxt = off + 1
        if nxt < len(arrivals[tp]):
            heapq.heappush(heap, (arrivals[tp][nxt], topic, part, nxt))


class PartitionBuffer:
    """What an in-memory source holds: per topic-partition lines, decoded objects and arrival
    times, offset-addressed, merged by arrival. Subclasses fill `topics`, `partition_counts`,
    `_lines`, `_objs` and `_arrivals`."""

    topics: list[str]
    partition_counts: dict[str, int]
    _lines: dict[TP, list[bytes]]
    _objs: dict[TP, list[object]]
    _arrivals: dict[TP, list[int]]

    def tps(self) -> list[TP]:
        return [(t, p) for t in self.topics for p in range(self.partition_counts[t])]

    def end_offset(self, tp: TP) -> int:
        return len(self._lines.get(tp, ()))

    def total_records(self) -> int:
        return sum(len(v) for v in self._lines.values())

    def read_at(self, tp: TP, offset: int) -> RawRecord:
        return raw_record(tp[0], tp[1], offset, self._lines[tp][offset], self._objs[tp][offset],
                    self._arrivals[tp][offset])

    def next_arrival(self, tp: TP, offset: int) -> int | None:
        arr = self._arrivals.get(tp, ())
        return arr[offset] if offset < len(arr) else None

    def caught_up(self, tp: TP, offset: int, clock_us: int) -> bool:
        """Nothing is pending at the log for tp at source time clock_us (the buffer holds
        everything the log had when it was opened)."""
        nxt = self.next_arrival(tp, offset)
        return nxt is None or nxt > clock_us

    def merged(self, positions: dict[TP, int]) -> Iterator[RawRecord]:
        """All records from `positions` on, merged by (arrival, topic, partition, offset)."""
        return merge_by_arrival(self.tps(), positions, self._lines, self._objs, self._arrivals)
