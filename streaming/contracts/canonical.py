"""The hot path of every contract: a source line's bytes to a `Record`, in one compiled pass
(streaming.native). The C decoder builds the contract's struct; this module turns it into the
canonical payload (times in one spelling, redelivery fields dropped), the times in integer
microseconds and the payload's hash. Any line it does not accept whole goes to the contracts'
general path (core.validate), which judges it field by field for its quarantine reason."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec
import orjson

from .. import native
from ..hashing import digest
from ..timeutil import US_PER_MIN, us_to_iso
from . import bounds as B
from . import reasons as R
from .record import InvalidRecord, Record

if TYPE_CHECKING:
    # Compiled, an i64 is a machine integer: the microseconds of an instant (about 1.8e15
    # now, at most 2.6e17 in year 9999) exceed what the compiled int's multiplication keeps
    # on machine integers (factors below 2**30), and each such product became a Python int.
    from mypy_extensions import i64

# An event time more than this far after its own arrival is a producer clock fault.
CLOCK_FAULT_US: Final = 5 * US_PER_MIN

_UTC: Final = timezone.utc
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=_UTC)
_FORBIDDEN: Final = B.FORBIDDEN_ID_CHAR
_ASDICT: Final = msgspec.structs.asdict
_ASTUPLE: Final = msgspec.structs.astuple
_SORTED: Final = orjson.OPT_SORT_KEYS
_DECODE_ERRORS: Final = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)


def py_instant_us(v: datetime) -> int:
    """Microseconds since the epoch of an aware datetime, in Python (the C twin's reference)."""
    d = v - _EPOCH
    # Typed, so the arithmetic is on C integers rather than int objects.
    days: i64 = d.days
    seconds: i64 = d.seconds
    micros: i64 = d.microseconds
    return (days * 86400 + seconds) * 1_000_000 + micros


def py_ids_in_alphabet(ids: tuple[str, ...]) -> bool:
    """Whether every ID is in the alphabet, in Python (the C twin's reference): one search
    over all of them joined (msgspec's per-field `pattern` costs a Python call each)."""
    return _FORBIDDEN.search("".join(ids)) is None


# Where the compiled core is in use, its hand-written C (streaming/_texts.c): an instant and
# the ID check were several interpreter calls per field (docs/performance.md, thirtieth round).
# Decided once, when the package's build is (streaming.native.select runs before this import).
_INSTANT_US: Final[Callable[[datetime], int]] = (
    native.hand_written("streaming._texts", "instant_us") or py_instant_us)
_IDS_IN_ALPHABET: Final[Callable[[tuple[str, ...]], bool]] = (
    native.hand_written("streaming._texts", "ids_in_alphabet") or py_ids_in_alphabet)
# A payload's record in one C call (streaming/_texts.c): the struct's values in, the payload,
# its canonical JSON and the times out, where the Python twin built a dict, rewrote it, and
# encoded and decoded it again (docs/performance.md, thirty-first round). What it does not spell
# itself it has orjson write, with the same option.
_PAYLOAD_OF: Final[Callable[..., Any] | None] = native.hand_written("streaming._texts",
                                                                    "payload_of")
_ENCODE_SORTED: Final = functools.partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)
# The contract structs' reader of an instant (an aware RFC 3339 date-time, bounds.Instant).
_READ_ZONED: Final = msgspec.json.Decoder(B.Instant).decode
_READ_REFUSED: Final = (msgspec.ValidationError, msgspec.DecodeError, orjson.JSONEncodeError)


def read_instant(text: str) -> datetime | None:
    """The instant a text spells, as the contract's struct reads it (any zone, `T`, `t` or a
    space, any fraction), or None for a text it refuses. The C decoder's struct holds instants
    as text (`instants_as_text`); `payload_of` reads UTC spellings itself (`utc_text_us`) and
    any other through this, one call per instant, where sending the line to the general path
    cost the whole line's decoding again."""
    try:
        return _READ_ZONED(orjson.dumps(text))
    except _READ_REFUSED:
        return None


_READ_INSTANT: Final = read_instant  # bound once, for the C call per record
MIN_US: Final = py_instant_us(B.MIN_INSTANT)
MAX_US: Final = py_instant_us(B.MAX_INSTANT)
if _PAYLOAD_OF is not None:
    # The C holds the same range as the contracts' bounds (years 1-9999), as constants.
    _C_RANGE = (native.hand_written("streaming._texts", "FIRST_US"),
                native.hand_written("streaming._texts", "LAST_US"))
    if _C_RANGE != (MIN_US, MAX_US):
        raise ImportError(f"streaming._texts holds the instants {_C_RANGE}, the contracts "
                          f"{(MIN_US, MAX_US)}: rebuild the compiled core")


# What `payload_of` does with each field of a contract's struct (a bit set per field; the C
# twin reads the same bits, streaming/_texts.c).
ROLE_IN_PAYLOAD: Final = 1  # a member of the payload
ROLE_ID: Final = 2  # a text in the ID alphabet
ROLE_TIME: Final = 4  # an instant (or None): its microseconds go into the record's times


class DecodePlan:
    """What the hot path reads of a contract, as fields of a compiled class (one C read each,
    where the contract's attributes are dictionary lookups): built by `Contract`."""

    def __init__(self, topic: str, decoder: Any, ids_of: Any,
                 time_fields: tuple[tuple[str, bool], ...], dropped_fields: tuple[str, ...],
                 id_field: str, key_field: str, revision_field: str | None,
                 event_time_field: str, arrival_time_field: str,
                 fields: tuple[str, ...], roles: bytes, order: tuple[int, ...]) -> None:
        self.topic = topic
        # The contract's msgspec JSON decoder's `decode`, bound once: compiled,
        # `decoder.decode(line)` looked the method up by name on every line (callgrind,
        # fifty-first round).
        self.decode = decoder.decode
        self.ids_of = ids_of  # a struct -> its identifiers and labels, as a tuple
        self.time_fields = time_fields  # (name, kept in the payload) of every time field
        self.dropped_fields = dropped_fields  # not business content: out of the payload
        self.id_field = id_field
        self.key_field = key_field
        self.revision_field = revision_field
        self.event_time_field = event_time_field
        self.arrival_time_field = arrival_time_field
        # For the C `payload_of`: the struct's fields in order, a ROLE_* bit set for each, and
        # the indices of the payload's members sorted by name (`payload_roles`).
        self.fields = fields
        self.roles = roles
        self.order = order


def payload_roles(struct_fields: tuple[str, ...], ids: tuple[str, ...],
                  times: tuple[str, ...], dropped: tuple[str, ...]
                  ) -> tuple[bytes, tuple[int, ...]]:
    """The ROLE_* bits of each struct field and the indices of the payload's members sorted by
    name (the key order of the canonical JSON): what `DecodePlan` hands `payload_of`."""
    roles = bytes((0 if n in dropped else ROLE_IN_PAYLOAD) | (ROLE_ID if n in ids else 0)
                  | (ROLE_TIME if n in times else 0) for n in struct_fields)
    order = tuple(sorted((i for i, n in enumerate(struct_fields) if n not in dropped),
                         key=lambda i: struct_fields[i]))
    for n in struct_fields:
        # The C writes each name between quotes as it is: a name JSON would escape (or one
        # past ASCII, whose order orjson might sort otherwise) is refused here.
        if not n.isascii() or not n.isprintable() or '"' in n or "\\" in n:
            raise ValueError(f"field name {n!r} needs escaping in JSON")
    return roles, order


def decoded_record(c: DecodePlan, line: bytes, partition: int, offset: int,
                   hash_now: bool = True) -> Record | None:
    """The Record of a line the contract's C decoder accepts whole; None for any other line
    (the caller then judges it on the general path). Raises InvalidRecord for a record-level
    defect. Without `hash_now` the record's `payload_hash` is left empty for the caller to
    take over its `payload_json` (with other records' at once: `hashing.digests`)."""
    try:
        struct = c.decode(line)
    except _DECODE_ERRORS:
        # RecursionError: msgspec descends into every value, even of a field the contract
        # does not have, and stops at the interpreter's recursion limit (about 1,000 levels,
        # below orjson's 1,024): the general reader then judges the line.
        return None
    return record_of(c, struct, partition, offset, len(line), hash_now)


def record_of(c: DecodePlan, s: msgspec.Struct, partition: int, offset: int,
              size: int, hash_now: bool = True) -> Record | None:
    """The Record of a struct the decoder accepted; None when an ID has a character outside
    the alphabet or an instant lies outside the UTC range (the caller then judges the object
    field by field). Raises InvalidRecord for a record-level defect."""
    fast = _PAYLOAD_OF
    # Typed a tuple: compiled, its items are then read as a tuple's, where an object's were
    # each a generic subscription (callgrind, fifty-first round).
    got: tuple[Any, ...] | None
    if fast is not None:
        got = fast(_ASTUPLE(s), c.fields, c.roles, c.order, _ENCODE_SORTED, _READ_INSTANT)
    else:
        got = py_payload_of(c, s)
    if got is None:
        return None
    payload: dict[str, Any] = got[0]
    text: str = got[1]
    times: dict[str, Any] = got[2]
    # Both time fields are required by every contract's struct: never None here. Read back as
    # the objects the times hold (not unboxed): the Record then shares them, as state that
    # keeps a record's times does, instead of holding copies.
    event_us = times[c.event_time_field]
    arrival_us = times[c.arrival_time_field]
    # Compared as ints: the objects' difference was the generic subtraction (callgrind).
    if cast(int, event_us) - cast(int, arrival_us) > CLOCK_FAULT_US:
        raise InvalidRecord(
            R.EVENT_TIME_AFTER_ARRIVAL,
            f"{c.event_time_field} is {(event_us - arrival_us) / 60e6:.1f} min after "
            f"{c.arrival_time_field} (limit 5 min): producer clock fault")
    revision_field = c.revision_field
    return Record(c.topic, partition, offset, payload[c.id_field],
                  payload[revision_field] if revision_field else 1,
                  payload[c.key_field], event_us, arrival_us, payload,
                  digest(text) if hash_now else "", size, times, text)


def py_payload_of(c: DecodePlan, s: msgspec.Struct
                  ) -> tuple[dict[str, Any], str, dict[str, Any]] | None:
    """(payload, its canonical JSON, times) of a struct the decoder accepted, in Python (the
    twin of the C `payload_of`, which the compiled core uses); None when an ID has a character
    outside the alphabet or an instant lies outside the UTC range."""
    if not _IDS_IN_ALPHABET(c.ids_of(s)):
        return None
    payload: dict[str, Any] = _ASDICT(s)
    times: dict[str, Any] = {}
    for name, in_payload in c.time_fields:
        v = payload[name]
        if v is None:
            times[name] = None
            continue
        us: i64
        if type(v) is str:
            # The C decoder's struct holds the instant as its text (`Contract.plan`), read as
            # the contract reads it (the C reads UTC spellings itself, to the same instant).
            dt = read_instant(v)
            if dt is None:
                return None
            us = _INSTANT_US(dt)
        else:
            us = _INSTANT_US(v)
        if not MIN_US <= us <= MAX_US:
            return None
        times[name] = us
        if in_payload:
            # The one spelling of an instant: UTC, `Z`, microseconds only when non-zero (the
            # text msgspec's encoder gives a UTC datetime; tests/test_timeutil.py holds
            # `us_to_iso` to it). An instant in another zone is written in UTC.
            payload[name] = us_to_iso(us)
    for name in c.dropped_fields:
        del payload[name]
    return payload, orjson.dumps(payload, option=_SORTED).decode(), times
