"""Receipt scorer, keyed by merchant, as a pure state machine.

A receipt occurred at t is scored once the receipts watermark reaches t (wm >= t). Its features
read the merchant's receipts with occurred_at in [t - 7 min, t) (state cutoff t, exclusive),
one entry per receipt_id:
  feature_count_7m   number of those receipts
  feature_amount_7m  their amount_cents summed
and the model also reads the receipt's own amount_cents.

Disorder: a receipt below the watermark by at most the tolerance (5 min) is scored live at
once, and the already-scored receipts of its merchant in (t, t + 7 min] that it changes are
rescored (new scoring revision, predecessor link). A receipt further below the watermark is
beyond the allowed delay: it goes to the replay queue as a reconciliation record, is never
scored live, and is kept as history for receipts not scored yet (it did occur before them).

A duplicate upload (same receipt_id, same payload) adds nothing and emits nothing; the same
receipt_id with another payload is quarantined as a conflicting duplicate.

The pinned model (revision + artifact) is part of the snapshot, so a restore scores with it
whatever the registry's pointer says by then."""

from __future__ import annotations

from typing import Any, Final

from bisect import bisect_left
from itertools import accumulate

import orjson

from ..collector import UNTRACK_FLAT
from ..contracts import Record
from ..hashing import digest
from ..models.logistic import LogisticScorer
from ..models.registry import Model
from ..state import Held, TimeQueue, first_at_or_after, first_at_or_after_near
from ..timeutil import LAST_FINITE, NEG_INF, POS_INF, US_PER_HOUR, US_PER_MIN, us_to_iso
from .base import (ACCEPTED, AGGREGATE_OVERFLOW, DUPLICATE, HASH_LATER, INT64_MAX, JSON_FILL,
                   ROUTED, Emit, Fact, QueueEntry, fits_int64, json_recurring,
                   json_scalar)
from .changes import RowChanges, SnapshotParts
from .identity import IdentityIndex, settle

PIPELINE: Final = "receipts"
TOPIC: Final = "receipts"
STATE_SCHEMA: Final = "receipt_scorer/1"
WINDOW_US: Final = 7 * US_PER_MIN  # merchant feature window [t - 7 min, t)
LATENESS_US: Final = 2 * US_PER_MIN  # watermark delay: partition_wm = max occurred_at - 2 min
TOLERANCE_US: Final = 5 * US_PER_MIN  # allowed delay below the watermark, scored live
# How long receipt IDs are remembered for duplicate detection, in occurrence time below the
# watermark. An older re-upload is beyond the allowed delay anyway and reconciliation checks
# it against the archive.
DEDUP_HORIZON_US: Final = 24 * US_PER_HOUR
RETENTION_US: Final = TOLERANCE_US + WINDOW_US  # state below wm - 12 min is no longer read
# An evicted prefix this long is cut from a merchant's lists (see MerchantWindow.dead).
COMPACT_AFTER: Final = 256

KIND: Final = "decision"
# Fields of a decision payload that describe the run, not the decision: excluded from its hash
# so a replay at another batch boundary is a no-op at the sink. It sorts after every business
# field, which lets `decision_fact` append it to the hashed encoding (see there).
RUN_FIELDS: Final = ("watermark",)

# Entry layout (lists, for compact snapshots). Its slots, like every constant here, are Final
# names, one per line: compiled, each is then a constant in the code, where a name bound by
# unpacking (or without Final) is a lookup in the module's dictionary at every use, dozens of
# them per receipt (docs/performance.md, thirty-second round).
T: Final = 0
ID: Final = 1
AMOUNT: Final = 2
STORE: Final = 3
REV: Final = 4
CNT: Final = 5
AMT: Final = 6
MODEL: Final = 7
STATE: Final = 8
SIZE: Final = 9  # the source bytes
# After them: the entry's checkpoint row (`_checkpoint_row`: the fields above, then its
# merchant) as an orjson Fragment of its JSON, or None. A full checkpoint holds every entry of
# the window, and encoding those entries where they lie cost 1.4 us each (4.3 s of a
# 1,000,000-receipt run): they were made over the last twelve minutes of event time, between
# the batch's other objects, and the encoder waits on memory for each of their fields. Encoded
# once when the entry is written, while it is in the cache, a checkpoint copies the bytes
# (docs/performance.md, twentieth round). Whatever writes an entry's fields encodes it again
# (`_encoded`); a pending entry, scored soon, is encoded only then.
ENCODED: Final = SIZE + 1
# And the merchant whose lists hold the entry, its key: a watermark step scores its due
# receipts by ID, and a map from ID to merchant beside `entries` was a store, a lookup and a
# delete per receipt in a table the size of the window (callgrind, fifty-seventh round). The
# checkpoint row ends with it; `ENCODED` itself is never checkpointed.
MERCHANT: Final = ENCODED + 1
# An entry's STATE:
PENDING: Final = 0
SCORED: Final = 1
HISTORY: Final = 2  # a reconciliation record, never scored live
ID_T: Final = 2  # identity row (operators.identity): [revision, payload_hash, occurred_us]


def _encoded(e: list[Any]) -> None:
    """Keep the entry's checkpoint row as JSON beside its fields (ENCODED), after a write to
    them: the fields T .. SIZE, then the merchant.

    Kept as text, a copy the size of the JSON: the bytes orjson returns are kept by the
    allocator in a block the size orjson first reserved, and a window of them held for minutes
    took a 200,000-receipt run from 227 to 425 MiB of resident memory (235 MiB as text).
    Where the compiled core is in use, the text is filled from a template in one C call
    (about 3,100 instructions an entry against 3,900 for orjson's encoding and its decode;
    docs/performance.md, thirty-second round); orjson writes what the C declines (a text past
    plain ASCII) and every entry of a pure run."""
    text: str | None = None
    fill = JSON_FILL
    if fill is not None:
        model = e[MODEL]
        text = fill(_ENTRY_PARTS, _ENTRY_KINDS if model is not None else _ENTRY_KINDS_NO_MODEL,
                    (e[T], e[ID], e[AMOUNT], e[STORE], e[REV], e[CNT], e[AMT],
                     model if model is not None else "null", e[STATE], e[SIZE], e[MERCHANT]))
    if text is None:
        text = orjson.dumps(_row_fields(e)).decode()
    e[ENCODED] = _FRAGMENT(text)


def _row_fields(e: list[Any]) -> list[Any]:
    """The entry's checkpoint row as a list: its fields T .. SIZE, then its merchant."""
    return [*e[:ENCODED], e[MERCHANT]]


def _checkpoint_row(e: list[Any]) -> Any:
    """The entry as a checkpoint holds it: its kept JSON, or (a pending entry) its row's
    fields as they are."""
    encoded = e[ENCODED]
    return encoded if encoded is not None else _row_fields(e)


# Bound once: compiled, `orjson.Fragment` was an attribute lookup on the module for every entry
# encoded (callgrind, fifty-second round).
_FRAGMENT: Final = orjson.Fragment


# A decision's document as a template for `_texts.json_fill`: its members in key order, each
# name with the text before it, and how each value is written (i integer, s text, t instant,
# f float, r JSON already written).
_DECISION_MEMBERS: Final = (
    ("amount_cents", "i"), ("decision", "s"), ("feature_amount_7m", "i"),
    ("feature_count_7m", "i"), ("merchant_id", "s"), ("model_revision", "s"),
    ("occurred_at", "t"), ("origin", "s"), ("reason", "s"), ("receipt_id", "s"),
    ("score", "f"), ("scoring_revision", "i"), ("state_cutoff", "t"), ("status", "s"),
    ("store_id", "s"))
_DECISION_PARTS: Final = (*(("{" if i == 0 else ",") + f'"{name}":'
                            for i, (name, _) in enumerate(_DECISION_MEMBERS)), "}")
_DECISION_KINDS: Final = "".join(kind for _, kind in _DECISION_MEMBERS).encode()
# An entry's checkpoint row (T .. SIZE, then MERCHANT) as a JSON array, for the same C: its
# model is text, or None (not scored yet) written as JSON's null.
_ENTRY_PARTS: Final = ("[", *([","] * (SIZE + 1)), "]")
_ENTRY_KINDS: Final = b"isisiiisiis"
_ENTRY_KINDS_NO_MODEL: Final = b"isisiiiriis"


def decision_key(receipt_id: str, scoring_revision: int) -> str:
    # A first decision's key, nearly every key written, is a concatenation: the formatted
    # revision cost about 350 instructions more (callgrind, fifty-seventh round).
    if scoring_revision == 1:
        return receipt_id + "|1"
    return f"{receipt_id}|{scoring_revision}"


def decision_fact(*, receipt_id: str, merchant_id: str, store_id: str, occurred_us: int,
                  amount_cents: int, scoring_revision: int, scorer: LogisticScorer, count: int,
                  amount_7m: int, watermark_us: int, status: str, origin: str, reason: str,
                  predecessor_revision: int | None = None, hash_now: bool = True,
                  tail: str | None = None) -> Fact:
    """The one builder of decision facts (live scorer, reconciliation, re-pinning), scored by
    a pinned model's `scorer`, whose revision the decision names. Without
    `hash_now` the fact leaves its hash for later (`HASH_LATER`, over its `hash_text`), for
    its batch's facts to be hashed together (`hash_facts`). `tail`, when given, is
    `_watermark_tail(watermark_us)` as the caller kept it; rendered here otherwise."""
    # What the overflow guard keeps out of state, and orjson refused too.
    if not (fits_int64(amount_cents) and fits_int64(amount_7m)):
        raise ValueError(f"decision for {receipt_id}: an amount leaves the 64-bit range")
    score, decision = scorer.score_receipt(count, amount_7m, amount_cents)
    # The canonical document (sorted keys, compact), written member by member in key order
    # rather than built as a dict for orjson to walk: the dict and its encoding were a quarter
    # of a decision's instructions (docs/performance.md, twenty-ninth round). Integers are
    # their decimal digits (the overflow guard keeps every sum in the 64-bit range orjson
    # allows); the texts and the score as canonical JSON spells them; an instant's text needs
    # no escaping. Where the compiled core is in use, one C call fills the template; the
    # f-string below writes what the C declines (a text past plain ASCII or one JSON escapes,
    # a score whose text takes an exponent) and every document of a pure run.
    # tests/test_receipts_fact_encoding.py checks both against a sorted orjson encoding of the
    # dict, on generated decisions.
    revision = scorer.revision
    business: str | None = None
    fill = JSON_FILL
    if fill is not None:
        business = fill(_DECISION_PARTS, _DECISION_KINDS, (
            amount_cents, decision, amount_7m, count, merchant_id, revision, occurred_us,
            origin, reason, receipt_id, score, scoring_revision, occurred_us, status,
            store_id))
    if business is None:
        score_json = json_scalar(score)
        occurred = us_to_iso(occurred_us)
        business = (
            f'{{"amount_cents":{amount_cents},"decision":{json_recurring(decision)},'
            f'"feature_amount_7m":{amount_7m},"feature_count_7m":{count},'
            f'"merchant_id":{json_recurring(merchant_id)},'
            f'"model_revision":{json_recurring(revision)},"occurred_at":"{occurred}",'
            f'"origin":{json_recurring(origin)},"reason":{json_recurring(reason)},'
            f'"receipt_id":{json_scalar(receipt_id)},"score":{score_json},'
            f'"scoring_revision":{scoring_revision},"state_cutoff":"{occurred}",'
            f'"status":{json_recurring(status)},"store_id":{json_recurring(store_id)}}}')
    # One canonical encoding serves both the hash and the stored JSON: the run field sorts
    # last, so the stored document is the hashed one with it appended before the closing brace
    # (the text the sink's own sorted encoding of `payload` would give).
    # The fact carries that text only: its `payload` is decoded from it when something reads
    # it (a repair, a test); the sink stores the text as it is.
    pred = decision_key(receipt_id, predecessor_revision) if predecessor_revision else None
    key = decision_key(receipt_id, scoring_revision)
    stored = business[:-1] + (tail if tail is not None else _watermark_tail(watermark_us))
    if hash_now:
        return Fact(key, KIND, receipt_id, status, None, digest(business), pred, stored)
    return Fact(key, KIND, receipt_id, status, None, HASH_LATER, pred, stored, business)


# The tail as a template for `_texts.json_fill`: the watermark written as an instant.
_TAIL_PARTS: Final = (',"watermark":', "}")


def _watermark_tail(watermark_us: int) -> str:
    """The watermark as the JSON tail `,"watermark":...}`. Where the compiled core is in
    use, a finite one is written by one C call: rendered and encoded it averaged 1,166
    instructions a decision, 934 with the call (callgrind, fifty-first round). The live scorer
    keeps the last one it rendered (`ReceiptScorer._tail`); the other builders of decisions
    (reconciliation, re-pinning) render it per decision, off the live path."""
    fill = JSON_FILL
    text = fill(_TAIL_PARTS, b"t", (watermark_us,)) if fill is not None else None
    if text is None:  # a pure run, or an infinite watermark
        text = f',"watermark":{json_scalar(us_to_iso(watermark_us))}}}'
    return text


def _window_order(e: list[Any]) -> tuple[int, str]:
    return e[T], e[ID]


class MerchantWindow:
    """One merchant's receipts held in state, with what the window lookups read beside them.
    One object per merchant: as seven maps keyed by merchant (entries, times, amounts, totals,
    magnitude, evicted prefix, last lookup), each receipt took about twenty lookups and stores
    in them (callgrind, docs/performance.md, fifty-seventh round). Everything here but
    `entries` is derived, not checkpointed."""

    __slots__ = ("entries", "times", "amounts", "cum", "max_abs", "dead", "near_lo", "near_hi")

    def __init__(self, entries: list[list[Any]]) -> None:
        # The entries, sorted by (t, id); the first `dead` of them are evicted (see `dead`).
        self.entries = entries
        # Their times and amounts, in the same order, so the window lookups bisect plain ints.
        self.times: list[int] = [e[T] for e in entries]
        self.amounts: list[int] = [e[AMOUNT] for e in entries]
        # Running totals of the amounts, a valid prefix of them: cum[j] - cum[i] is the sum of
        # amounts i..j-1 for j < len(cum), so a window sum is two reads however many receipts
        # the window holds (a dense merchant's slice sum grew with the window). cum[0] is an
        # arbitrary base, so evicting a prefix is one cut. An amount inserted before the end
        # cuts the totals after it, and the next read past the cut extends them again in one C
        # pass: a receipt arriving in occurrence order only appends.
        self.cum: list[int] = [0, *accumulate(self.amounts)]
        # A bound on the magnitude of the amounts held (the largest seen since the merchant's
        # entries were last all evicted): the cheap half of the overflow check. -1 when empty.
        largest = -1
        for a in self.amounts:
            magnitude: int = a if a >= 0 else -a
            if magnitude > largest:
                largest = magnitude
        self.max_abs = largest
        # How many entries at the front of the lists are evicted but not yet cut from them.
        # Eviction takes them out of the scorer's `entries`, the held bytes and the counters at
        # once, as a watermark step must; cutting a list's front moves every entry after it,
        # so the four lists are cut once the evicted prefix is COMPACT_AFTER long or half the
        # list. Nothing reads the prefix: every lookup starts at it.
        self.dead = 0
        # The indexes the last feature lookup found (the window's first entry and its end):
        # the next lookup searches outwards from them (any value gives the same answer, see
        # first_at_or_after_near).
        self.near_lo = 0
        self.near_hi = 0

    def live(self) -> list[list[Any]]:
        """The entries held in state (the list less the evicted prefix not yet cut)."""
        dead = self.dead
        return self.entries[dead:] if dead else self.entries

    def totals(self, upto: int) -> list[int]:
        """The running totals, valid at least through index `upto`."""
        cum = self.cum
        if len(cum) <= upto:
            # Replaces the last valid total with itself followed by the ones after it.
            cum[-1:] = accumulate(self.amounts[len(cum) - 1:], initial=cum[-1])
        return cum

    def features(self, t: int) -> tuple[int, int]:
        """(count, amount sum) of the receipts held with occurred_at in [t - 7 min, t)."""
        times = self.times
        lo = first_at_or_after_near(times, t - WINDOW_US, self.dead, self.near_lo)
        hi = first_at_or_after_near(times, t, lo, self.near_hi)
        self.near_lo = lo
        self.near_hi = hi
        cum = self.cum
        if len(cum) <= hi:
            cum = self.totals(hi)
        return hi - lo, cum[hi] - cum[lo]


class ReceiptScorer:
    pipeline = PIPELINE
    state_schema = STATE_SCHEMA
    rule_version = "receipts-v1:window=7m,tolerance=5m,lateness=2m"

    def __init__(self, model: Model | None = None, pin_seq: int = 0,
                 tolerance_us: int = TOLERANCE_US):
        self.model = model
        self.pin_seq = pin_seq
        self._scorer: LogisticScorer | None = None  # see `_pinned_scorer`
        self._scorer_of: Model | None = None
        # Where the host pins a model from when neither the checkpoint nor the store holds one.
        self.model_dir: str | None = None
        self.tolerance = tolerance_us
        self.wm = NEG_INF
        self.windows: dict[str, MerchantWindow] = {}
        self.entries: dict[str, list[Any]] = {}  # receipt_id -> entry (also in its window)
        # The entries written or evicted since the last checkpoint (receipt_id -> entry, or
        # None once evicted), for a delta checkpoint (`snapshot_parts`): written by the code
        # that writes `entries` or an entry's fields, as the identities' changes are. Each
        # holds its entry, so the checkpoint looks nothing up in `entries` (a list of the IDs
        # instead, each looked up there when the checkpoint was taken, cost the run's
        # checkpoints more than its stores saved; docs/performance.md, fifty-eighth round).
        self._entry_changes: dict[str, Any] = {}
        self.held = Held()  # the entries' records and source bytes
        # receipt_id -> [revision, payload_hash, occurred_us] for duplicate detection (receipts
        # carry no revision field: every record is revision 1)
        self.ids = IdentityIndex(time_slot=ID_T, track_changes=True)
        self.pending = TimeQueue()  # (t, id) not yet scored
        # (earliest occurred_us, merchant) per merchant with entries; entries are sorted by
        # time, so what falls below the retention bound is a prefix evicted in one cut. A
        # merchant's row goes stale when its first entry changes (a new row is pushed then).
        self._evict = TimeQueue()
        # The counters by name (`counters`). The two counted per receipt are machine ints
        # beside the map, written into it when the map is read (as the ledger's per-payment
        # count): counted in the map each was a lookup, a generic addition and a store, about
        # 490 instructions (callgrind, docs/performance.md, fifty-first round).
        self._accepted = 0
        self._scored = 0
        self._evicted = 0  # counted per watermark step's eviction, as the two above
        self._counters = {"accepted": 0, "duplicates": 0, "conflicts": 0, "scored": 0,
                          "late_within_tolerance": 0, "beyond_allowed_delay": 0,
                          "rescored_live": 0, "evicted": 0}
        self.peak = {"records": 0, "bytes": 0}
        # The peak's records as a machine int beside it, compared per receipt: read from the
        # map, the comparison was a lookup and the interpreter's generic comparison, about 300
        # instructions (callgrind, fifty-seventh round). The map is written when it rises.
        self._peak_records = 0
        # The watermark tail of the scorer's last decision, and its watermark (`_tail`).
        self._tail_wm = NEG_INF
        self._tail_text: str | None = None

    @property
    def counters(self) -> dict[str, int]:
        """The counters by name, as the metrics and the checkpoint read them."""
        counters = self._counters
        counters["accepted"] = self._accepted
        counters["scored"] = self._scored
        counters["evicted"] = self._evicted
        return counters

    # ------------------------------------------------------------------ pinning
    @property
    def pinned(self) -> Model:
        """The pinned model; the host pins one before the first record (pipelines/receipts)."""
        if self.model is None:
            raise RuntimeError("the receipt scorer has no pinned model")
        return self.model

    def _pinned_scorer(self) -> LogisticScorer:
        """The pinned model's scorer, kept beside the model it was read from: `model.scorer` is
        a lookup by name on the interpreted `Model`, once a decision otherwise. Whatever sets
        `model` (a pin, a restore), the next decision reads the new model's."""
        model = self.pinned
        scorer = self._scorer
        if scorer is None or model is not self._scorer_of:
            scorer = self._scorer = model.scorer
            self._scorer_of = model
        return scorer

    def pin(self, model: Model, pin_seq: int) -> None:
        self.model = model
        self.pin_seq = pin_seq

    def adopt_decision(self, receipt_id: str, payload: dict[str, Any]) -> bool:
        """Take a decision written outside the live path (reconciliation or re-pinning) as the
        entry's current one, so a later live rescore continues its revision chain."""
        e = self.entries.get(receipt_id)
        if e is None or payload["scoring_revision"] <= e[REV]:
            return False
        e[REV] = payload["scoring_revision"]
        e[CNT] = payload["feature_count_7m"]
        e[AMT] = payload["feature_amount_7m"]
        e[MODEL] = payload["model_revision"]
        _encoded(e)
        self._entry_changes[receipt_id] = e
        return True

    # ------------------------------------------------------------------ records
    def on_record(self, rec: Record, out: Emit) -> None:
        what, known = self.ids.classify(rec)
        if known is not None:
            self._counters["duplicates" if what == DUPLICATE else "conflicts"] += 1
            settle(what, rec, out, f"receipt {rec.id} was uploaded before with other content")
            return
        # Typed Any, so compiled code keeps the record's int object: the entry, the identity
        # row and the queues then share it (an unboxed time is boxed anew at each store).
        t: Any = rec.event_us
        # And as a machine int for the comparisons below: on the object, each was the
        # interpreter's generic comparison (callgrind, fifty-second round).
        t_us: int = t
        # Remembered for the dedup horizon whatever becomes of the receipt.
        self.ids.remember(rec.id, [rec.revision, rec.payload_hash, t])
        self.ids.may_forget(rec.id, t)
        p = rec.payload
        if self._overflows(rec.key, t, p["amount_cents"]):
            # Its merchant's 7-minute sums would leave the 64-bit range: it joins no state and
            # waits in reconciliation (held there with the reason).
            self._counters[AGGREGATE_OVERFLOW] = self._counters.get(AGGREGATE_OVERFLOW, 0) + 1
            out.queue.append(QueueEntry(
                rec.topic, rec.partition, rec.offset, rec.id, rec.revision, rec.key, t,
                AGGREGATE_OVERFLOW, self.wm,
                {"store_id": p["store_id"], "amount_cents": p["amount_cents"],
                 "uploaded_at": us_to_iso(rec.arrival_us)}))
            out.disposition(rec, ROUTED)
            return
        if t_us < self.wm - self.tolerance:
            self._counters["beyond_allowed_delay"] += 1
            out.queue.append(QueueEntry(
                rec.topic, rec.partition, rec.offset, rec.id, rec.revision, rec.key, t,
                "beyond_allowed_delay", self.wm,
                {"store_id": p["store_id"], "amount_cents": p["amount_cents"],
                 "uploaded_at": us_to_iso(rec.arrival_us),
                 "below_watermark_us": self.wm - t, "tolerance_us": self.tolerance}))
            out.disposition(rec, ROUTED)
            if t_us >= self.wm - RETENTION_US:
                self._insert(rec, HISTORY, t)
            return
        out.disposition(rec, ACCEPTED)
        self._accepted += 1
        e = self._insert(rec, PENDING, t)
        if t_us <= self.wm:
            if t_us < self.wm:
                self._counters["late_within_tolerance"] += 1
                self._score(e, rec.key, out)
                self._rescore_after(rec.key, t, rec.id, out)
            else:
                self._score(e, rec.key, out)
        else:
            self.pending.push(t, rec.id)
        self._track_peak()

    def _insert(self, rec: Record, state: int, t: Any) -> list[Any]:
        """`t`: the receipt's occurrence time, the one int object `on_record` made of it (the
        entry, the lists and the queues share it; read from the record here, it was boxed
        anew)."""
        t_us: int = t  # compared as a machine int (see on_record)
        rid, amount = rec.id, rec.payload["amount_cents"]
        # The entry and the lists hold the payload's int object (`amount`); the sums and the
        # magnitude are taken on it as a machine int (`cents`): on the object, each was the
        # interpreter's generic arithmetic (callgrind, fifty-first round).
        cents: int = amount
        e = [t, rid, amount, rec.payload["store_id"], 0, 0, 0, None, state, rec.size, None,
             rec.key]
        if state != PENDING:
            _encoded(e)
        # Out of the cyclic collector's sight: the entry lives for the merchant's window
        # (streaming.collector).
        untrack = UNTRACK_FLAT
        if untrack is not None:
            untrack(e)
        w = self.windows.get(rec.key)
        if w is None:
            w = self.windows[rec.key] = MerchantWindow([])
        lst, times = w.entries, w.times
        dead = w.dead
        if not times or times[-1] < t_us:  # in occurrence order, the common case: no search
            i = len(times)
        else:
            # After every entry <= (t, id): equal times are rare, so they are walked. A receipt
            # out of order is mostly a little out of order: searched from the end.
            i = first_at_or_after_near(times, t, dead, len(times))
            while i < len(times) and times[i] == t and lst[i][ID] <= rid:
                i += 1
        amounts, cum = w.amounts, w.cum
        if i == len(times):
            lst.append(e)
            times.append(t)
            amounts.append(amount)
            if len(cum) == i + 1:
                cum.append(cum[i] + cents)
        else:
            lst.insert(i, e)
            times.insert(i, t)
            amounts.insert(i, amount)
            del cum[i + 1:]
        magnitude = cents if cents >= 0 else -cents
        if magnitude > w.max_abs:
            w.max_abs = magnitude
        self.entries[rid] = e
        self._entry_changes[rid] = e
        self.held.hold(rec.size)
        if i == dead:
            self._evict.push(t, rec.key)
        return e

    def _overflows(self, merchant: str, t: int, amount: int) -> bool:
        """Would a receipt at t push a feature sum out of the 64-bit range: its own window
        [t - 7 min, t), or the window of a receipt in (t, t + 7 min] that it would join?"""
        if not fits_int64(amount):
            return True
        w = self.windows.get(merchant)
        if w is None:
            return False
        times = w.times
        # Every sum checked below adds some of the merchant's held amounts and perhaps
        # `amount`: when even all of them at the merchant's largest magnitude fit, none can
        # leave the range. The bound is tried over every held entry first (no search), then
        # over the entries near t; the exact walk (Python, per later receipt) runs only when
        # both fail.
        dead = w.dead
        largest = w.max_abs
        # Not abs(): compiled, that is the interpreter's generic call on a boxed int.
        magnitude = amount if amount >= 0 else -amount
        if (len(times) - dead) * largest + magnitude <= INT64_MAX:
            return False
        lo = bisect_left(times, t - WINDOW_US, dead)
        end = bisect_left(times, t + WINDOW_US + 1, lo)
        if lo == end:
            return False
        if (end - lo) * largest + magnitude <= INT64_MAX:
            return False
        cum = w.totals(end)
        if not fits_int64(cum[bisect_left(times, t, lo, end)] - cum[lo]):
            return True
        for i in range(bisect_left(times, t + 1, lo, end), end):
            start = bisect_left(times, times[i] - WINDOW_US, lo, end)
            if not fits_int64(cum[i] - cum[start] + amount):
                return True
        return False

    def _tail(self) -> str:
        """The watermark tail of a decision made now. A watermark step's decisions share it and
        the live path's watermark only rises, so the scorer keeps the last one it rendered: two
        machine integers compared, where a bounded store of tails by watermark took a boxed
        integer's hash and a dictionary lookup, about 700 instructions a decision (callgrind,
        docs/performance.md, fifty-seventh round). Kept by the scorer, not the module: one
        scorer is driven by one thread, and its two fields are never read half-written."""
        text = self._tail_text
        if text is None or self._tail_wm != self.wm:
            text = self._tail_text = _watermark_tail(self.wm)
            self._tail_wm = self.wm
        return text

    def _score(self, e: list[Any], merchant: str, out: Emit) -> None:
        scorer = self._pinned_scorer()
        cnt, amt = self.windows[merchant].features(e[T])
        e[REV], e[CNT], e[AMT], e[MODEL], e[STATE] = 1, cnt, amt, scorer.revision, SCORED
        _encoded(e)
        self._entry_changes[e[ID]] = e
        self._scored += 1
        out.fact(decision_fact(
            receipt_id=e[ID], merchant_id=merchant, store_id=e[STORE], occurred_us=e[T],
            amount_cents=e[AMOUNT], scoring_revision=1, scorer=scorer, count=cnt,
            amount_7m=amt, watermark_us=self.wm, status="live", origin="live",
            reason="watermark_passed_occurrence", hash_now=False, tail=self._tail()))
        # The decision's hash is left for later: its batch's facts are hashed together when
        # the batch's rows are made (`store.ops.fact_rows`), several side by side. One at a
        # time the hashes were 14% of the scorer's instructions; a watermark step's decisions
        # together (a few each) still 10% (callgrind, fifty-first round).

    def _rescore_after(self, merchant: str, t: int, cause: str, out: Emit) -> None:
        """Rescore scored receipts in (t, t + 7 min] whose features the receipt at t changed."""
        scorer = self._pinned_scorer()
        w = self.windows.get(merchant)
        if w is None:
            return
        lst = w.entries
        i = first_at_or_after(w.times, t + 1, w.dead)
        while i < len(lst) and lst[i][T] <= t + WINDOW_US:
            e = lst[i]
            i += 1
            if e[STATE] != SCORED:
                continue
            cnt, amt = w.features(e[T])
            if (cnt, amt, scorer.revision) == (e[CNT], e[AMT], e[MODEL]):
                continue
            prev = e[REV]
            e[REV], e[CNT], e[AMT], e[MODEL] = prev + 1, cnt, amt, scorer.revision
            _encoded(e)
            self._entry_changes[e[ID]] = e
            self._counters["rescored_live"] += 1
            out.fact(decision_fact(
                receipt_id=e[ID], merchant_id=merchant, store_id=e[STORE], occurred_us=e[T],
                amount_cents=e[AMOUNT], scoring_revision=prev + 1, scorer=scorer,
                count=cnt, amount_7m=amt, watermark_us=self.wm, status="rescored",
                origin="live", reason=f"late_within_tolerance:{cause}",
                predecessor_revision=prev, hash_now=False,  # with its batch, as `_score`'s
                tail=self._tail()))

    # ------------------------------------------------------------------ time
    def on_watermark(self, topic: str, wm: int, out: Emit) -> None:
        if wm <= self.wm:
            return
        self.wm = wm
        pending = self.pending
        due = wm + 1  # every receipt at or before the watermark
        rids: list[str] = []
        while pending.has_before(due):
            rids.clear()
            pending.take_time(rids)
            for rid in rids:
                e = self.entries[rid]
                self._score(e, e[MERCHANT], out)
        self._evict_below(wm - RETENTION_US if wm <= LAST_FINITE else POS_INF)

    def _evict_below(self, bound: int) -> None:
        queue, windows = self._evict, self.windows
        entries, held, changes = self.entries, self.held, self._entry_changes
        merchants: list[str] = []
        while queue.has_before(bound):
            merchants.clear()
            t = queue.take_time(merchants)
            for merchant in merchants:
                w = windows.get(merchant)
                if w is None:
                    continue  # stale: the merchant's entries were all evicted since
                times = w.times
                dead = w.dead
                if not times or times[dead] != t:
                    continue  # stale: the merchant's first entry changed and has its own row
                # A watermark step evicts a few entries: searched from the first one kept.
                k = first_at_or_after_near(times, bound, dead, dead)
                lst = w.entries
                for e in lst[dead:k]:
                    rid = e[ID]
                    del entries[rid]
                    changes[rid] = None
                    held.release(e[SIZE])
                self._evicted += k - dead
                if k == len(lst):
                    del windows[merchant]
                    continue
                if k >= COMPACT_AFTER or 2 * k >= len(lst):
                    del lst[:k], times[:k], w.amounts[:k]
                    cum = w.cum
                    if len(cum) > k:
                        del cum[:k]
                    else:  # no valid total at the new first entry: start again from 0
                        cum[:] = [0]
                    # The indexes of the last lookup move with the cut.
                    w.near_lo -= k
                    w.near_hi -= k
                    k = 0
                w.dead = k
                queue.push(times[k], merchant)
        self.ids.evict_before(bound - DEDUP_HORIZON_US if bound <= LAST_FINITE else NEG_INF)

    def live_entries(self, merchant: str) -> list[list[Any]]:
        """The merchant's entries held in state (its list less the evicted prefix not yet cut),
        sorted by (occurred_us, receipt_id)."""
        w = self.windows.get(merchant)
        return w.live() if w is not None else []

    clocked = False  # nothing here is decided by a clock: the host need not call on_clock

    def on_clock(self, clock_us: int, out: Emit) -> None:
        return None

    def on_end_of_stream(self, out: Emit) -> None:
        self.on_watermark(TOPIC, POS_INF, out)

    # ------------------------------------------------------------------ state
    def snapshot(self) -> dict[str, Any]:
        return self.snapshot_parts().full()

    def snapshot_parts(self) -> SnapshotParts:
        """The snapshot split for a delta checkpoint: the identities of the dedup horizon (most
        of the state) as those remembered or forgotten since the last checkpoint, and the
        entries of the merchants' windows as those written or evicted since then.

        The entries are keyed by receipt ID, each row its fields and its merchant
        (`_checkpoint_row`). Checkpointed as each merchant's list of entries, the windows'
        twelve minutes of receipts were written whole at every checkpoint: at 1,000,000
        receipts about 156,000 entries, 14 MB of each delta's 19, walked where they lie in
        memory (docs/performance.md, fifty-eighth round).

        The receipts pending a score are not listed apart: they are the entries whose state
        is PENDING (`restore` queues them again). Listed, about 23,000 of them were sorted and
        copied at every checkpoint (fifty-eighth round)."""
        whole = {
            "model": {"revision": self.model.revision, "artifact": self.model.artifact,
                      "pin_seq": self.pin_seq} if self.model else None,
            "tolerance_us": self.tolerance, "wm": self.wm,
            "counters": self.counters, "peak": self.peak,
        }
        assert self.ids.changed is not None  # tracked since __init__ and restore
        # The identity rows as the index holds them: re-encoding each row without its
        # revision (always 1) cost a full checkpoint 1.5 s per 1,000,000 rows for 3% fewer
        # bytes (docs/performance.md, tenth round).
        return SnapshotParts(whole, rows={
            "ids": RowChanges(self.ids.rows, self.ids.changed, holds_rows=True),
            "entries": RowChanges(self.entries, self._entry_changes, encode=_checkpoint_row,
                                  holds_rows=True)})

    def restore(self, snap: dict[str, Any]) -> None:
        m = snap["model"]
        if m is not None:
            self.model = Model.from_artifact(m["artifact"], expect_revision=m["revision"])
            self.pin_seq = m["pin_seq"]
        self.tolerance = snap["tolerance_us"]
        self.wm = snap["wm"]
        untrack = UNTRACK_FLAT
        self.windows = {}
        self.entries = {}
        self._entry_changes = {}
        self.held = Held()
        by_merchant: dict[str, list[list[Any]]] = {}
        if "entries" in snap:
            for rid, row in snap["entries"].items():
                e = [*row[:ENCODED], None, row[ENCODED]]
                self.entries[rid] = e
                by_merchant.setdefault(e[MERCHANT], []).append(e)
        else:
            # The layout before the fifty-eighth round: each merchant's entries, in window
            # order, without their merchant. Entries checkpointed before they carried their
            # source bytes count none.
            for k, v in snap["merchants"].items():
                lst = by_merchant[k] = [[*e, 0, None, k] if len(e) == SIZE else [*e, None, k]
                                        for e in v]
                for e in lst:
                    self.entries[e[ID]] = e
        for k, lst in by_merchant.items():
            lst.sort(key=_window_order)  # a window's order (`_insert`)
            for e in lst:
                _encoded(e)  # again, while it is fresh in memory (see ENCODED)
                if untrack is not None:
                    untrack(e)
                self.held.hold(e[SIZE])
            self.windows[k] = MerchantWindow(lst)
        self._evict = TimeQueue((w.entries[0][T], merchant)
                                for merchant, w in self.windows.items() if w.entries)
        self.ids = IdentityIndex(time_slot=ID_T, track_changes=True)
        # Rows are [revision, payload_hash, occurred_us]; checkpoints written before the
        # tenth round hold [payload_hash, occurred_us] (a delta chain may mix the two).
        ids = {k: row if len(row) == 3 else [1, *row] for k, row in snap["ids"].items()}
        self.ids.load(ids, [(row[ID_T], k) for k, row in ids.items()])
        if "pending" in snap:  # checkpoints before the fifty-eighth round list them
            self.pending = TimeQueue((t, rid) for t, rid in snap["pending"])
        else:
            self.pending = TimeQueue((e[T], rid) for rid, e in self.entries.items()
                                     if e[STATE] == PENDING)
        self._counters = dict(snap["counters"])
        self._accepted = self._counters["accepted"]
        self._scored = self._counters["scored"]
        self._evicted = self._counters["evicted"]
        self.peak = dict(snap["peak"])
        self._peak_records = self.peak["records"]

    def _track_peak(self) -> None:
        held = self.held
        records = held.records
        if records > self._peak_records:
            self._peak_records = records
            self.peak["records"] = records
            self.peak["bytes"] = held.bytes

    def state_metrics(self) -> dict[str, Any]:
        return {"state_records": len(self.entries), "state_bytes": self.held.bytes,
                "pending": len(self.pending), "dedup_ids": len(self.ids),
                "merchants": len(self.windows), "watermark": us_to_iso(self.wm),
                "model_revision": self.model.revision if self.model else None,
                "peak": dict(self.peak), **self.counters}
