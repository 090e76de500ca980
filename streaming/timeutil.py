"""Event-time helpers. All times inside the worker are integer microseconds since the epoch (UTC).

Integers keep the hot loop cheap and make comparisons exact; ISO-8601 strings are used only at
the edges (contracts in, facts out)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final, overload

from . import native

US_PER_S: Final = 1_000_000
US_PER_MIN: Final = 60 * US_PER_S
US_PER_HOUR: Final = 60 * US_PER_MIN
US_PER_DAY: Final = 24 * US_PER_HOUR

# Sentinels for "no watermark yet" and "end of stream"; far outside any real event time.
NEG_INF: Final = -(2**62)
POS_INF: Final = 2**62
# The largest finite time: `us > LAST_FINITE` is `us >= POS_INF`, but compiled it compares
# machine integers, where POS_INF (one past the compiled int's machine range) is an object
# and each comparison with it takes the slow generic path (about 300 instructions a payment
# in the ledger's category lookup: callgrind, docs/performance.md, fiftieth round).
LAST_FINITE: Final = (1 << 62) - 1

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class TimeFormatError(ValueError):
    """A time value that is not a timezone-aware ISO-8601 string."""

    def __init__(self, kind: str, value: object):
        super().__init__(f"{kind}: {value!r}")
        self.kind = kind  # "naive_time" | "unparseable_time"


def parse_utc_us(value: object) -> int:
    """Parse a timezone-aware ISO-8601 string into UTC microseconds.

    A naive time is rejected: guessing the zone of a payment is how ledgers drift by an hour.

    Hot path (every source line's arrival time): the canonical spelling
    `YYYY-MM-DDTHH:MM:SS[.ffffff]Z` is read from its day, by a per-day cache that only the full
    parser fills (so a day is known only once the full parser accepted it), and its time of day,
    read digit by digit from its bytes (`_time_of_day_us`); any other spelling, and every cache
    miss, goes through the full parser (`_parse_full`), which gives the same value and the same
    errors."""
    if type(value) is str and value.isascii():
        day = _DAY_US.get(value[:11])  # "YYYY-MM-DDT", a day the full parser accepted
        if day is not None:
            tod = _time_of_day_us(value.encode())
            if tod >= 0:
                return day + tod
    return _parse_full(value)


def _time_of_day_us(b: bytes) -> int:
    """The µs of `HH:MM:SS[.ffffff]Z` at position 11 of a canonical UTC spelling's ASCII bytes,
    or -1 when the rest of the string is spelled any other way (or names no time of day: a
    leap second is the full parser's to refuse). Read as byte values, not slices looked up in
    tables: compiled, each is a C read instead of a new string and a dict lookup, which took
    a quarter of the file log's own reading (docs/performance.md, twenty-first round)."""
    n = len(b)
    if n == 20:
        pass
    elif n != 27 or b[19] != 46:  # "."
        return -1
    if b[13] != 58 or b[16] != 58 or b[n - 1] != 90:  # ":" ":" "Z"
        return -1
    h1 = b[11] - 48
    h2 = b[12] - 48
    m1 = b[14] - 48
    m2 = b[15] - 48
    s1 = b[17] - 48
    s2 = b[18] - 48
    if not (0 <= h1 <= 2 and 0 <= h2 <= 9 and 0 <= m1 <= 5 and 0 <= m2 <= 9
            and 0 <= s1 <= 5 and 0 <= s2 <= 9):
        return -1
    hours = h1 * 10 + h2
    if hours > 23:
        return -1
    # Every factor below 2**30: the compiled multiplications stay on machine integers.
    us = ((hours * 60 + m1 * 10 + m2) * 60 + s1 * 10 + s2) * US_PER_S
    if n == 27:
        frac = 0
        for i in range(20, 26):
            d = b[i] - 48
            if not 0 <= d <= 9:
                return -1
            frac = frac * 10 + d
        us += frac
    return us


def _parse_full(value: object) -> int:
    """The full parser behind `parse_utc_us`; it also learns the day of a canonical string."""
    if not isinstance(value, str):
        raise TimeFormatError("unparseable_time", value)
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise TimeFormatError("unparseable_time", value) from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise TimeFormatError("naive_time", value)
    delta = dt - _EPOCH
    us = (delta.days * 86400 + delta.seconds) * US_PER_S + delta.microseconds
    if len(_DAY_US) < _DAY_US_MAX and _CANONICAL_UTC.fullmatch(value):
        # The full parser accepted this canonical spelling: its day is valid and its UTC
        # midnight is the value less the time of day.
        _DAY_US[value[:11]] = us - (delta.seconds * US_PER_S + delta.microseconds)
    return us


# The canonical UTC spelling the fast path reads (ASCII digits only: `\d` would take others).
_CANONICAL_UTC: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
                            r"(?:\.[0-9]{6})?Z")
# "YYYY-MM-DDT" -> µs of that day's UTC midnight; bounded like `_DAY_CACHE` (a day is ~80 B).
_DAY_US: Final[dict[str, int]] = {}
_DAY_US_MAX: Final = 100_000


def us_to_dt(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


_DAY_CACHE: Final[dict[int, str]] = {}


@overload
def us_to_iso(us: int) -> str: ...
@overload
def us_to_iso(us: None) -> None: ...
def us_to_iso(us: int | None) -> str | None:
    """Render microseconds as ISO-8601 UTC with a trailing Z (seconds precision when exact).

    Hot path (every fact carries event times). Where the compiled core is in use, the text is
    written by its C twin (`streaming/_texts.c`, one call); otherwise, and for an instant
    outside years 1-9999, here: the date part is cached per day and the time of day is plain
    integer arithmetic."""
    if us is None:
        return None
    if us <= NEG_INF:
        return "-inf"
    if us > LAST_FINITE:  # us >= POS_INF, compared as machine integers
        return "+inf"
    iso_utc = _ISO_UTC
    if iso_utc is not None:
        text = iso_utc(us)
        if text is not None:
            return text
    return _py_us_to_iso(us)


def _py_us_to_iso(us: int) -> str:
    """`us_to_iso` of a finite instant, in Python (the C twin's reference)."""
    # Floor division and remainder, not divmod: compiled, they are integer operations where
    # divmod is a call that builds a tuple (the compiled function ran slower than the
    # interpreted one with it). The remainder, not `us - day * US_PER_DAY`: a product with a
    # factor past 2**30 leaves the compiled int's machine arithmetic for a Python int.
    day = us // US_PER_DAY
    rem = us % US_PER_DAY
    date = _DAY_CACHE.get(day)
    if date is None:
        # isoformat, not strftime("%Y"): the C library writes years before 1000 without the
        # leading zeros, and the contracts' decoder (and RFC 3339) spell them with four digits.
        date = (_EPOCH + timedelta(days=day)).date().isoformat()
        if len(_DAY_CACHE) < 100_000:
            _DAY_CACHE[day] = date
    secs = rem // US_PER_S
    micros = rem - secs * US_PER_S
    minute = secs // 60
    # Table lookups, not format specs: `:02d` costs a format call per field; the microseconds
    # are their thousands and the rest, three digits each (`str(1_000_000 + micros)[1:]` made
    # a string and a slice of it).
    if micros:
        millis = micros // 1000
        return (f"{date}T{_HHMM[minute]}{_TWO_DIGITS[secs - minute * 60]}."
                f"{_THREE_DIGITS[millis]}{_THREE_DIGITS[micros - millis * 1000]}Z")
    return f"{date}T{_HHMM[minute]}{_TWO_DIGITS[secs - minute * 60]}Z"


# "HH:MM:" by minute of the day, and "SS" by second.
_HHMM: Final = [f"{m // 60:02d}:{m % 60:02d}:" for m in range(24 * 60)]
_TWO_DIGITS: Final = [f"{n:02d}" for n in range(60)]
_THREE_DIGITS: Final = [f"{n:03d}" for n in range(1000)]


# Decided once, when the package's build is (streaming.native.select runs before this import).
_ISO_UTC: Final[Callable[[int], str | None] | None] = native.hand_written("streaming._texts",
                                                                          "iso_utc")


def iso(dt: datetime) -> str:
    return us_to_iso(int((dt - _EPOCH) / timedelta(microseconds=1)))


def event_date(us: int) -> str:
    return (_EPOCH + timedelta(microseconds=us)).strftime("%Y-%m-%d")


def minutes(m: float) -> int:
    return int(m * US_PER_MIN)
