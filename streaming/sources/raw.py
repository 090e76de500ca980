"""The raw record every source yields: a module of its own in the compiled core
(streaming.native), so that the compiled host reads a raw record's fields as C struct members
while the sources, compiled or not, build them."""

from __future__ import annotations

from typing import Any

import orjson

from ..contracts.record import FieldValues


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
