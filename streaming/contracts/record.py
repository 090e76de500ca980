"""The validated record every contract decodes to, and the error a defective one raises: a
module of their own so that the compiled decoder (canonical.py), the operators and the host
share them."""

from __future__ import annotations

from typing import Any, Final, cast

# The fields in order: the slots, the constructor's positional order, what equality compares
# and what `replace` copies.
FIELDS: Final[tuple[str, ...]] = ("topic", "partition", "offset", "id", "revision", "key",
                                  "event_us", "arrival_us", "payload", "payload_hash", "size",
                                  "times", "payload_json")


class FieldValues:
    """A record compared, and pickled, by its fields' values, as a msgspec struct is: the base
    of the compiled core's record classes (this `Record`, and the sources' `RawRecord`)."""

    __slots__ = ()

    def as_tuple(self) -> tuple[Any, ...]:
        """The fields' values in the constructor's order."""
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by its fields (a compiled class has no instance dict to copy, and its
        # constructor takes the fields in order).
        return (type(self), self.as_tuple())

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.as_tuple() == cast(FieldValues, other).as_tuple()

    def __ne__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.as_tuple() != cast(FieldValues, other).as_tuple()

    # Mutable and compared by value: not hashable.
    __hash__ = None  # type: ignore[assignment]


class Record(FieldValues):
    """A validated input record with its source position.

    A plain slotted class in the compiled core (streaming.native), not a msgspec struct: the
    compiled operators, the archive rows and the host read a record's fields as C struct
    members, where a struct's fields were each read through Python's generic attribute
    lookup, some 10% of the join operator's instructions (docs/performance.md,
    twenty-eighth round)."""

    __slots__ = FIELDS

    def __init__(self, topic: str, partition: int, offset: int, id: str, revision: int,
                 key: str, event_us: int, arrival_us: int, payload: dict[str, Any],
                 payload_hash: str, size: int, times: dict[str, Any] | None = None,
                 payload_json: str | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.id = id
        self.revision = revision
        self.key = key
        self.event_us = event_us
        self.arrival_us = arrival_us
        self.payload = payload  # canonical business fields (times as canonical ISO strings)
        self.payload_hash = payload_hash  # blake2b-128 of the canonical JSON, encoded
        self.size = size  # bytes of the source line, used for state-bytes accounting
        # Every time field, µs (or None).
        self.times: dict[str, Any] = {} if times is None else times
        # The canonical JSON the hash was taken over, as text (what the archive stores). Text,
        # not the bytes the encoder returned: those keep a 4 KiB block each, a batch's records
        # 20 MiB of blocks touched once and freed together (docs/performance.md, twentieth
        # round).
        self.payload_json = payload_json

    @property
    def payload_bytes(self) -> bytes | None:
        return None if self.payload_json is None else self.payload_json.encode()

    def as_tuple(self) -> tuple[Any, ...]:
        return (self.topic, self.partition, self.offset, self.id, self.revision, self.key,
                self.event_us, self.arrival_us, self.payload, self.payload_hash, self.size,
                self.times, self.payload_json)

    def replace(self, **changes: Any) -> Record:
        """A copy with the named fields changed (tests build variants of a decoded record)."""
        unknown = set(changes) - set(FIELDS)
        if unknown:
            raise TypeError(f"Record has no field {', '.join(sorted(unknown))}")
        values = dict(zip(FIELDS, self.as_tuple(), strict=True))
        values.update(changes)
        return Record(**values)

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={v!r}" for n, v in zip(FIELDS, self.as_tuple(), strict=True))
        return f"Record({fields})"


class InvalidRecord(Exception):
    """Bad input: carries a specific, stable reason code and a human detail."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
