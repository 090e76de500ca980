"""Input contracts: field specs, validation with one specific reason per defect, and the
business-payload hash used for duplicate/conflict detection.

A contract is data, not code: the same spec drives validation, the JSON schema shipped to
consumers and the archive columns. Each validated line becomes a `Record`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from .timeutil import US_PER_MIN, TimeFormatError, parse_utc_us

# An event time more than this far after its own arrival is a producer clock fault.
CLOCK_FAULT_US = 5 * US_PER_MIN

SUPPORTED_SCHEMA_VERSIONS = (1,)


class Kind:
    STR = "string"
    INT = "integer"
    CENTS = "cents"  # integer minor units; floats and strings are rejected, never rounded
    NUMBER = "number"
    BOOL = "boolean"
    TIME = "time"  # timezone-aware ISO-8601
    OPT_TIME = "optional_time"  # a time or null


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: str
    description: str = ""


@dataclass(frozen=True)
class Contract:
    """One topic's record contract."""

    topic: str
    fields: tuple[FieldSpec, ...]
    id_field: str
    key_field: str
    event_time_field: str
    arrival_time_field: str
    revision_field: str | None = "revision"
    # Fields excluded from the business payload (redelivery metadata such as arrival time).
    non_payload: tuple[str, ...] = ()
    description: str = ""

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def json_schema(self) -> dict:
        props: dict[str, Any] = {}
        for f in self.fields:
            if f.kind == Kind.STR:
                props[f.name] = {"type": "string", "minLength": 1}
            elif f.kind in (Kind.INT, Kind.CENTS):
                props[f.name] = {"type": "integer"}
            elif f.kind == Kind.NUMBER:
                props[f.name] = {"type": "number"}
            elif f.kind == Kind.BOOL:
                props[f.name] = {"type": "boolean"}
            elif f.kind == Kind.TIME:
                props[f.name] = {"type": "string", "format": "date-time",
                                 "pattern": "(Z|[+-][0-9]{2}:[0-9]{2})$"}
            elif f.kind == Kind.OPT_TIME:
                props[f.name] = {"type": ["string", "null"], "format": "date-time"}
            if f.description:
                props[f.name]["description"] = f.description
        props["schema_version"] = {"type": "integer", "enum": list(SUPPORTED_SCHEMA_VERSIONS),
                                   "description": "optional; absent means 1"}
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": self.topic,
            "description": self.description,
            "type": "object",
            "required": [f.name for f in self.fields if f.kind != Kind.OPT_TIME],
            "properties": props,
        }


@dataclass(slots=True)
class Record:
    """A validated input record with its source position."""

    topic: str
    partition: int
    offset: int
    id: str
    revision: int
    key: str
    event_us: int
    arrival_us: int
    payload: dict  # business fields as received (times as ISO strings)
    payload_hash: str
    size: int  # bytes of the source line, used for state-bytes accounting
    times: dict = field(default_factory=dict)  # other parsed time fields, microseconds
    payload_json: str | None = None  # the canonical JSON the hash was taken over


class InvalidRecord(Exception):
    """Bad input: carries a specific, stable reason code and a human detail."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def payload_hash(payload: dict) -> str:
    """Hash of a business payload: canonical JSON (sorted keys), blake2b-128."""
    return hashlib.blake2b(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS),
                           digest_size=16).hexdigest()


def canonical_hash(payload: dict) -> tuple[str, str]:
    """(canonical JSON, its hash): the same bytes are hashed and stored, so they cannot drift."""
    raw = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    return raw.decode(), hashlib.blake2b(raw, digest_size=16).hexdigest()


def parse_line(line: bytes | str) -> dict:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InvalidRecord("malformed_json", str(exc)[:120]) from None
    if not isinstance(obj, dict):
        raise InvalidRecord("not_an_object", type(obj).__name__)
    return obj


_PAYLOAD_FIELDS: dict[int, tuple[str, ...]] = {}


def _payload_fields(contract: Contract) -> tuple[str, ...]:
    # Computed once per contract: this runs for every record.
    key = id(contract)
    fields = _PAYLOAD_FIELDS.get(key)
    if fields is None:
        fields = _PAYLOAD_FIELDS[key] = tuple(
            f.name for f in contract.fields if f.name not in contract.non_payload)
    return fields


def validate(contract: Contract, obj: dict, partition: int, offset: int, size: int) -> Record:
    """Validate one decoded object against its contract. Raises InvalidRecord with a reason."""
    sv = obj.get("schema_version", 1)
    if sv not in SUPPORTED_SCHEMA_VERSIONS or isinstance(sv, bool):
        raise InvalidRecord("unknown_schema_version", repr(sv))
    times: dict[str, int | None] = {}
    for f in contract.fields:
        name = f.name
        if name not in obj:
            if f.kind == Kind.OPT_TIME:
                times[name] = None
                continue
            raise InvalidRecord("missing_field", name)
        v = obj[name]
        k = f.kind
        if k == Kind.STR:
            if not isinstance(v, str) or not v:
                raise InvalidRecord("wrong_type", f"{name} must be a non-empty string, got {v!r}")
        elif k == Kind.INT:
            if not isinstance(v, int) or isinstance(v, bool):
                raise InvalidRecord("wrong_type", f"{name} must be an integer, got {v!r}")
        elif k == Kind.CENTS:
            if not isinstance(v, int) or isinstance(v, bool):
                raise InvalidRecord("non_integer_cents", f"{name}={v!r}")
        elif k == Kind.NUMBER:
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise InvalidRecord("wrong_type", f"{name} must be a number, got {v!r}")
        elif k == Kind.BOOL:
            if not isinstance(v, bool):
                raise InvalidRecord("wrong_type", f"{name} must be a boolean, got {v!r}")
        elif k in (Kind.TIME, Kind.OPT_TIME):
            if v is None and k == Kind.OPT_TIME:
                times[name] = None
                continue
            try:
                times[name] = parse_utc_us(v)
            except TimeFormatError as exc:
                raise InvalidRecord(exc.kind, f"{name}={v!r}") from None
    rev = 1
    if contract.revision_field:
        rev = obj[contract.revision_field]
        if rev < 1:
            raise InvalidRecord("wrong_type", f"{contract.revision_field} must be >= 1, got {rev}")
    event_us = times[contract.event_time_field]
    arrival_us = times[contract.arrival_time_field]
    if event_us - arrival_us > CLOCK_FAULT_US:
        raise InvalidRecord(
            "event_time_after_arrival",
            f"{contract.event_time_field} is {(event_us - arrival_us) / 60e6:.1f} min after "
            f"{contract.arrival_time_field} (limit 5 min): producer clock fault")
    payload = {n: obj[n] for n in _payload_fields(contract) if n in obj}
    pjson, phash = canonical_hash(payload)
    return Record(
        topic=contract.topic, partition=partition, offset=offset,
        id=obj[contract.id_field], revision=rev, key=obj[contract.key_field],
        event_us=event_us, arrival_us=arrival_us, payload=payload,
        payload_hash=phash, size=size, times=times, payload_json=pjson,
    )


PAYMENT = Contract(
    topic="payments",
    fields=(
        FieldSpec("payment_id", Kind.STR, "globally unique event ID"),
        FieldSpec("revision", Kind.INT, "1 for the original, higher for corrections"),
        FieldSpec("merchant_id", Kind.STR),
        FieldSpec("account_id", Kind.STR),
        FieldSpec("amount_cents", Kind.CENTS, "integer minor units"),
        FieldSpec("event_time", Kind.TIME, "when the payment happened (UTC, zone required)"),
        FieldSpec("arrival_time", Kind.TIME, "when the record reached the log"),
    ),
    id_field="payment_id", key_field="merchant_id",
    event_time_field="event_time", arrival_time_field="arrival_time",
    non_payload=("arrival_time",),
    description="Payments; shared by the interval join (keyed by merchant) and the ledger.",
)

RISK_SIGNAL = Contract(
    topic="risk_signals",
    fields=(
        FieldSpec("signal_id", Kind.STR, "globally unique signal ID"),
        FieldSpec("revision", Kind.INT),
        FieldSpec("merchant_id", Kind.STR),
        FieldSpec("score", Kind.NUMBER, "risk score"),
        FieldSpec("event_time", Kind.TIME),
        FieldSpec("arrival_time", Kind.TIME),
    ),
    id_field="signal_id", key_field="merchant_id",
    event_time_field="event_time", arrival_time_field="arrival_time",
    non_payload=("arrival_time",),
    description="Risk signals keyed by merchant.",
)

CONTRACTS: dict[str, Contract] = {c.topic: c for c in (PAYMENT, RISK_SIGNAL)}


def register(contract: Contract) -> Contract:
    """Register a topic contract (pipelines add theirs: merchant_categories, receipts)."""
    CONTRACTS[contract.topic] = contract
    return contract
