"""What operators emit, collected per batch by the host and committed in one transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, cast

import orjson

from .. import native
from ..contracts import Record, canonical_hash
from ..hashing import digest, digests

# Dispositions of a valid record; with `quarantined` they close the accounting:
# read = accepted + duplicate + stale + quarantined + routed_to_repair
ACCEPTED: Final = "accepted"
DUPLICATE: Final = "duplicate"
STALE: Final = "stale"
ROUTED: Final = "routed_to_repair"
QUARANTINED: Final = "quarantined"
BUCKETS: Final = (ACCEPTED, DUPLICATE, STALE, QUARANTINED, ROUTED)

# Aggregates (window totals, feature sums) are published as signed 64-bit integers, what the
# store, DuckDB and every consumer hold. One that would leave the range is not published: the
# record that would push it out is routed to repair with the reason `aggregate_overflow`.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
AGGREGATE_OVERFLOW: Final = "aggregate_overflow"


# The largest magnitude the compiled int holds as a machine integer (63-bit tagged); the 64-bit
# bounds lie past it, so comparing with them goes through int objects.
_MACHINE_INT: Final = (1 << 62) - 1


def fits_int64(value: int) -> bool:
    # Compiled, a value within the machine range is decided by machine comparisons (nearly
    # every one); only past it are the 64-bit bounds compared as objects.
    if -_MACHINE_INT <= value <= _MACHINE_INT:
        return True
    return INT64_MIN <= value <= INT64_MAX


def json_scalar(value: object) -> str:
    """A scalar as canonical JSON writes it, inside an object as anywhere else: the pieces
    operators join into a fact's JSON text instead of building a dict for it.

    Where the compiled core is in use, a text that needs no escape (IDs, instants: nearly
    every one) is put in quotes by its C (`streaming/_texts.c`, one call, where orjson's
    encoding and the decode of its bytes were two; docs/performance.md, thirtieth round); any
    other value, and every value in a pure run, goes through orjson."""
    quoted = _JSON_QUOTED
    if quoted is not None and isinstance(value, str):
        text = quoted(value)
        if text is not None:
            return text
    return _DUMPS(value).decode()


# orjson's encoder, bound once: compiled, `orjson.dumps` was an attribute lookup on the module
# at every call (a receipt's score goes through here; callgrind, fifty-second round).
_DUMPS: Final = orjson.dumps


# Decided once, when the package's build is (streaming.native.select runs before this import).
_JSON_QUOTED: Final[Callable[[str], str | None] | None] = native.hand_written(
    "streaming._texts", "json_quoted")

# `_texts.json_fill(parts, kinds, values)` where the compiled core is in use, else None: a
# document's text from a template in one C call (kinds: i integer, s text, t instant, r JSON
# already written), or None when a value is outside its kind, and the caller then writes the
# text itself. The operators that fill templates with it import it from here.
JSON_FILL: Final[Callable[[tuple[str, ...], bytes, tuple[object, ...]], str | None] | None] = (
    native.hand_written("streaming._texts", "json_fill"))
# `_texts.json_fill_texts`, the same for several texts from one template (kind `|` ends each
# text but the last), as a tuple, or None; None where the compiled core is not in use.
JSON_FILL_TEXTS: Final[
    Callable[[tuple[str, ...], bytes, tuple[object, ...]], tuple[str, ...] | None] | None] = (
    native.hand_written("streaming._texts", "json_fill_texts"))


class BoundedTexts:
    """Texts kept by key, at most `limit` of them: past the limit it starts over, which costs
    making texts again, never a wrong one. For texts the hot path would otherwise make per
    record from few distinct keys (JSON spellings of recurring texts, an hour's label)."""

    __slots__ = ("texts", "limit")

    def __init__(self, limit: int) -> None:
        self.texts: dict[Any, str] = {}
        self.limit = limit

    def get(self, key: Any) -> str | None:
        return self.texts.get(key)

    def keep(self, key: Any, text: str) -> str:
        texts = self.texts
        if len(texts) >= self.limit:
            texts.clear()
        texts[key] = text
        return text


# Texts that recur from fact to fact (merchants, stores, categories, a model's revision, the
# words of decisions, statuses, origins and reasons) as JSON, kept rather than encoded again.
_RECURRING: Final = BoundedTexts(4096)  # Final: compiled, a static instead of a module lookup


def json_recurring(value: str) -> str:
    """`json_scalar(value)` for a text that recurs, from a bounded store of them."""
    text = _RECURRING.get(value)
    return text if text is not None else _RECURRING.keep(value, json_scalar(value))


# A fact built with this as its hash takes the hash of its canonical JSON later: when it is
# first read, or together with the rest of its batch (`hash_facts`, which the sink's rows call).
HASH_LATER: Final = ""


@dataclass(slots=True, init=False)
class Fact:
    """An immutable output fact. `payload` is the business content the hash is taken over;
    `payload_json` its canonical JSON, the bytes that were hashed and are stored.

    A fact built from its canonical JSON alone (the interval join assembles it from cached
    parts) leaves `payload_dict` empty: the sink stores the text, and the dict is decoded from
    it only when something reads `payload` (a repair, a test). Such a fact may also leave its
    hash to be taken later (`HASH_LATER`): a batch's facts are then hashed together, several
    at a time, which costs a third of hashing each as it is made (docs/performance.md,
    fortieth round). A receipt decision's hash is taken over its document without the
    watermark its JSON carries (`hash_text`, until the hash is taken). Equality ignores the
    dict and the hash: every fact the operators and `make` build carries its text, which
    determines both."""

    fact_key: str
    kind: str
    logical_key: str
    status: str
    payload_dict: dict[str, Any] | None = field(compare=False)
    hash_taken: str = field(compare=False, repr=False)  # the hash, or HASH_LATER
    predecessor_key: str | None
    payload_json: str | None  # canonical JSON of `payload`, when already computed
    # The text a hash left for later is taken over, where it is not `payload_json` (a receipt
    # decision stores its hashed document with the run's watermark appended); None once taken.
    hash_text: str | None = field(compare=False, repr=False)

    # Written out rather than generated by `dataclass`: compiled, the generated one ran as
    # interpreted code for every fact (an argument tuple, then each field set through its
    # descriptor); this one is compiled with the class (docs/performance.md, fifteenth round).
    def __init__(self, fact_key: str, kind: str, logical_key: str, status: str,
                 payload_dict: dict[str, Any] | None, payload_hash: str,
                 predecessor_key: str | None = None, payload_json: str | None = None,
                 hash_text: str | None = None) -> None:
        if payload_dict is None and payload_json is None:
            raise ValueError(f"fact {fact_key}: neither a payload nor its JSON")
        if payload_hash == HASH_LATER and payload_json is None:
            raise ValueError(f"fact {fact_key}: a hash left for later needs the payload's JSON")
        if hash_text is not None and payload_hash != HASH_LATER:
            raise ValueError(f"fact {fact_key}: a text to hash, but the hash is taken")
        self.fact_key = fact_key
        self.kind = kind
        self.logical_key = logical_key
        self.status = status
        self.payload_dict = payload_dict
        self.hash_taken = payload_hash
        self.predecessor_key = predecessor_key
        self.payload_json = payload_json
        self.hash_text = hash_text

    @property
    def payload_hash(self) -> str:
        """The content hash of the payload (of its canonical JSON)."""
        h = self.hash_taken
        if h == HASH_LATER:
            h = self.hash_taken = digest(self.text_to_hash())
            self.hash_text = None
        return h

    def text_to_hash(self) -> str:
        """The text the fact's hash is taken over: its `hash_text`, else its JSON."""
        text = self.hash_text
        return text if text is not None else cast(str, self.payload_json)

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


def hash_facts(facts: list[Fact]) -> None:
    """Take the hashes every fact of `facts` left for later (`HASH_LATER`), in one call."""
    later = [f for f in facts if f.hash_taken == HASH_LATER]
    if later:
        hashes = digests([f.text_to_hash() for f in later])
        for k in range(len(later)):
            f = later[k]
            f.hash_taken = hashes[k]
            f.hash_text = None


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


# The archive's columns, in the order `archive_row` gives them and the store inserts them
# (store.ops): a tuple per record read, the largest table of a batch after the facts.
ARCHIVE_ROW: Final = ("pipeline", "topic", "partition", "offset", "event_id", "revision", "key",
                      "event_us", "arrival_us", "payload", "payload_hash", "disposition",
                      "batch_seq")
_EVENT_ID_AT: Final = ARCHIVE_ROW.index("event_id")
_DISPOSITION_AT: Final = ARCHIVE_ROW.index("disposition")


def archive_row(pipeline: str, batch_seq: Any, rec: Record, what: str) -> tuple[Any, ...]:
    """The archive row of a record the operator disposed of as `what` (ARCHIVE_ROW order),
    with its canonical payload JSON as the decoder produced it. (`batch_seq` typed Any: the
    batch's one int object goes into each row, where compiled code boxed a new one per row.)"""
    text = rec.payload_json
    return (pipeline, rec.topic, rec.partition, rec.offset, rec.id, rec.revision, rec.key,
            rec.event_us, rec.arrival_us, text if text else canonical_hash(rec.payload)[0],
            rec.payload_hash, what, batch_seq)


class Emit:
    """Per-batch collector handed to operators: the facts, dispositions, queue entries,
    quarantine rows and pipeline rows of the batch committed as `batch_seq` of `pipeline`.

    A disposition is kept as the record's archive row, made when the operator decides it, and
    not as the record: the record is then freed while its objects are still in the caches.
    Kept until the batch was built for the sink, a batch's records (5,000 of them, a few MiB)
    were read again cold to make their rows and freed cold after its commit: 3 to 6 s of the
    worker's CPU in a 1,000,000-payment ledger's run of 35 to 40 s (docs/performance.md,
    twenty-fourth round)."""

    __slots__ = ("facts", "dispositions", "queue", "quarantine", "extra", "pipeline",
                 "batch_seq")

    def __init__(self, pipeline: str = "", batch_seq: int = 0) -> None:
        self.pipeline = pipeline
        # Typed Any: every archive row of the batch holds this one object (`archive_row`).
        self.batch_seq: Any = batch_seq
        self.facts: list[Fact] = []
        self.dispositions: list[tuple[Any, ...]] = []  # archive rows (ARCHIVE_ROW)
        self.queue: list[QueueEntry] = []
        self.quarantine: list[Quarantined] = []
        self.extra: dict[str, list[Any]] = {}  # pipeline-specific rows (e.g. repair requests)

    def fact(self, f: Fact) -> None:
        self.facts.append(f)

    def disposition(self, rec: Record, what: str) -> None:
        self.dispositions.append(archive_row(self.pipeline, self.batch_seq, rec, what))

    def disposed(self) -> list[tuple[str, str]]:
        """(event ID, disposition) of each record disposed of, in order."""
        return [(row[_EVENT_ID_AT], row[_DISPOSITION_AT]) for row in self.dispositions]

    def add_extra(self, table: str, row: Any) -> None:
        self.extra.setdefault(table, []).append(row)

    def __len__(self) -> int:
        return len(self.facts) + len(self.dispositions) + len(self.queue) + len(self.quarantine)
