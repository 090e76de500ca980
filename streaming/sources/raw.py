"""The raw record every source yields: a module of its own in the compiled core
(streaming.native), so that the compiled host reads a raw record's fields as C struct members
while the sources, compiled or not, build them."""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson

from ..contracts.record import FieldValues
from ..timeutil import NEG_INF


class RawRecord(FieldValues):
    """One record as a source read it.

    A plain slotted class compiled with the host, not a msgspec struct: the host's batch loop
    read each of a struct's fields through Python's generic attribute lookup, some 2% of a
    ledger worker's decode-and-operator instructions (docs/performance.md, twenty-eighth
    round). Mutable: the journal's replay sets `fault`."""

    __slots__ = ("topic", "partition", "offset", "line", "arrival_us", "fault")

    def __init__(self, topic: str, partition: int, offset: int, line: bytes, arrival_us: int,
                 fault: tuple[str, str] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.line = line
        self.arrival_us = arrival_us  # the line's arrival time, or its predecessor's when none
        # Set when the source itself judges the record unusable (reason, detail); the host
        # quarantines it without validating. Today: `arrival_time_jump`.
        self.fault = fault

    @property
    def obj(self) -> object:
        """The line's JSON value, or the decode error (`json_object`): built only when asked
        (the host decodes the line against its contract, not from this), so reading a
        record costs no dict."""
        return json_object(self.line)

    def as_tuple(self) -> tuple[Any, ...]:
        return (self.topic, self.partition, self.offset, self.line, self.arrival_us, self.fault)

    def __repr__(self) -> str:
        return "RawRecord(topic={!r}, partition={!r}, offset={!r}, line={!r}, " \
               "arrival_us={!r}, fault={!r})".format(*self.as_tuple())


def json_object(line: bytes) -> object:
    """A line's JSON value, or the `orjson.JSONDecodeError` when it is not JSON."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return exc


def vouched_run(topic: str, partition: int, off: int, end: int,
                ahead: deque[tuple[bytes, int | None]], prev: int, jump: int | None,
                window: deque[RawRecord], marks: dict[int, int], mark_every: int
                ) -> tuple[int, int]:
    """The file log's window fill (`filelog._Partition._fill`), record by record from `off`
    while its partition vouches for the next record's arrival: none, or within `jump` of the
    running arrival `prev` (`records.arrival_suspect`, inline). Each such record is taken from
    the decoded look-ahead `ahead` into `window` with the running arrival as its merge
    arrival; `marks` learns the running arrival before every `mark_every`-th line. Stops at
    `end` or at the first suspect, which the caller judges; returns (that offset, the running
    arrival there). Compiled with the raw record: the loop is about half of the reading of a
    1,000,000-line log when interpreted (docs/performance.md, thirty-fifth round)."""
    pop = ahead.popleft
    add = window.append
    while off < end:
        if off % mark_every == 0 and off // mark_every not in marks:
            marks[off // mark_every] = prev
        own = ahead[0][1]
        if own is None:
            add(RawRecord(topic, partition, off, pop()[0], prev))
        elif jump is None or (prev > NEG_INF and own - prev <= jump):
            if own > prev:
                prev = own
            add(RawRecord(topic, partition, off, pop()[0], prev))
        else:
            break
        off += 1
    return off, prev
