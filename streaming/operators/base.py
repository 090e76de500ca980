"""What operators emit, collected per batch by the host and committed in one transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from ..contracts import Record, canonical_hash

# Dispositions of a valid record; with `quarantined` they close the accounting:
# read = accepted + duplicate + stale + quarantined + routed_to_repair
ACCEPTED = "accepted"
DUPLICATE = "duplicate"
STALE = "stale"
ROUTED = "routed_to_repair"
QUARANTINED = "quarantined"
BUCKETS = (ACCEPTED, DUPLICATE, STALE, QUARANTINED, ROUTED)

# Aggregates (window totals, feature sums) are published as signed 64-bit integers, what the
# store, DuckDB and every consumer hold. One that would leave the range is not published: the
# record that would push it out is routed to repair with the reason `aggregate_overflow`.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
AGGREGATE_OVERFLOW = "aggregate_overflow"


def fits_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


@dataclass(slots=True)
class Fact:
    """An immutable output fact. `payload` is the business content the hash is taken over;
    `payload_json` its canonical JSON, the bytes that were hashed and are stored.

    A fact built from its canonical JSON alone (the interval join assembles it from cached
    parts) leaves `payload_dict` empty: the sink stores the text, and the dict is decoded from
    it only when something reads `payload` (a repair, a test). Equality ignores the dict, which
    the text and the hash already determine."""

    fact_key: str
    kind: str
    logical_key: str
    status: str
    payload_dict: dict[str, Any] | None = field(compare=False)
    payload_hash: str
    predecessor_key: str | None = None
    payload_json: str | None = None  # canonical JSON of `payload`, when already computed

    def __post_init__(self) -> None:
        if self.payload_dict is None and self.payload_json is None:
            raise ValueError(f"fact {self.fact_key}: neither a payload nor its JSON")

    @property
    def payload(self) -> dict[str, Any]:
        if self.payload_dict is None:
            self.payload_dict = orjson.loads(cast(str, self.payload_json))
        return self.payload_dict

    @classmethod
    def make(cls, fact_key: str, kind: str, logical_key: str, status: str, payload: dict[str, Any],
             predecessor_key: str | None = None) -> Fact:
        pjson, phash = canonical_hash(payload)
        return cls(fact_key, kind, logical_key, status, payload, phash, predecessor_key, pjson)


@dataclass(slots=True)
class QueueEntry:
    """A record sent to the dated replay queue (or, for the ledger and receipts, to repair)."""

    topic: str
    partition: int
    offset: int
    event_id: str
    revision: int
    key: str
    event_us: int
    reason: str
    watermark_at_arrival: int
    detail: dict[str, Any] = field(default_factory=dict)


def safe_text(text: str) -> str:
    """Text a store column can hold: NUL escaped as `\\x00`."""
    return text.replace("\x00", "\\x00") if "\x00" in text else text


@dataclass(slots=True)
class Quarantined:
    topic: str
    partition: int
    offset: int
    reason: str
    detail: str
    raw: str


class Emit:
    """Per-batch collector handed to operators."""

    __slots__ = ("facts", "dispositions", "queue", "quarantine", "extra")

    def __init__(self) -> None:
        self.facts: list[Fact] = []
        self.dispositions: list[tuple[Record, str]] = []
        self.queue: list[QueueEntry] = []
        self.quarantine: list[Quarantined] = []
        self.extra: dict[str, list[Any]] = {}  # pipeline-specific rows (e.g. repair requests)

    def fact(self, f: Fact) -> None:
        self.facts.append(f)

    def disposition(self, rec: Record, what: str) -> None:
        self.dispositions.append((rec, what))

    def add_extra(self, table: str, row: Any) -> None:
        self.extra.setdefault(table, []).append(row)

    def __len__(self) -> int:
        return len(self.facts) + len(self.dispositions) + len(self.queue) + len(self.quarantine)
