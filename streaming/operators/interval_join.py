"""Payment x risk-signal interval join, keyed by merchant, as a pure state machine.

A signal at s matches a payment at t when t - 47 min <= s <= t + 8 min (both inclusive).

Horizon rule (per side, using the opposite side's watermark; no lateness is added on top):
  a payment at t is retained while risk_wm    <= t + 8 min
  a signal  at s is retained while payment_wm <= s + 47 min
A payment's outcome becomes final when it is evicted. Nothing is evicted by a wall clock; the
opt-in too-short TTL evicts by source-time age only to demonstrate the match it loses.

Late events (event time below their own input's watermark) join live only with proof that no
counterpart was evicted, queued or covered by a published generation; otherwise they go to the
dated replay queue. Higher revisions apply live only when every counterpart of the old and the
new version is still in state and the key is unchanged; otherwise the whole correction is queued.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple
import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable

from .. import native
from ..contracts import Record
from ..hashing import digest
from ..keys import compose, escape, key_part
from ..state import HeldEntry, KeyedSide, TimeIndex, TimeQueue
from ..timeutil import LAST_FINITE, NEG_INF, POS_INF, US_PER_MIN, us_to_iso
from .base import (ACCEPTED, HASH_LATER, JSON_FILL, JSON_FILL_TEXTS, ROUTED, Emit, Fact,
                   QueueEntry, json_scalar)
from .identity import CORRECTION, LIVE, REV, IdentityIndex, settle

RULE_VERSION: Final = "ij-v1:-47m..+8m"
LOWER_US: Final = 47 * US_PER_MIN  # look-back: signal may precede the payment by up to 47 min
UPPER_US: Final = 8 * US_PER_MIN  # look-ahead: signal may follow the payment by up to 8 min
LATENESS_US: Final = 3 * US_PER_MIN
STATE_SCHEMA: Final = "interval_join/1"
# Deduplication identities of evicted or queued events are kept this long below the watermark.
# A redelivery older than that is no longer recognised as a duplicate: it arrives late, finds
# its counterparts evicted and goes to the replay queue, where the rebuild deduplicates it
# against the archive. Nothing is dropped; memory stays bounded.
IDENTITY_RETENTION_US: Final = 24 * 60 * US_PER_MIN

PAYMENTS: Final = "payments"
SIGNALS: Final = "risk_signals"


def pair_id(rule_version: str, payment_id: str, payment_rev: int, signal_id: str,
            signal_rev: int) -> str:
    return _pair_id_escaped(escape(rule_version), escape(payment_id), payment_rev,
                            escape(signal_id), signal_rev)


def _pair_id_escaped(rule_eid: str, payment_eid: str, payment_rev: int, signal_eid: str,
                     signal_rev: int) -> str:
    # The hashed text is the unambiguous composition of the five parts (see keys.compose).
    raw = f"{rule_eid}|{payment_eid}|{payment_rev}|{signal_eid}|{signal_rev}"
    return digest(raw)


def pair_fact_key(payment_us: int, pid: str, action: str) -> str:
    # Leading with the payment's event time (integer microseconds, no formatting on the hot
    # path) keeps the unique index's inserts time-ordered; `pid` is hex, so no escaping.
    return f"pair|{payment_us}|{pid}|{action}"


def outcome_key_head(payment_us: int, payment_eid: str, payment_rev: int) -> str:
    """The fact key of a payment revision's outcomes less their sequence number, which follows
    it: `outcome|<payment time, µs>|<escaped payment id>|<revision>|<n>`. Leading with the
    payment's event time, as the pair keys do, keeps the unique index's inserts near its right
    edge instead of at a random page per outcome (store revision 0005 rewrote the keys written
    before, `outcome|<payment>|<revision>|<n>`; docs/performance.md, twenty-third round)."""
    return f"outcome|{payment_us}|{payment_eid}|{payment_rev}|"


def pair_logical_key(payment_id: str, signal_id: str, rule_version: str) -> str:
    return compose(payment_id, signal_id, rule_version)


def pair_payload(rule_version: str, pid: str, merchant_id: str, payment_id: str,
                 payment_rev: int, signal_id: str, signal_rev: int, payment_time: str,
                 signal_time: str, amount_cents: int | None, score: float | None
                 ) -> dict[str, Any]:
    """A published pair's business payload: the one definition the live operator and the
    batch rebuild share, so equal pairs hash equally."""
    return {"rule_version": rule_version, "pair_id": pid, "merchant_id": merchant_id,
            "payment_id": payment_id, "payment_rev": payment_rev, "signal_id": signal_id,
            "signal_rev": signal_rev, "payment_time": payment_time, "signal_time": signal_time,
            "amount_cents": amount_cents, "score": score}


def outcome_payload(payment_id: str, payment_rev: int, merchant_id: str, payment_time: str,
                    amount_cents: int | None, status: str, match_count: int,
                    rule_version: str) -> dict[str, Any]:
    """A payment outcome's business payload (live and rebuilt)."""
    return {"payment_id": payment_id, "payment_rev": payment_rev, "merchant_id": merchant_id,
            "payment_time": payment_time, "amount_cents": amount_cents, "status": status,
            "match_count": match_count, "rule_version": rule_version}


# ---------------------------------------------------------------------- facts from parts
# A pair's or an outcome's canonical JSON (sorted keys, compact: what `canonical_hash` hashes)
# is the concatenation of per-field texts, so the parts that depend on one entry alone are
# serialized once per entry and a pair costs one string join and one hash. The dicts above stay
# the definition; the parts are checked against them byte for byte
# (tests/test_interval_join_parts.py).

# The parts are plain classes, not named tuples: compiled, a named tuple was built by its
# interpreted `__new__` (docs/performance.md, fifteenth round).
class PaymentParts:
    __slots__ = ("pair_head", "pair_mid", "pid_head", "fact_key_head", "outcome_head",
                 "outcome_mid", "outcome_key_head")

    def __init__(self, pair_head: str, pair_mid: str, pid_head: str, fact_key_head: str,
                 outcome_head: str, outcome_mid: str, outcome_key_head: str) -> None:
        self.pair_head = pair_head  # `{"amount_cents":..,"merchant_id":..,"pair_id":"`
        self.pair_mid = pair_mid  # `","payment_id":..,"payment_rev":..,"payment_time":..,` +
        #                           `"rule_version":..,` (the pair id comes between the two)
        self.pid_head = pid_head  # `rule|payment|rev|`: the payment's half of the pair id's text
        self.fact_key_head = fact_key_head  # `pair|<payment time>|`
        self.outcome_head = outcome_head  # `{"amount_cents":..,"match_count":` (count follows)
        self.outcome_mid = outcome_mid  # `,"merchant_id":..,...,"rule_version":..,"status":`
        self.outcome_key_head = outcome_key_head  # `outcome_key_head(...)`


class SignalParts:
    __slots__ = ("pair_tail", "pid_tail")

    def __init__(self, pair_tail: str, pid_tail: str) -> None:
        self.pair_tail = pair_tail  # `"score":..,"signal_id":..,"signal_rev":..,"signal_time":..}`
        self.pid_tail = pid_tail  # `signal|rev`: the signal's half of the pair id's hashed text


def payment_parts(rule_json: str, rule_eid: str, payment_eid: str, payment_id: str,
                  payment_rev: int, merchant_id: str, payment_us: int,
                  amount_cents: int | None) -> PaymentParts:
    """`rule_json`: the rule version as JSON text. Members in sorted key order: amount_cents <
    match_count < merchant_id < pair_id < payment_id < payment_rev < payment_time <
    rule_version < score < signal_* < status; each value as canonical JSON writes it (the
    revision, an int, is its decimal digits; the time, `us_to_iso` of `payment_us`).

    Where the compiled core is in use, the seven texts are one `json_fill_texts` call over
    one template: as six `json_fill` calls and an f-string they took 7,857 instructions a
    payment, as one call 7,181; most of it is writing the texts (docs/performance.md,
    fifty-fourth round). What the C declines (a text past plain ASCII or one JSON escapes, an
    instant outside years 1-9999) and every payment of a pure run is written by
    `_written_payment_parts`, the definition the C's output is checked against
    (tests/test_interval_join_parts.py)."""
    fill = JSON_FILL_TEXTS
    if fill is not None:
        # Each integer boxed once for the call, not once per use.
        rev: object = payment_rev
        us: object = payment_us
        amount: object = "null" if amount_cents is None else amount_cents
        texts = fill(_PAYMENT_TEXTS, _PAYMENT_KINDS_NO_AMOUNT if amount_cents is None
                     else _PAYMENT_KINDS, (
                         amount, merchant_id, None,  # pair head
                         payment_id, rev, us, rule_json, None,  # pair mid
                         rule_eid, payment_eid, rev, None,  # pair id's head
                         us, None,  # pair key head
                         amount, None,  # outcome head
                         merchant_id, payment_id, rev, us, rule_json, None,  # outcome mid
                         us, payment_eid, rev))  # outcome key head
        if texts is not None:
            return PaymentParts(texts[0], texts[1], texts[2], texts[3], texts[4], texts[5],
                                texts[6])
    return _written_payment_parts(rule_json, rule_eid, payment_eid, payment_id, payment_rev,
                                  merchant_id, payment_us, amount_cents)


def _written_payment_parts(rule_json: str, rule_eid: str, payment_eid: str, payment_id: str,
                           payment_rev: int, merchant_id: str, payment_us: int,
                           amount_cents: int | None) -> PaymentParts:
    amount = '{"amount_cents":' + json_scalar(amount_cents)
    merchant = '"merchant_id":' + json_scalar(merchant_id)
    body = (f'"payment_id":{json_scalar(payment_id)},"payment_rev":{payment_rev},'
            f'"payment_time":{json_scalar(us_to_iso(payment_us))},"rule_version":{rule_json}')
    return PaymentParts(
        f'{amount},{merchant},"pair_id":"', f'",{body},',
        f"{rule_eid}|{payment_eid}|{payment_rev}|",
        f"pair|{payment_us}|",
        f'{amount},"match_count":', f',{merchant},{body},"status":',
        outcome_key_head(payment_us, payment_eid, payment_rev))


def signal_parts(signal_eid: str, signal_id: str, signal_rev: int, signal_us: int,
                 score: float | None) -> SignalParts:
    """A signal's members of a pair (`score` < `signal_*`), filled by the C as a payment's
    parts are, else written here. A float score is written by the C too (kind `f`), where
    its orjson encoding and decode were about 1,200 instructions a signal (fifty-seventh
    round); a missing one is JSON's null."""
    tail: str | None = None
    fill = JSON_FILL
    if fill is not None:
        if type(score) is float:
            tail = fill(_PAIR_TAIL, b"fsit", (score, signal_id, signal_rev, signal_us))
        else:
            tail = fill(_PAIR_TAIL, b"rsit", (json_scalar(score), signal_id, signal_rev,
                                              signal_us))
    if tail is None:
        score_json = json_scalar(score)
        tail = (f'"score":{score_json},"signal_id":{json_scalar(signal_id)},'
                f'"signal_rev":{signal_rev},"signal_time":{json_scalar(us_to_iso(signal_us))}}}')
    return SignalParts(tail, f"{signal_eid}|{signal_rev}")


# The parts as `json_fill` templates: the texts between the values, in the order above. Typed
# as tuples of any length: a fixed-length one is held unboxed by the compiled core and built
# into a new tuple at every use.
_PAIR_HEAD: Final[tuple[str, ...]] = ('{"amount_cents":', ',"merchant_id":', ',"pair_id":"')
_PAIR_MID: Final[tuple[str, ...]] = ('","payment_id":', ',"payment_rev":', ',"payment_time":',
                                     ',"rule_version":', ',')
_PID_HEAD: Final[tuple[str, ...]] = ("", "|", "|", "|")
_PAIR_KEY_HEAD: Final[tuple[str, ...]] = ("pair|", "|")
_OUTCOME_HEAD: Final[tuple[str, ...]] = ('{"amount_cents":', ',"match_count":')
_OUTCOME_MID: Final[tuple[str, ...]] = (',"merchant_id":', ',"payment_id":', ',"payment_rev":',
                                        ',"payment_time":', ',"rule_version":', ',"status":')
_OUTCOME_KEY_HEAD: Final[tuple[str, ...]] = ("outcome|", "|", "|", "|")
# A payment's seven texts (`PaymentParts`, in its order) as one template for
# `json_fill_texts`: the templates above one after another, each ended by a cut (`|`).
_PAYMENT_TEXTS: Final[tuple[str, ...]] = (
    *_PAIR_HEAD, *_PAIR_MID, *_PID_HEAD, *_PAIR_KEY_HEAD, *_OUTCOME_HEAD, *_OUTCOME_MID,
    *_OUTCOME_KEY_HEAD)
_PAYMENT_KINDS: Final = b"is|sitr|rri|i|i|ssitr|iri"
_PAYMENT_KINDS_NO_AMOUNT: Final = b"rs|sitr|rri|i|r|ssitr|iri"  # the amount as JSON's null
_PAIR_TAIL: Final[tuple[str, ...]] = ('"score":', ',"signal_id":', ',"signal_rev":',
                                      ',"signal_time":', "}")


# `_texts.pair_texts` where the compiled core is in use, else None: a pair's ID, JSON, fact key
# and logical key from the two entries' parts in one C call, or None when a text is past ASCII.
_PAIR_TEXTS: Final[Callable[[str, str, str, str, str, str, str, str, str],
                            tuple[str, str, str, str] | None] | None] = (
    native.hand_written("streaming._texts", "pair_texts"))


def _written_pair_texts(pid_head: str, pid_tail: str, pair_head: str, pair_mid: str,
                        pair_tail: str, key_head: str, payment_eid: str, signal_eid: str,
                        rule_eid: str) -> tuple[str, str, str, str]:
    """A published pair's ID (`pair_id`'s digest of its text, joined from the payment's and the
    signal's halves), its canonical JSON (`pair_payload`'s, the ID between the parts), its fact
    key (`pair_fact_key(..., "publish")`: the head holds the payment's time) and its logical key
    (`pair_logical_key`, of the escaped IDs). What the C (`_texts.pair_texts`) is checked
    against, and what writes a pair whose texts it declines."""
    pid = digest(f"{pid_head}{pid_tail}")
    return (pid, f"{pair_head}{pid}{pair_mid}{pair_tail}", f"{key_head}{pid}|publish",
            f"{payment_eid}|{signal_eid}|{rule_eid}")


# `_texts.outcome_texts` where the compiled core is in use, else None: an outcome's JSON and
# fact key from the payment's parts, its count and its sequence number in one C call, or None
# when a text is past ASCII (or a number past 64 bits).
_OUTCOME_TEXTS: Final[Callable[[str, int, str, str, str, int], tuple[str, str] | None]
                      | None] = native.hand_written("streaming._texts", "outcome_texts")


def _written_outcome_texts(outcome_head: str, count: int, outcome_mid: str, status_tail: str,
                           key_head: str, seq: int) -> tuple[str, str]:
    """An outcome's canonical JSON (`outcome_payload`'s: the match count between the parts,
    then the status) and its fact key (`outcome_key_head`'s head, then the sequence number).
    What the C (`_texts.outcome_texts`) is checked against, and what writes an outcome whose
    texts it declines."""
    return f"{outcome_head}{count}{outcome_mid}{status_tail}", f"{key_head}{seq}"


# An outcome's status is one of three words: its JSON text and the closing brace, once.
_STATUS_TAIL: Final = {status: json_scalar(status) + "}"
                       for status in ("provisional", "retracted", "final")}


class Entry(HeldEntry):
    """A payment or signal held in state. `matches` maps counterpart id -> current pair id;
    `size` (HeldEntry's) is its source line's bytes."""

    __slots__ = ("id", "rev", "t", "key", "seq", "payload", "matches", "outcome",
                 "outcome_seq", "arrival", "eid", "payment_parts", "signal_parts")

    def __init__(self, id: str, rev: int, t: int, key: str, seq: int, size: int,
                 payload: dict[str, Any], arrival: int) -> None:
        self.id = id
        self.rev = rev
        self.t = t
        self.key = key
        self.seq = seq
        self.size = size
        self.payload = payload
        self.arrival = arrival
        self.matches: dict[str, str] = {}
        self.outcome = ""  # last outcome status published (payments only)
        self.outcome_seq = 0
        self.eid = key_part(id)  # the ID as a composite-key part, escaped once per entry
        # The entry's fact parts, made by the operator when the entry first needs them (typed
        # per side, so compiled code reads their fields by position).
        self.payment_parts: PaymentParts | None = None
        self.signal_parts: SignalParts | None = None

    def dump(self) -> list[Any]:
        return [self.id, self.rev, self.t, self.key, self.seq, self.size, self.payload,
                list(self.matches.items()), self.outcome, self.outcome_seq, self.arrival]

    @classmethod
    def load(cls, row: list[Any]) -> Entry:
        e = cls(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[10])
        e.matches = dict((a, b) for a, b in row[7])
        e.outcome = row[8]
        e.outcome_seq = row[9]
        return e


# Identity row fields after [revision, payload_hash] (operators.identity): the version's key,
# its event time and where it is now (live | evicted | queued).
ID_KEY: Final = 2
ID_T: Final = 3
ID_WHERE: Final = 4
EVICTED: Final = "evicted"
QUEUED: Final = "queued"


class IdentityView(NamedTuple):
    """A read-only view of one identity row, for inspection."""

    rev: int
    hash: str
    key: str
    t: int
    where: str


class Side:
    """One input of the join. An own event at t matches a counterpart at c when
    t - lower <= c <= t + upper; the other side's bounds are the mirror. The own entry at t is
    retained while the other input's watermark <= t + upper (the horizon rule), so both sides
    run one code path with their own bounds, as in Flink's IntervalJoinOperator."""

    __slots__ = ("topic", "is_payment", "lower", "upper", "state", "ids", "live",
                 "evicted_max", "dropped_max", "queued", "eviction_order", "wm", "label")

    def __init__(self, topic: str, lower: int, upper: int):
        self.topic = topic
        self.is_payment = topic == PAYMENTS
        self.label = "payment" if self.is_payment else "signal"
        self.lower = lower
        self.upper = upper
        self.state = KeyedSide(topic)
        # Identities become candidates for forgetting as their entries leave state, in about
        # the order they were placed.
        self.ids = IdentityIndex(time_slot=ID_T, where_slot=ID_WHERE, ordered_candidates=True)
        self.live: dict[str, Entry] = {}
        self.evicted_max: dict[str, int] = {}
        # Largest evicted_max of any key whose entry was dropped: a safe bound for missing keys.
        self.dropped_max = NEG_INF
        # Event times of queued records per key: a late event near one must not join live.
        self.queued: dict[str, list[int]] = {}
        # (event time, key) per entry placed: mostly in time order.
        self.eviction_order = TimeQueue(mostly_ordered=True)
        self.wm = NEG_INF  # this input's watermark


class IntervalJoin:
    """The operator. Watermarks come in through `on_watermark`; the host owns the clocks."""

    pipeline = "join"
    state_schema = STATE_SCHEMA

    def __init__(self, lower_us: int = LOWER_US, upper_us: int = UPPER_US,
                 ttl_us: int | None = None, rule_version: str = RULE_VERSION,
                 identity_retention_us: int = IDENTITY_RETENTION_US):
        self.ttl = ttl_us
        self.rule_version = rule_version
        self._rule_eid = escape(rule_version)
        self._rule_json = json_scalar(rule_version)
        self.identity_retention = identity_retention_us
        self._pruned_at = NEG_INF
        self.payments = Side(PAYMENTS, lower_us, upper_us)
        self.signals = Side(SIGNALS, upper_us, lower_us)
        self._other = {PAYMENTS: self.signals, SIGNALS: self.payments}
        self._sides = {PAYMENTS: self.payments, SIGNALS: self.signals}
        # Payment-time intervals per key covered by a published generation (set by the host).
        self.covered: dict[str, list[tuple[int, int]]] = {}
        self.seq = 0
        self._ttl_heap: list[tuple[int, int, str, str]] = []
        # The counters by name (`counters`). Those counted per pair and per eviction step are
        # machine ints beside the map, written into it when the map is read (as the ledger's
        # per-payment count): counted in the map each was a lookup, a generic addition and a
        # store, about 490 instructions a pair (callgrind, docs/performance.md, fifty-first
        # round), about 550 an eviction step (fifty-second).
        self._pairs_published = 0
        self._evicted_payments = 0
        self._evicted_signals = 0
        self._counters = {"late_joined": 0, "late_queued": 0, "corrections_live": 0,
                          "corrections_queued": 0, "evicted_payments": 0, "evicted_signals": 0,
                          "ttl_evictions": 0, "pairs_published": 0, "pairs_retired": 0}
        # The state's peaks (read as `peak`), as typed fields: `_track_peak` compares them on
        # every record, where a dict's were a lookup and an object comparison each.
        self._peak_records = 0
        self._peak_bytes = 0
        self._hot_key: str | None = None
        self._hot_key_records = 0
        self._hot_key_bytes = 0

    @property
    def counters(self) -> dict[str, int]:
        """The counters by name, as the metrics and the checkpoint read them."""
        counters = self._counters
        counters["pairs_published"] = self._pairs_published
        counters["evicted_payments"] = self._evicted_payments
        counters["evicted_signals"] = self._evicted_signals
        return counters

    # ------------------------------------------------------------------ views by input
    # The payment side's bounds are the rule's (-47 min .. +8 min); read-only names for them.
    @property
    def lower(self) -> int:
        return self.payments.lower

    @property
    def upper(self) -> int:
        return self.payments.upper

    @property
    def payment_wm(self) -> int:
        return self.payments.wm

    @property
    def risk_wm(self) -> int:
        return self.signals.wm

    @property
    def pay(self) -> KeyedSide:
        return self.payments.state

    @property
    def sig(self) -> KeyedSide:
        return self.signals.state

    @property
    def pay_live(self) -> dict[str, Entry]:
        return self.payments.live

    @property
    def sig_live(self) -> dict[str, Entry]:
        return self.signals.live

    @property
    def pay_ids(self) -> dict[str, IdentityView]:
        return {k: IdentityView(*v) for k, v in self.payments.ids.rows.items()}

    @property
    def sig_ids(self) -> dict[str, IdentityView]:
        return {k: IdentityView(*v) for k, v in self.signals.ids.rows.items()}

    @property
    def evicted_max_pay(self) -> dict[str, int]:
        return self.payments.evicted_max

    @property
    def evicted_max_sig(self) -> dict[str, int]:
        return self.signals.evicted_max

    def _evicted_max_pay(self, key: str) -> int:
        return self._evicted_max(self.payments, key)

    def own_wm(self, topic: str) -> int:
        return self._sides[topic].wm

    # ------------------------------------------------------------------ proofs
    def _evicted_max(self, side: Side, key: str) -> int:
        v = side.evicted_max.get(key)
        if v is not None:
            return v
        return self._fallback(side)

    def _fallback(self, side: Side) -> int:
        """Upper bound on the evicted times of `side` for a key without an entry: entries below
        (other input's watermark - side.upper) may have been evicted, and no dropped key evicted
        anything later than side.dropped_max. Both bounds are safe; the smaller is used."""
        if self.ttl is not None:  # TTL evicts regardless of watermarks: only the max is safe
            return side.dropped_max
        other_wm = self._other[side.topic].wm
        wm_bound = NEG_INF if other_wm <= NEG_INF else other_wm - side.upper
        return min(wm_bound, side.dropped_max)

    @staticmethod
    def _any_in(times: list[int] | None, lo: int, hi: int) -> bool:
        if not times:
            return False
        i = bisect_left(times, lo)
        return i < len(times) and times[i] <= hi

    def _covered(self, key: str, lo: int, hi: int) -> bool:
        for start, end in self.covered.get(key, ()):
            if start <= hi and lo <= end:
                return True
        return False

    def _blocker(self, side: Side, other: Side, key: str, t: int) -> str | None:
        """Why an event of `side` at t cannot join live now, or None when it provably can."""
        if self._evicted_max(other, key) >= t - side.lower:
            return "counterpart_evicted"
        if self._any_in(other.queued.get(key), t - side.lower, t + side.upper):
            return "counterpart_queued"
        # The payment times this event can affect: its own time for a payment, the window of
        # payments it may match for a signal.
        lo, hi = (t, t) if side.is_payment else (t - side.lower, t + side.upper)
        if self._covered(key, lo, hi):
            return "covered_by_generation"
        return None

    def _queue(self, rec: Record, reason: str, out: Emit,
               detail: dict[str, Any] | None = None) -> None:
        side = self._sides[rec.topic]
        out.queue.append(QueueEntry(rec.topic, rec.partition, rec.offset, rec.id, rec.revision,
                                    rec.key, rec.event_us, reason, side.wm, detail or {}))
        out.disposition(rec, ROUTED)
        side.ids.may_forget(rec.id, rec.event_us)
        insort(side.queued.setdefault(rec.key, []), rec.event_us)
        if detail and "old_event_us" in detail:
            insort(side.queued.setdefault(rec.key, []), detail["old_event_us"])

    def _new_entry(self, rec: Record) -> Entry:
        self.seq += 1
        return Entry(rec.id, rec.revision, rec.event_us, rec.key, self.seq, rec.size,
                     rec.payload, rec.arrival_us)

    # ------------------------------------------------------------------ facts
    def _payment_parts(self, p: Entry) -> PaymentParts:
        parts = p.payment_parts = payment_parts(self._rule_json, self._rule_eid, p.eid, p.id,
                                                p.rev, p.key, p.t,
                                                p.payload.get("amount_cents"))
        return parts

    def _signal_parts(self, s: Entry) -> SignalParts:
        parts = s.signal_parts = signal_parts(s.eid, s.id, s.rev, s.t, s.payload.get("score"))
        return parts

    def _publish(self, p: Entry, s: Entry, out: Emit) -> str:
        # The fact of pair_payload(...) under pair_fact_key(...), assembled from the entries'
        # cached parts (see `payment_parts`): in one C call where the compiled core is in use
        # (four joins and a digest took 3,955 instructions a pair, the one call 3,001, of
        # which the hash is 1,818: docs/performance.md, fifty-fifth round), else, or for
        # texts past ASCII, written here.
        pp = p.payment_parts or self._payment_parts(p)
        sp = s.signal_parts or self._signal_parts(s)
        texts: tuple[str, str, str, str] | None = None
        fill = _PAIR_TEXTS
        if fill is not None:
            texts = fill(pp.pid_head, sp.pid_tail, pp.pair_head, pp.pair_mid, sp.pair_tail,
                         pp.fact_key_head, p.eid, s.eid, self._rule_eid)
        if texts is None:
            texts = _written_pair_texts(pp.pid_head, sp.pid_tail, pp.pair_head, pp.pair_mid,
                                        sp.pair_tail, pp.fact_key_head, p.eid, s.eid,
                                        self._rule_eid)
        pid, pjson, fact_key, logical_key = texts
        out.facts.append(Fact(fact_key, "pair", logical_key, "current", None, HASH_LATER, None,
                              pjson))
        p.matches[s.id] = pid
        s.matches[p.id] = pid
        self._pairs_published += 1
        return pid

    def _publish_sided(self, side: Side, e: Entry, c: Entry, out: Emit) -> None:
        """Publish the pair of own entry `e` and counterpart `c` (payment first)."""
        if side.is_payment:
            self._publish(e, c, out)
        else:
            self._publish(c, e, out)

    def _retire(self, payment_id: str, payment_rev: int, payment_t: int, signal_id: str,
                signal_rev: int, pid: str, successor: str | None, out: Emit) -> None:
        payload = {"rule_version": self.rule_version, "pair_id": pid, "payment_id": payment_id,
                   "payment_rev": payment_rev, "signal_id": signal_id, "signal_rev": signal_rev,
                   "successor_pair_id": successor}
        out.fact(Fact.make(pair_fact_key(payment_t, pid, "retire"), "pair",
                           pair_logical_key(payment_id, signal_id, self.rule_version), "retired",
                           payload, predecessor_key=pair_fact_key(payment_t, pid, "publish")))
        self._counters["pairs_retired"] += 1

    def _outcome(self, p: Entry, status: str, out: Emit) -> None:
        # The fact of outcome_payload(...), assembled from the payment's cached parts: in one
        # C call where the compiled core is in use, else, or for texts past ASCII, written here.
        seq = p.outcome_seq = p.outcome_seq + 1
        p.outcome = status
        pp = p.payment_parts or self._payment_parts(p)
        n = len(p.matches)
        tail = _STATUS_TAIL[status]
        texts: tuple[str, str] | None = None
        fill = _OUTCOME_TEXTS
        if fill is not None:
            texts = fill(pp.outcome_head, n, pp.outcome_mid, tail, pp.outcome_key_head, seq)
        if texts is None:
            texts = _written_outcome_texts(pp.outcome_head, n, pp.outcome_mid, tail,
                                           pp.outcome_key_head, seq)
        pjson, key = texts
        out.facts.append(Fact(key, "outcome", p.id, status, None, HASH_LATER, None, pjson))

    # ------------------------------------------------------------------ records
    def on_record(self, rec: Record, out: Emit) -> None:
        """One record: duplicate/stale/conflict, correction, late proof, or insert."""
        side = self._sides[rec.topic]
        other = self._other[rec.topic]
        what, known = side.ids.classify(rec)
        if known is not None:
            if what == CORRECTION:
                self._correct(side, other, rec, known, out)
            else:
                settle(what, rec, out)
            return
        t, key = rec.event_us, rec.key
        if t < side.wm:
            blocker = self._blocker(side, other, key, t)
            if blocker:
                self._counters["late_queued"] += 1
                side.ids.remember(rec.id, [rec.revision, rec.payload_hash, key, t, QUEUED])
                self._queue(rec, f"late_{side.label}:{blocker}", out)
                return
            self._counters["late_joined"] += 1
        side.ids.remember(rec.id, [rec.revision, rec.payload_hash, key, t, LIVE])
        out.disposition(rec, ACCEPTED)
        self._insert(side, other, self._new_entry(rec), out)

    def _insert(self, side: Side, other: Side, e: Entry, out: Emit) -> None:
        # The key's two indexes, looked up once: the probe reads the other's, and the peaks
        # read both unless an eviction may have changed them (each lookup of a key cost about
        # 150 instructions; docs/performance.md, fifty-sixth round).
        own = self._place(side, e)
        theirs = other.state.keys.get(e.key)
        if theirs is not None:
            lo, hi = e.t - side.lower, e.t + side.upper
            if side.is_payment:
                for s in theirs.range(lo, hi):
                    self._publish(e, s, out)
            else:
                for p in theirs.range(lo, hi):
                    self._publish(p, e, out)
                    if p.outcome == "provisional":
                        self._outcome(p, "retracted", out)
        if side.is_payment and not e.matches:
            self._outcome(e, "provisional", out)
        if self._evict_if_beyond_horizon(side, other, e, out):
            self._track_peak(e.key)
        else:
            self._track_peak_of(e.key, own, theirs)

    # ------------------------------------------------------------------ corrections
    def _correct(self, side: Side, other: Side, rec: Record, known: list[Any],
                 out: Emit) -> None:
        """A higher revision: live only if the old version, its counterparts and the new
        version's range are all still in state under the same key; else queued whole."""
        old = side.live.get(rec.id)
        reason: str | None
        if old is None:
            reason = "correction:old_version_not_in_state"
        elif old.key != rec.key:
            reason = "correction:key_changed"
        elif any(cid not in other.live for cid in old.matches):
            reason = "correction:old_counterpart_evicted"
        else:
            blocker = self._blocker(side, other, rec.key, rec.event_us)
            reason = f"correction:{blocker}" if blocker else None
        if reason or old is None:
            reason = reason or "correction:old_version_not_in_state"
            self._counters["corrections_queued"] += 1
            side.ids.remember(rec.id, [rec.revision, rec.payload_hash, rec.key, rec.event_us,
                                       QUEUED])
            self._queue(rec, reason, out, {"old_revision": known[REV],
                                           "old_event_us": known[ID_T],
                                           "old_key": known[ID_KEY]})
            return
        self._counters["corrections_live"] += 1
        side.ids.remember(rec.id, [rec.revision, rec.payload_hash, rec.key, rec.event_us, LIVE])
        out.disposition(rec, ACCEPTED)
        # Take the old version out of state and off its counterparts.
        side.state.remove(old.key, old.t, old.seq, old.size)
        del side.live[old.id]
        old_pairs = list(old.matches.items())
        for cid, _ in old_pairs:
            other.live[cid].matches.pop(old.id, None)
        new = self._new_entry(rec)
        new.outcome_seq, new.outcome = old.outcome_seq, old.outcome
        self._place(side, new)
        # Publish the new version's pairs first so each retirement can name its successor.
        staged = Emit()
        touched: dict[str, Entry] = {}  # payments whose match set changed
        for c in other.state.probe(new.key, new.t - side.lower, new.t + side.upper):
            self._publish_sided(side, new, c, staged)
            if not side.is_payment:
                touched[c.id] = c
        if side.is_payment:
            touched[new.id] = new
        for cid, old_pid in old_pairs:
            if side.is_payment:
                self._retire(old.id, old.rev, old.t, cid, other.live[cid].rev, old_pid,
                             new.matches.get(cid), out)
            else:
                p = touched.setdefault(cid, other.live[cid])
                self._retire(cid, p.rev, p.t, old.id, old.rev, old_pid,
                             new.matches.get(cid), out)
        out.facts.extend(staged.facts)
        for p in touched.values():
            # A payment that gained its first match retracts its provisional outcome; one that
            # lost its last match is provisional again.
            if p.matches and p.outcome == "provisional":
                self._outcome(p, "retracted", out)
            elif not p.matches and p.outcome != "provisional":
                self._outcome(p, "provisional", out)
        self._evict_if_beyond_horizon(side, other, new, out)
        self._track_peak(new.key)

    def _place(self, side: Side, e: Entry) -> TimeIndex:
        """Insert an entry into its side's state, eviction order and (opt-in) TTL heap;
        returns the index of its key."""
        idx = side.state.insert(e.key, e.t, e.seq, e, e.size)
        side.live[e.id] = e
        side.eviction_order.push(e.t, e.key)
        if self.ttl is not None:
            heapq.heappush(self._ttl_heap, (e.arrival, e.seq, side.topic, e.id))
        return idx

    def _evict_if_beyond_horizon(self, side: Side, other: Side, e: Entry, out: Emit) -> bool:
        """Already beyond the horizon (a late join, or the other input ran ahead): evict now.
        True when it evicted."""
        if e.t + side.upper < other.wm:
            self._evict(side, e.key, other.wm - side.upper, out)
            return True
        return False

    # ------------------------------------------------------------------ time
    def on_watermark(self, topic: str, wm: int, out: Emit) -> None:
        own = self._sides[topic]
        if wm > own.wm:
            own.wm = wm
            # This input's watermark evicts the other side's entries beyond their horizon.
            other = self._other[topic]
            bound = POS_INF if wm > LAST_FINITE else wm - other.upper
            queue = other.eviction_order
            if queue.has_before(bound):
                # The queue holds one (time, key) per entry placed; the first of a key evicts
                # all of its entries below the bound, so its later ones are skipped. Taken in
                # one call: an eviction pushes nothing into this queue.
                keys: list[str] = []
                queue.take_before(bound, keys)
                done = set()
                for key in keys:
                    if key not in done:
                        done.add(key)
                        self._evict(other, key, bound, out)
        self._maybe_prune_identities()

    def _maybe_prune_identities(self) -> None:
        low = min(self.payments.wm, self.signals.wm)
        if low <= NEG_INF or low > LAST_FINITE or low - self._pruned_at < 60 * US_PER_MIN:
            return
        self._pruned_at = low
        bound = low - self.identity_retention
        pruned = self.payments.ids.evict_before(bound) + self.signals.ids.evict_before(bound)
        self._counters["identities_pruned"] = self._counters.get("identities_pruned", 0) + pruned

    def _evict(self, side: Side, key: str, bound: int, out: Emit) -> None:
        """Evict `side`'s entries of `key` with t < bound (beyond the horizon); a payment's
        outcome becomes final when it leaves state."""
        evicted: list[Entry] = side.state.pop_before(key, bound)
        if evicted:
            self._finalize(side, key, evicted, out)
            self._settle_evicted_max(side, key, evicted[-1].t)

    def _finalize(self, side: Side, key: str, gone: list[Entry], out: Emit) -> None:
        """`gone`, entries of `key` oldest first, left state; the caller then settles the key's
        evicted maximum (`_settle_evicted_max`, once per eviction step: the maxima fold the
        same whether a key drops after each entry or after all of them)."""
        live, ids = side.live, side.ids
        for e in gone:
            # `in`, then `del`: compiled, `dict.pop` is a method looked up by name per call.
            if e.id in live:
                del live[e.id]
            # Its identity left live state: a candidate for forgetting from now on.
            ids.left_state(e.id, e.rev, EVICTED)
        if side.is_payment:
            self._evicted_payments += len(gone)
            for e in gone:
                self._outcome(e, "final", out)
        else:
            self._evicted_signals += len(gone)

    def _settle_evicted_max(self, side: Side, key: str, last: int) -> None:
        """`side` evicted entries of `key`, the latest at `last`. While either side still
        holds the key, `side`'s evicted maximum for it rises to `last`. When neither does, the
        key gives up its maxima to bound memory: they fold into the sides' dropped maxima, so
        the fallback stays an upper bound.

        Most evictions empty their key. `side`'s maximum then folds in from `last` and any
        maximum already stored; storing it first and folding it after cost a store, a lookup
        and a delete (docs/performance.md, fifty-sixth round). The fallback a first eviction
        would have stored need not fold in: it is never above the dropped maximum."""
        held = side.evicted_max.get(key)
        if key in self.payments.state.keys or key in self.signals.state.keys:
            prev = held if held is not None else self._fallback(side)
            side.evicted_max[key] = last if last > prev else prev
            return
        if held is not None:
            del side.evicted_max[key]  # get and del: see `_finalize` on `dict.pop`
            if held > last:
                last = held
        if last > side.dropped_max:
            side.dropped_max = last
        self._fold_dropped(self.signals if side is self.payments else self.payments, key)

    @staticmethod
    def _fold_dropped(side: Side, key: str) -> None:
        em = side.evicted_max.get(key)  # get and del: see `_finalize` on `dict.pop`
        if em is not None:
            del side.evicted_max[key]
            if em > side.dropped_max:
                side.dropped_max = em

    @property
    def clocked(self) -> bool:
        """Only the opt-in TTL mode evicts on age: without it the host need not tick."""
        return self.ttl is not None

    def on_clock(self, clock_us: int, out: Emit) -> None:
        """Source-time clock tick: only the opt-in TTL mode evicts on age."""
        if self.ttl is None:
            return
        heap = self._ttl_heap
        while heap and heap[0][0] + self.ttl < clock_us:
            _, seq, topic, eid = heapq.heappop(heap)
            side = self._sides[topic]
            e = side.live.get(eid)
            if e is not None and e.seq == seq:
                side.state.remove(e.key, e.t, e.seq, e.size)
                self._counters["ttl_evictions"] += 1
                self._finalize(side, e.key, [e], out)
                self._settle_evicted_max(side, e.key, e.t)

    def on_end_of_stream(self, out: Emit) -> None:
        self.on_watermark(PAYMENTS, POS_INF, out)
        self.on_watermark(SIGNALS, POS_INF, out)

    # ------------------------------------------------------------------ host hooks
    def set_queue_index(self, entries: Iterable[tuple[str, str, int]]) -> None:
        """Reload the queued-time index from the store's pending/held queue entries."""
        for side in (self.payments, self.signals):
            side.queued = {}
        for topic, key, t in entries:
            insort(self._sides[topic].queued.setdefault(key, []), t)

    def set_covered(self, intervals: Iterable[tuple[str, int, int]]) -> None:
        self.covered = {}
        for key, start, end in intervals:
            self.covered.setdefault(key, []).append((start, end))

    # ------------------------------------------------------------------ observability
    @property
    def peak(self) -> dict[str, Any]:
        """The largest state held so far: records and bytes, and the key that held the most
        records, with its records and bytes then."""
        return {"records": self._peak_records, "bytes": self._peak_bytes,
                "hot_key": self._hot_key, "hot_key_records": self._hot_key_records,
                "hot_key_bytes": self._hot_key_bytes}

    def _track_peak(self, key: str) -> None:
        self._track_peak_of(key, self.payments.state.keys.get(key),
                            self.signals.state.keys.get(key))

    def _track_peak_of(self, key: str, one: TimeIndex | None, two: TimeIndex | None) -> None:
        """The peaks after a record, with `one` and `two` the indexes of `key` on the two
        sides (either order; None where the side holds none)."""
        pay, sig = self.payments.state, self.signals.state
        recs = pay.records + sig.records
        if recs > self._peak_records:
            self._peak_records = recs
        b = pay.bytes + sig.bytes
        if b > self._peak_bytes:
            self._peak_bytes = b
        # Per record: `is None` and len(.times) stay in C (a TimeIndex's truth value and
        # len() would each call its Python __len__).
        n = (0 if one is None else len(one.times)) + (0 if two is None else len(two.times))
        if n > self._hot_key_records:
            self._hot_key = key
            self._hot_key_records = n
            self._hot_key_bytes = ((0 if one is None else one.bytes)
                                   + (0 if two is None else two.bytes))

    def hottest_key(self) -> tuple[str, int, int] | None:
        best = None
        pay, sig = self.payments.state, self.signals.state
        for side, other_side in ((pay, sig), (sig, pay)):
            for k, idx in side.keys.items():
                other = other_side.keys.get(k)
                n = len(idx) + (len(other) if other else 0)
                b = idx.bytes + (other.bytes if other else 0)
                if best is None or n > best[1] or (n == best[1] and k < best[0]):
                    best = (k, n, b)
        return best

    def state_metrics(self) -> dict[str, Any]:
        hot = self.hottest_key()
        pay, sig = self.payments.state, self.signals.state
        keys = set(pay.keys) | set(sig.keys)
        return {
            "payment_wm": self.payments.wm, "risk_wm": self.signals.wm,
            "keys": len(keys),
            "payment_records": pay.records, "signal_records": sig.records,
            "state_records": pay.records + sig.records,
            "state_bytes": pay.bytes + sig.bytes,
            "hot_key": hot[0] if hot else None,
            "hot_key_records": hot[1] if hot else 0,
            "hot_key_bytes": hot[2] if hot else 0,
            "identities": len(self.payments.ids) + len(self.signals.ids),
            "queued_index": sum(len(v) for v in self.payments.queued.values())
            + sum(len(v) for v in self.signals.queued.values()),
            "peak": self.peak,
            "horizon_violations": len(self.horizon_violations()),
            **self.counters,
        }

    def keyed_counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for side, field in ((self.payments, "payments"), (self.signals, "signals")):
            for k, idx in side.state.keys.items():
                row = out.setdefault(k, {"payments": 0, "signals": 0, "bytes": 0})
                row[field] = len(idx)
                row["bytes"] += idx.bytes
        return out

    def horizon_violations(self) -> list[tuple[str, str, str]]:
        """Entries the horizon rule would already have evicted (must always be empty)."""
        bad = []
        for side in (self.payments, self.signals):
            other_wm = self._other[side.topic].wm
            for k, idx in side.state.keys.items():
                for e in idx.items:
                    if other_wm > e.t + side.upper:
                        bad.append((side.label, k, e.id))
        return bad

    # ------------------------------------------------------------------ checkpoint
    def snapshot(self) -> dict[str, Any]:
        p, s = self.payments, self.signals
        return {
            "rule_version": self.rule_version, "lower": p.lower, "upper": p.upper,
            "ttl": self.ttl,
            "payments": [e.dump() for idx in p.state.keys.values() for e in idx.items],
            "signals": [e.dump() for idx in s.state.keys.values() for e in idx.items],
            "pay_ids": p.ids.rows, "sig_ids": s.ids.rows,
            "evicted_max_pay": p.evicted_max, "evicted_max_sig": s.evicted_max,
            "dropped_max_pay": p.dropped_max, "dropped_max_sig": s.dropped_max,
            "queued_pay": p.queued, "queued_sig": s.queued,
            "payment_wm": p.wm, "risk_wm": s.wm, "seq": self.seq,
            "pruned_at": self._pruned_at, "identity_retention": self.identity_retention,
            "ttl_heap": [list(x) for x in self._ttl_heap],
            "ident_heap": [[t, side.topic, eid] for side in (p, s)
                           for t, eid in side.ids.candidates],
            "counters": self.counters, "peak": self.peak,
        }

    def restore(self, snap: dict[str, Any]) -> None:
        if snap["rule_version"] != self.rule_version:
            raise ValueError(
                f"checkpoint rule version {snap['rule_version']} != {self.rule_version}")
        self.ttl = snap["ttl"]
        self.payments = Side(PAYMENTS, snap["lower"], snap["upper"])
        self.signals = Side(SIGNALS, snap["upper"], snap["lower"])
        self._other = {PAYMENTS: self.signals, SIGNALS: self.payments}
        self._sides = {PAYMENTS: self.payments, SIGNALS: self.signals}
        for side, tag in ((self.payments, "pay"), (self.signals, "sig")):
            side.ids.load(snap[f"{tag}_ids"], [(t, eid) for t, topic, eid in snap["ident_heap"]
                                               if topic == side.topic])
            side.evicted_max = snap[f"evicted_max_{tag}"]
            side.dropped_max = snap[f"dropped_max_{tag}"]
            side.queued = snap[f"queued_{tag}"]
        self.payments.wm, self.signals.wm = snap["payment_wm"], snap["risk_wm"]
        self.seq = snap["seq"]
        self._pruned_at = snap["pruned_at"]
        self.identity_retention = snap["identity_retention"]
        self._counters = dict(snap["counters"])
        self._pairs_published = self._counters["pairs_published"]
        self._evicted_payments = self._counters["evicted_payments"]
        self._evicted_signals = self._counters["evicted_signals"]
        peak = snap["peak"]
        self._peak_records, self._peak_bytes = peak["records"], peak["bytes"]
        self._hot_key, self._hot_key_records = peak["hot_key"], peak["hot_key_records"]
        self._hot_key_bytes = peak["hot_key_bytes"]
        for side, rows in ((self.payments, snap["payments"]), (self.signals, snap["signals"])):
            for row in rows:
                e = Entry.load(row)
                side.state.insert(e.key, e.t, e.seq, e, e.size)
                side.live[e.id] = e
                side.eviction_order.push(e.t, e.key)
        self._ttl_heap = [tuple(x) for x in snap["ttl_heap"]]
        heapq.heapify(self._ttl_heap)
