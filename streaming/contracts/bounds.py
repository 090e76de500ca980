"""The value types every contract field is built from, with their documented bounds.

Each bound exists because something downstream would otherwise break or lie:

- identifiers and labels: 1..128 characters from a safe ASCII alphabet. Facts compose keys from
  them (``payment|signal|rule``, ``account|hour|revision``, request IDs) into columns of at most
  300-400 characters, and join them with ``|``, ``\\x1f``, ``,`` and ``:``; none of those, no
  whitespace, no control character and no NUL can appear in an ID, so two different ID tuples
  can never compose to the same key, and every ID fits the store's ``varchar(200)`` columns;
- revisions: 1..2^31-1, the range of the store's INTEGER revision columns (PostgreSQL INTEGER is
  32-bit signed);
- amounts: |cents| <= 10^12 (ten billion in major units). A sum of one million such amounts
  stays below 2^63, so windows and aggregates cannot overflow 64 bits on realistic volumes;
- scores: a finite number in [0, 1];
- instants: RFC 3339 with an explicit zone (``Z``, ``z`` or ``+hh:mm``/``+hhmm``); a naive time is
  refused rather than guessed; the instant must lie within years 1..9999 in UTC.

The type of each field carries a ``kind`` (in ``Meta.extra``) that maps a failed check to the
quarantine reason of its defect (see ``reasons.py``)."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Annotated, Literal

from msgspec import Meta

# Field kinds: what a failed check of the field means (see reasons.reason_for).
ID = "id"
LABEL = "label"
REVISION = "revision"
CENTS = "cents"
SCORE = "score"
FLAG = "flag"
TIME = "time"
OPT_TIME = "optional_time"
SCHEMA_VERSION = "schema_version"

MAX_ID_LENGTH = 128
# Letters, digits and . _ - ~ + = @ ; deliberately excludes | \x1f , : / whitespace, control
# characters, NUL and anything non-ASCII (key separators and store-hostile bytes).
ID_CHARS = "A-Za-z0-9._~+=@-"
ID_PATTERN = f"^[{ID_CHARS}]*$"

MAX_REVISION = 2**31 - 1
MAX_ABS_CENTS = 10**12
MIN_SCORE, MAX_SCORE = 0.0, 1.0

# Every instant must exist in UTC (a year-1 time with a positive offset does not).
MIN_INSTANT = datetime(1, 1, 1, tzinfo=timezone.utc)
MAX_INSTANT = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)

SUPPORTED_SCHEMA_VERSIONS = (1,)

# What the published schema says about the zone (msgspec checks it in C, see Meta(tz=True)).
_ZONE_PATTERN = "([Zz]|[+-][0-9]{2}:?[0-9]{2})$"

# The alphabet is checked once per record over all its ID fields together (one regex search
# instead of one per field: msgspec's per-field `pattern` costs a Python call each); the schema
# still publishes it as the fields' pattern.
FORBIDDEN_ID_CHAR = re.compile(f"[^{ID_CHARS}]")
Id = Annotated[str, Meta(min_length=1, max_length=MAX_ID_LENGTH,
                         extra_json_schema={"pattern": ID_PATTERN}, extra={"kind": ID})]
Label = Annotated[str, Meta(min_length=1, max_length=MAX_ID_LENGTH,
                            extra_json_schema={"pattern": ID_PATTERN}, extra={"kind": LABEL})]
Revision = Annotated[int, Meta(ge=1, le=MAX_REVISION, extra={"kind": REVISION})]
Cents = Annotated[int, Meta(ge=-MAX_ABS_CENTS, le=MAX_ABS_CENTS, extra={"kind": CENTS})]
Score = Annotated[float, Meta(ge=MIN_SCORE, le=MAX_SCORE, extra={"kind": SCORE})]
Flag = Annotated[bool, Meta(extra={"kind": FLAG})]
_Zoned = Annotated[datetime, Meta(tz=True, extra_json_schema={"pattern": _ZONE_PATTERN})]
Instant = Annotated[_Zoned, Meta(extra={"kind": TIME})]
OptInstant = Annotated[_Zoned | None, Meta(extra={"kind": OPT_TIME})]
SchemaVersion = Annotated[Literal[1], Meta(description="optional; absent means 1",
                                           extra={"kind": SCHEMA_VERSION})]
