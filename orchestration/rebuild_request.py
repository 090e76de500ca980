"""A manual rebuild request (merchant, start, end), checked before anything is built.

One validation for every way in: a `rebuild_interval` run launched from the Dagster UI (checked
by the instance's launch guard when it is submitted, and again by the run's first step) and
`riskstream rebuild`. Every refusal is one line in plain words that names the
field; no refusal reads more than one indexed row of the store, so it comes back at once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import select

from streaming.join_published import PIPELINE, Piece
from streaming.join_rebuild import manual_pieces
from streaming.store import schema as S
from streaming.timeutil import US_PER_DAY, us_to_iso

# A manual rebuild re-reads its whole interval from the archive in one run; longer spans are
# a backfill, which belongs to a sequence of rebuilds.
MAX_SPAN_DAYS = 7
EXAMPLE = "2026-10-06T09:00:00Z"


class RebuildRefused(ValueError):
    """A rebuild request that cannot run; the message is the whole explanation."""

    @property
    def line(self) -> str:
        """What the operator reads: the failed run's reason in the UI, the CLI's error line."""
        return f"rebuild refused: {self}"


@dataclass(frozen=True)
class RebuildRequest:
    merchant: str
    start: str  # normalised ISO-8601 UTC
    end: str
    pieces: tuple[Piece, ...]

    @property
    def dates(self) -> list[str]:
        return sorted({us_to_iso(p.start_us)[:10] for p in self.pieces})

    @property
    def interval(self) -> str:
        return f"{self.start}/{self.end}"


def parse_instant(field: str, value: str) -> int:
    """ISO-8601 with a UTC offset -> microseconds; anything else is refused naming the field."""
    text = (value or "").strip()
    if not text:
        raise RebuildRefused(f"{field} is empty: give an ISO-8601 UTC time such as {EXAMPLE}")
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise RebuildRefused(f"{field} {text!r} is not an ISO-8601 time: write it like "
                             f"{EXAMPLE}") from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise RebuildRefused(f"{field} {text!r} has no time zone: add Z (UTC) or an offset, "
                             f"e.g. {EXAMPLE}")
    dt = dt.astimezone(timezone.utc)
    delta = dt - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def known_merchant(store, merchant: str) -> bool:
    """A merchant the join has read at least one payment of (one indexed row)."""
    a = S.archive.c
    row = store.rows(select(a.key).where(a.pipeline == PIPELINE, a.topic == "payments",
                                         a.key == merchant).limit(1))
    return bool(row)


def validate(store, merchant: str, start: str, end: str) -> RebuildRequest:
    """The checked request, or RebuildRefused with a one-line reason."""
    merchant = (merchant or "").strip()
    if not merchant:
        raise RebuildRefused("merchant is empty: name the merchant whose interval to rebuild")
    lo = parse_instant("start", start)
    hi = parse_instant("end", end)
    if hi <= lo:
        raise RebuildRefused(f"end {us_to_iso(hi)} is not after start {us_to_iso(lo)}: "
                             "the interval must be at least one microsecond long")
    if hi - lo > MAX_SPAN_DAYS * US_PER_DAY:
        raise RebuildRefused(f"the interval spans more than {MAX_SPAN_DAYS} days: rebuild it "
                             f"in pieces of at most {MAX_SPAN_DAYS} days")
    if not known_merchant(store, merchant):
        raise RebuildRefused(f"merchant {merchant!r} is unknown: no payment of it has been "
                             "read by the join")
    start_iso, end_iso = us_to_iso(lo), us_to_iso(hi)
    return RebuildRequest(merchant, start_iso, end_iso,
                          tuple(manual_pieces(merchant, start_iso, end_iso)))
