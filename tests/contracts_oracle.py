"""The hand-written validation the msgspec contracts replaced, kept as a test oracle only.

It states the old rules per topic (field kinds in documented order, one reason per defect) so
property tests can check the structs give the same verdict and reason, apart from the bounds
added on purpose (out_of_range, bad_id, RFC 3339 time spelling)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from streaming.timeutil import US_PER_MIN, TimeFormatError, parse_utc_us

CLOCK_FAULT_US = 5 * US_PER_MIN
STR, INT, CENTS, NUMBER, BOOL, TIME, OPT_TIME = ("string", "integer", "cents", "number",
                                                "boolean", "time", "optional_time")


@dataclass(frozen=True)
class OldContract:
    topic: str
    fields: tuple[tuple[str, str], ...]
    event_time_field: str
    arrival_time_field: str
    revision_field: str | None = "revision"


OLD = {
    "payments": OldContract("payments", (
        ("payment_id", STR), ("revision", INT), ("merchant_id", STR), ("account_id", STR),
        ("amount_cents", CENTS), ("event_time", TIME), ("arrival_time", TIME)),
        "event_time", "arrival_time"),
    "risk_signals": OldContract("risk_signals", (
        ("signal_id", STR), ("revision", INT), ("merchant_id", STR), ("score", NUMBER),
        ("event_time", TIME), ("arrival_time", TIME)), "event_time", "arrival_time"),
    "merchant_categories": OldContract("merchant_categories", (
        ("version_id", STR), ("merchant_id", STR), ("category", STR), ("high_risk", BOOL),
        ("effective_from", TIME), ("effective_to", OPT_TIME), ("arrival_time", TIME)),
        "arrival_time", "arrival_time", None),
    "receipts": OldContract("receipts", (
        ("receipt_id", STR), ("store_id", STR), ("merchant_id", STR), ("amount_cents", CENTS),
        ("occurred_at", TIME), ("uploaded_at", TIME)), "occurred_at", "uploaded_at", None),
}


def old_verdict(topic: str, line: bytes) -> str | None:
    """None for a valid line, else the old reason code."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return "malformed_json"
    if not isinstance(obj, dict):
        return "not_an_object"
    return old_validate(OLD[topic], obj)


def old_validate(contract: OldContract, obj: dict) -> str | None:
    sv = obj.get("schema_version", 1)
    if sv not in (1,) or isinstance(sv, bool):
        return "unknown_schema_version"
    times: dict[str, int | None] = {}
    for name, k in contract.fields:
        if name not in obj:
            if k == OPT_TIME:
                times[name] = None
                continue
            return "missing_field"
        v = obj[name]
        if k == STR:
            if not isinstance(v, str) or not v:
                return "wrong_type"
        elif k == INT:
            if not isinstance(v, int) or isinstance(v, bool):
                return "wrong_type"
        elif k == CENTS:
            if not isinstance(v, int) or isinstance(v, bool):
                return "non_integer_cents"
        elif k == NUMBER:
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                return "wrong_type"
        elif k == BOOL:
            if not isinstance(v, bool):
                return "wrong_type"
        elif k in (TIME, OPT_TIME):
            if v is None and k == OPT_TIME:
                times[name] = None
                continue
            try:
                times[name] = parse_utc_us(v)
            except TimeFormatError as exc:
                return exc.kind
    if contract.revision_field and obj[contract.revision_field] < 1:
        return "wrong_type"
    if times[contract.event_time_field] - times[contract.arrival_time_field] > CLOCK_FAULT_US:
        return "event_time_after_arrival"
    return None
