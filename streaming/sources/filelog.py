"""File log source: `DIR/<topic>/p<N>.jsonl`, offset = 0-based line number.

Recorded replay merges all topic-partitions by arrival time (ties: topic, partition, offset)
while keeping each partition in offset order, so a recording always replays in the same order.
The worker clock is the arrival time of the record being read (source time)."""

from __future__ import annotations

import hashlib
import heapq
import os
import re
from dataclasses import dataclass
from collections.abc import Iterator

import orjson

from ..timeutil import NEG_INF, TimeFormatError, parse_utc_us

_PART_RE = re.compile(r"^p(\d+)\.jsonl$")

TP = tuple[str, int]


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


def decode_partition(lines: list[bytes], arrival_field: str) -> tuple[list[object], list[int]]:
    """Decode one partition's lines: the JSON objects (or the decode error) and the arrival
    times used to merge partitions. Shared by every source so they replay in the same order."""
    arrivals: list[int] = []
    objs: list[object] = []
    prev = NEG_INF
    for line in lines:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            obj = exc
        arr = prev
        if isinstance(obj, dict):
            try:
                arr = parse_utc_us(obj.get(arrival_field))
            except TimeFormatError:
                arr = prev
        objs.append(obj)
        # A line without a usable arrival time keeps its predecessor's, so it is consumed
        # right after it and the partition stays in offset order.
        arr = max(arr, prev)
        arrivals.append(arr)
        prev = arr
    return objs, arrivals


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
        yield RawRecord(topic, part, off, lines[tp][off], objs[tp][off], arr)
        nxt = off + 1
        if nxt < len(arrivals[tp]):
            heapq.heappush(heap, (arrivals[tp][nxt], topic, part, nxt))


class PartitionBuffer:
    """What both sources share once a log is read into memory: per topic-partition lines,
    decoded objects and arrival times, offset-addressed, merged by arrival. Subclasses fill
    `topics`, `partition_counts`, `_lines`, `_objs` and `_arrivals`."""

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
        return RawRecord(tp[0], tp[1], offset, self._lines[tp][offset], self._objs[tp][offset],
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


class FileLog(PartitionBuffer):
    kind = "filelog"

    def __init__(self, root: str, topics: list[str], arrival_field: dict[str, str] | None = None):
        self.root = root
        self.topics = list(topics)
        self._arrival_field = arrival_field or {}
        self._lines: dict[TP, list[bytes]] = {}
        self._byte_ends: dict[TP, list[int]] = {}
        self._arrivals: dict[TP, list[int]] = {}
        self._objs: dict[TP, list[object]] = {}
        self.partition_counts: dict[str, int] = {}
        if not os.path.isdir(root):
            raise SourceError(f"source directory {root!r} does not exist")
        for topic in self.topics:
            tdir = os.path.join(root, topic)
            parts: dict[int, str] = {}
            if os.path.isdir(tdir):
                for name in os.listdir(tdir):
                    m = _PART_RE.match(name)
                    if m:
                        parts[int(m.group(1))] = os.path.join(tdir, name)
            if not parts:
                raise SourceError(f"topic {topic!r} has no partitions under {tdir!r} "
                                  f"(expected files named p0.jsonl, p1.jsonl, ...)")
            n = max(parts) + 1
            self.partition_counts[topic] = n
            for p in range(n):
                self._load((topic, p), parts.get(p))

    def _load(self, tp: TP, path: str | None) -> None:
        lines: list[bytes] = []
        ends: list[int] = []
        if path is not None:
            with open(path, "rb") as fh:
                data = fh.read()
            pos = 0
            for raw in data.splitlines(keepends=True):
                pos += len(raw)
                stripped = raw.rstrip(b"\r\n")
                if not stripped.strip() and pos == len(data):
                    break  # tolerate a trailing blank line at EOF
                lines.append(stripped)
                ends.append(pos)
        objs, arrivals = decode_partition(lines, self._arrival_field.get(tp[0], "arrival_time"))
        self._lines[tp] = lines
        self._byte_ends[tp] = ends
        self._arrivals[tp] = arrivals
        self._objs[tp] = objs

    # -- positions -----------------------------------------------------------------------
    def fingerprint(self, tp: TP, upto: int) -> str:
        """Hash of the partition's bytes before `upto`: appending keeps it, rewriting breaks it."""
        if upto == 0:
            return hashlib.sha256(b"").hexdigest()
        ends = self._byte_ends[tp]
        if upto > len(ends):
            return "beyond-end"
        path = os.path.join(self.root, tp[0], f"p{tp[1]}.jsonl")
        with open(path, "rb") as fh:
            data = fh.read(ends[upto - 1])
        return hashlib.sha256(data).hexdigest()

    def identity(self) -> dict:
        return {"kind": self.kind, "root": os.path.abspath(self.root),
                "partitions": dict(self.partition_counts)}

    def ack(self, ranges: dict[TP, tuple[int, int]]) -> None:
        """The file log keeps no consumer state: positions live in the store's checkpoints."""
        return None
