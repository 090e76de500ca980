"""Quarantine reasons of the input contracts, and the mapping from a failed type check to the
reason of its defect. One place, so the fast decoder and the dict validator cannot disagree."""

from __future__ import annotations

import re
from datetime import datetime

from . import bounds as B

MALFORMED_JSON = "malformed_json"
INVALID_UTF8 = "invalid_utf8"
NOT_AN_OBJECT = "not_an_object"
UNKNOWN_SCHEMA_VERSION = "unknown_schema_version"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
NON_INTEGER_CENTS = "non_integer_cents"
NAIVE_TIME = "naive_time"
UNPARSEABLE_TIME = "unparseable_time"
OUT_OF_RANGE = "out_of_range"
BAD_ID = "bad_id"
EVENT_TIME_AFTER_ARRIVAL = "event_time_after_arrival"

CONTRACT_REASONS = (MALFORMED_JSON, INVALID_UTF8, NOT_AN_OBJECT, UNKNOWN_SCHEMA_VERSION,
                    MISSING_FIELD, WRONG_TYPE, NON_INTEGER_CENTS, NAIVE_TIME, UNPARSEABLE_TIME,
                    OUT_OF_RANGE, BAD_ID, EVENT_TIME_AFTER_ARRIVAL)

# A revision below 1 is judged after every field, as a record-level rule (it always was).
REVISION_BELOW_ONE = "revision_below_one"

_BOUND = re.compile(r"^Expected `(int|float)` ([<>]=)")


def reason_for(kind: str, message: str, value: object = None) -> str:
    """The reason for a `value` of a field of `kind` that failed with msgspec's `message`."""
    if kind == B.SCHEMA_VERSION:
        return UNKNOWN_SCHEMA_VERSION
    if message.startswith("Number out of range"):
        return OUT_OF_RANGE
    if kind in (B.REVISION, B.CENTS) and isinstance(value, float) and abs(value) >= 2.0**63:
        # A JSON reader hands an integer literal past 64 bits over as a float: whatever its
        # spelling, a number that large is outside the bounds, not a type slip.
        return OUT_OF_RANGE
    bound = _BOUND.match(message)
    if kind in (B.ID, B.LABEL):
        if "of length <=" in message or "matching regex" in message:
            return BAD_ID
        return WRONG_TYPE  # not a string, or empty
    if kind == B.REVISION:
        if bound:
            return REVISION_BELOW_ONE if bound.group(2) == ">=" else OUT_OF_RANGE
        return WRONG_TYPE
    if kind == B.CENTS:
        return OUT_OF_RANGE if bound else NON_INTEGER_CENTS
    if kind == B.SCORE:
        return OUT_OF_RANGE if bound else WRONG_TYPE
    if kind in (B.TIME, B.OPT_TIME):
        if "timezone component" in message or _zoneless(value):
            return NAIVE_TIME
        return UNPARSEABLE_TIME
    return WRONG_TYPE


def _zoneless(value: object) -> bool:
    """A date or time outside RFC 3339 that still reads as a time without a zone (a bare date,
    `10:00` without seconds): the missing zone is the defect to report."""
    if not isinstance(value, str):
        return False
    try:
        return datetime.fromisoformat(value).tzinfo is None
    except ValueError:
        return False
