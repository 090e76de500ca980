"""Input contracts: decode and validate a source line in one pass, with one specific reason per
defect, and hash the record's canonical business payload.

A contract is a typed `msgspec.Struct` (records.py) plus which fields are the ID, key, revision
and times. The same struct drives the C decoder, the validator of already-parsed objects and the
JSON Schema published to producers. Each valid line becomes a `Record`.

Canonical payload: the contract's business fields (everything but redelivery metadata such as
the arrival time and `schema_version`), keys sorted, times rewritten as the canonical UTC
instant (`2026-10-06T09:59:00Z`, microseconds only when non-zero), scores as floats, an absent
optional time as null. The same content spelled differently (`+02:00` vs `Z`, `.000000`, `1`
vs `1.0`) therefore hashes equal; the hash is taken once over these bytes, which are kept."""

from __future__ import annotations

import operator
import typing
from datetime import datetime, timedelta, timezone
from typing import Any

import msgspec
import orjson

from ..hashing import digest
from . import bounds as B
from . import reasons as R
from .canonical import (MAX_US, MIN_US, DecodePlan, decoded_record, payload_roles,
                        record_of)
from .record import InvalidRecord, Record

SUPPORTED_SCHEMA_VERSIONS = B.SUPPORTED_SCHEMA_VERSIONS

_UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)
_ONE_US = timedelta(microseconds=1)
_DETAIL_MAX = 200
_FORBIDDEN = B.FORBIDDEN_ID_CHAR


def payload_hash(payload: dict[str, Any]) -> str:
    """Hash of a business payload: canonical JSON (sorted keys), blake2b-128."""
    return digest(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS))


def canonical_hash(payload: dict[str, Any]) -> tuple[str, str]:
    """(canonical JSON, its hash): the same bytes are hashed and stored, so they cannot drift."""
    raw = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    return raw.decode(), digest(raw)


def parse_line(line: bytes | str) -> dict[str, Any]:
    """Parse one source line into an object (the general JSON reader, for the slow path)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        if isinstance(line, bytes):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InvalidRecord(R.INVALID_UTF8, f"byte {err.start} is not UTF-8 "
                                                    f"({err.reason})") from None
        raise InvalidRecord(R.MALFORMED_JSON, str(exc)[:120]) from None
    if not isinstance(obj, dict):
        raise InvalidRecord(R.NOT_AN_OBJECT, type(obj).__name__)
    return obj


def quarantine_text(line: bytes) -> str:
    """The raw line as text every store column accepts: invalid UTF-8 as `\\xNN` escapes, NUL
    as `\\x00` (PostgreSQL text refuses NUL), everything else as it came."""
    text = line.decode("utf-8", "backslashreplace")
    return text.replace("\x00", "\\x00") if "\x00" in text else text


def _kind(hint: object) -> str:
    kind = None
    for meta in getattr(hint, "__metadata__", ()):
        if isinstance(meta, msgspec.Meta) and meta.extra and "kind" in meta.extra:
            kind = str(meta.extra["kind"])  # the outermost kind wins
    if kind is None:
        raise TypeError(f"contract field type {hint!r} has no kind")
    return kind


def instants_as_text(struct: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """`struct` with its instants typed as text (an optional one as text or null), every other
    field as it is: the struct the C decoder reads a line into (`DecodePlan`).

    Why: msgspec's reading of an instant into a datetime, and that datetime read back into
    microseconds and written again as text, were about a tenth of decoding a record
    (docs/performance.md, fifty-fourth round). Read as text, a UTC spelling is read in C and
    a canonical one kept as the payload's text (`payload_of`); any other spelling is read by
    `canonical.read_instant`, msgspec's reader of the contract's instant type, and a text it
    refuses sends the line to the general path (`validate`, through the contract's own
    struct), which names the defect. A text is all a JSON string can be, so a line this
    struct refuses the contract's struct refuses too: the general path judges it as before."""
    hints = typing.get_type_hints(struct, include_extras=True)
    fields: list[tuple[Any, ...]] = []
    for f in msgspec.structs.fields(struct):
        kind = _kind(hints[f.name])
        hint = str if kind == B.TIME else (str | None) if kind == B.OPT_TIME else hints[f.name]
        if f.default is not msgspec.NODEFAULT:
            fields.append((f.name, hint, f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, hint, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, hint))
    config = struct.__struct_config__
    twin = msgspec.defstruct(
        f"{struct.__name__}InstantsAsText", fields, kw_only=True, gc=config.gc,
        forbid_unknown_fields=config.forbid_unknown_fields,
        rename={f.name: f.encode_name for f in msgspec.structs.fields(struct)})
    if twin.__struct_fields__ != struct.__struct_fields__:  # payload_of reads them by position
        raise TypeError(f"{struct.__name__}: the text twin's fields differ")
    return twin


class Contract:
    """One topic's record contract: its struct and the roles of its fields."""

    def __init__(self, topic: str, struct: type[msgspec.Struct], id_field: str, key_field: str,
                 event_time_field: str, arrival_time_field: str,
                 revision_field: str | None = "revision", non_payload: tuple[str, ...] = (),
                 description: str | None = None):
        self.topic = topic
        self.struct = struct
        self.id_field = id_field
        self.key_field = key_field
        self.event_time_field = event_time_field
        self.arrival_time_field = arrival_time_field
        self.revision_field = revision_field
        self.non_payload = tuple(non_payload)
        self.description = description if description is not None else \
            " ".join((struct.__doc__ or "").split())
        hints = typing.get_type_hints(struct, include_extras=True)
        # (name, kind, type) in documented order; schema_version is checked first, apart.
        self.fields = tuple((n, _kind(hints[n]), hints[n]) for n in struct.__struct_fields__
                            if n != "schema_version")
        self._version_type = hints["schema_version"]
        ids = tuple(n for n, k, _ in self.fields if k in (B.ID, B.LABEL))
        times = tuple(n for n, k, _ in self.fields if k in (B.TIME, B.OPT_TIME))
        # Not business content: dropped from the payload before it is hashed.
        dropped = ("schema_version", *self.non_payload)
        roles, order = payload_roles(struct.__struct_fields__, ids, times, dropped)
        # What the compiled decoder reads (canonical.py).
        self.plan = DecodePlan(
            topic, msgspec.json.Decoder(instants_as_text(struct)),
            operator.attrgetter(*ids) if len(ids) > 1 else (lambda s: (getattr(s, ids[0]),)),
            tuple((n, n not in self.non_payload) for n in times), dropped,
            id_field, key_field, revision_field, event_time_field, arrival_time_field,
            struct.__struct_fields__, roles, order)
        names = {n for n, _, _ in self.fields}
        for role in (id_field, key_field, event_time_field, arrival_time_field,
                     revision_field, *self.non_payload):
            if role is not None and role not in names:
                raise ValueError(f"{topic}: {role!r} is not a field of {struct.__name__}")

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(n for n, _, _ in self.fields)

    def json_schema(self) -> dict[str, Any]:
        """The published JSON Schema, generated from the struct."""
        return contract_schema(self)

    def __repr__(self) -> str:
        return f"Contract({self.topic!r}, {self.struct.__name__})"


SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def contract_schema(contract: Contract) -> dict[str, Any]:
    """One topic's JSON Schema: the struct's schema, titled by topic, without msgspec's $defs."""
    body = msgspec.json.schema(contract.struct)["$defs"][contract.struct.__name__]
    return {
        "$schema": SCHEMA_DIALECT,
        "title": contract.topic,
        "description": contract.description,
        "type": "object",
        "required": list(body.get("required", [])),
        "properties": body["properties"],
    }


def decode(contract: Contract, line: bytes, partition: int, offset: int) -> Record:
    """Decode and validate one raw source line (the hot path). Raises InvalidRecord.

    A line the C decoder accepts is built straight into a Record; any other line is judged by
    `validate` on the generally parsed object, which gives the documented reason precedence
    (malformed JSON first, then schema version, then fields in contract order, then record
    rules)."""
    rec = decoded_record(contract.plan, line, partition, offset)
    if rec is not None:
        return rec
    return validate(contract, parse_line(line), partition, offset, len(line))


def validate(contract: Contract, obj: object, partition: int, offset: int, size: int) -> Record:
    """Validate one already-parsed object against its contract. Raises InvalidRecord."""
    if not isinstance(obj, dict):
        raise InvalidRecord(R.NOT_AN_OBJECT, type(obj).__name__)
    try:
        struct = msgspec.convert(obj, contract.struct, strict=True)
    except msgspec.ValidationError as exc:
        raise _defect(contract, obj, str(exc)) from None
    except RecursionError:
        raise InvalidRecord(R.MALFORMED_JSON, "nested deeper than the decoder follows "
                                              "(about 1,000 levels)") from None
    rec = record_of(contract.plan, struct, partition, offset, size)
    if rec is None:
        raise _defect(contract, obj, "an identifier or instant outside its bounds")
    return rec


def _detail(name: str, value: object, message: str) -> str:
    text = f"{name}: {message.split(' - at `')[0]}, got {value!r}"
    return text if len(text) <= _DETAIL_MAX else text[:_DETAIL_MAX - 3] + "..."


def _defect(c: Contract, obj: dict[str, Any], message: str) -> InvalidRecord:
    """The first defect of an object the struct refused, judged field by field in contract
    order with the same types, so every record with several defects gets one stable reason."""
    sv = obj.get("schema_version", 1)
    try:
        msgspec.convert(sv, c._version_type, strict=True)
    except msgspec.ValidationError:
        return InvalidRecord(R.UNKNOWN_SCHEMA_VERSION, repr(sv)[:_DETAIL_MAX])
    below_one = None
    for name, kind, hint in c.fields:
        if name not in obj:
            if kind == B.OPT_TIME:
                continue
            return InvalidRecord(R.MISSING_FIELD, name)
        value = obj[name]
        try:
            msgspec.convert(value, hint, strict=True)
        except msgspec.ValidationError as e:
            reason = R.reason_for(kind, str(e), value)
            if reason == R.REVISION_BELOW_ONE:
                below_one = below_one or InvalidRecord(
                    R.WRONG_TYPE, f"{name} must be >= 1, got {value!r}")
                continue
            return InvalidRecord(reason, _detail(name, value, str(e)))
        if kind in (B.TIME, B.OPT_TIME) and value is not None:
            us = (msgspec.convert(value, hint, strict=True) - _EPOCH) // _ONE_US
            if not MIN_US <= us <= MAX_US:
                return InvalidRecord(R.OUT_OF_RANGE, _detail(
                    name, value, f"instants lie within {B.MIN_INSTANT.isoformat()} .. "
                                 f"{B.MAX_INSTANT.isoformat()}"))
        if kind in (B.ID, B.LABEL) and _FORBIDDEN.search(value):
            return InvalidRecord(R.BAD_ID, _detail(
                name, value, f"allowed characters are {B.ID_CHARS}"))
    if below_one is not None:
        return below_one
    # Not reachable for a dict the fields accept one by one; keep the decoder's own words.
    return InvalidRecord(R.WRONG_TYPE, message[:_DETAIL_MAX])
