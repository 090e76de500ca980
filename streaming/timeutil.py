"""Event-time helpers. All times inside the worker are integer microseconds since the epoch (UTC).

Integers keep the hot loop cheap and make comparisons exact; ISO-8601 strings are used only at
the edges (contracts in, facts out)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import overload

US_PER_S = 1_000_000
US_PER_MIN = 60 * US_PER_S
US_PER_HOUR = 60 * US_PER_MIN
US_PER_DAY = 24 * US_PER_HOUR

# Sentinels for "no watermark yet" and "end of stream"; far outside any real event time.
NEG_INF = -(2**62)
POS_INF = 2**62

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class TimeFormatError(ValueError):
    """A time value that is not a timezone-aware ISO-8601 string."""

    def __init__(self, kind: str, value: object):
        super().__init__(f"{kind}: {value!r}")
        self.kind = kind  # "naive_time" | "unparseable_time"


def parse_utc_us(value: object) -> int:
    """Parse a timezone-aware ISO-8601 string into UTC microseconds.

    A naive time is rejected: guessing the zone of a payment is how ledgers drift by an hour."""
    if not isinstance(value, str):
        raise TimeFormatError("unparseable_time", value)
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise TimeFormatError("unparseable_time", value) from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise TimeFormatError("naive_time", value)
    delta = dt - _EPOCH
    return (delta.days * 86400 + delta.seconds) * US_PER_S + delta.microseconds


def us_to_dt(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


_DAY_CACHE: dict[int, str] = {}


@overload
def us_to_iso(us: int) -> str: ...
@overload
def us_to_iso(us: None) -> None: ...
def us_to_iso(us: int | None) -> str | None:
    """Render microseconds as ISO-8601 UTC with a trailing Z (seconds precision when exact).

    Hot path (every fact carries event times): the date part is cached per day and the
    time of day is plain integer arithmetic."""
    if us is None:
        return None
    if us <= NEG_INF:
        return "-inf"
    if us >= POS_INF:
        return "+inf"
    day, rem = divmod(us, US_PER_DAY)
    date = _DAY_CACHE.get(day)
    if date is None:
        date = (_EPOCH + timedelta(days=day)).strftime("%Y-%m-%d")
        if len(_DAY_CACHE) < 100_000:
            _DAY_CACHE[day] = date
    secs, micros = divmod(rem, US_PER_S)
    h, r = divmod(secs, 3600)
    m, sec = divmod(r, 60)
    if micros:
        return f"{date}T{h:02d}:{m:02d}:{sec:02d}.{micros:06d}Z"
    return f"{date}T{h:02d}:{m:02d}:{sec:02d}Z"


def iso(dt: datetime) -> str:
    return us_to_iso(int((dt - _EPOCH) / timedelta(microseconds=1)))


def event_date(us: int) -> str:
    return (_EPOCH + timedelta(microseconds=us)).strftime("%Y-%m-%d")


def minutes(m: float) -> int:
    return int(m * US_PER_MIN)
