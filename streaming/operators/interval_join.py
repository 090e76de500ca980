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

import hashlib
import heapq
from bisect import bisect_left, insort
from typing import Iterable

from ..contracts import Record
from ..keys import compose, escape
from ..state import KeyedSide
from ..timeutil import NEG_INF, POS_INF, US_PER_MIN, us_to_iso
from .base import ACCEPTED, DUPLICATE, ROUTED, STALE, Emit, Fact, QueueEntry, Quarantined

RULE_VERSION = "ij-v1:-47m..+8m"
LOWER_US = 47 * US_PER_MIN  # look-back: signal may precede the payment by up to 47 min
UPPER_US = 8 * US_PER_MIN  # look-ahead: signal may follow the payment by up to 8 min
LATENESS_US = 3 * US_PER_MIN
STATE_SCHEMA = "interval_join/1"
# Deduplication identities of evicted or queued events are kept this long below the watermark.
# A redelivery older than that is no longer recognised as a duplicate: it arrives late, finds
# its counterparts evicted and goes to the replay queue, where the rebuild deduplicates it
# against the archive. Nothing is dropped; memory stays bounded.
IDENTITY_RETENTION_US = 24 * 60 * US_PER_MIN

PAYMENTS = "payments"
SIGNALS = "risk_signals"


def pair_id(rule_version: str, payment_id: str, payment_rev: int, signal_id: str,
            signal_rev: int) -> str:
    return _pair_id_escaped(escape(rule_version), escape(payment_id), payment_rev,
                            escape(signal_id), signal_rev)


def _pair_id_escaped(rule_eid: str, payment_eid: str, payment_rev: int, signal_eid: str,
                     signal_rev: int) -> str:
    # The hashed text is the unambiguous composition of the five parts (see keys.compose).
    raw = f"{rule_eid}|{payment_eid}|{payment_rev}|{signal_eid}|{signal_rev}"
    return hashlib.blake2b(raw.encode(), digest_size=16).hexdigest()


def pair_fact_key(payment_us: int, pid: str, action: str) -> str:
    # Leading with the payment's event time (integer microseconds, no formatting on the hot
    # path) keeps the unique index's inserts time-ordered; `pid` is hex, so no escaping.
    return f"pair|{payment_us}|{pid}|{action}"


def pair_logical_key(payment_id: str, signal_id: str, rule_version: str) -> str:
    return compose(payment_id, signal_id, rule_version)


class Entry:
    """A payment or signal held in state. `matches` maps counterpart id -> current pair id."""

    __slots__ = ("id", "rev", "t", "key", "seq", "size", "payload", "matches", "outcome",
                 "outcome_seq", "arrival", "_iso", "eid")

    def __init__(self, id, rev, t, key, seq, size, payload, arrival):
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
        self._iso: str | None = None
        self.eid = escape(id)  # the ID as a composite-key part, escaped once per entry

    @property
    def iso(self) -> str:
        """The event time as ISO text for payloads, formatted once per entry (not per pair)."""
        if self._iso is None:
            self._iso = us_to_iso(self.t)
        return self._iso

    def dump(self) -> list:
        return [self.id, self.rev, self.t, self.key, self.seq, self.size, self.payload,
                list(self.matches.items()), self.outcome, self.outcome_seq, self.arrival]

    @classmethod
    def load(cls, row: list) -> "Entry":
        e = cls(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[10])
        e.matches = dict((a, b) for a, b in row[7])
        e.outcome = row[8]
        e.outcome_seq = row[9]
        return e


def _size_of(e: Entry) -> int:
    return e.size


class IntervalJoin:
    """The operator. Watermarks come in through `on_watermark`; the host owns the clocks."""

    pipeline = "join"
    state_schema = STATE_SCHEMA

    def __init__(self, lower_us: int = LOWER_US, upper_us: int = UPPER_US,
                 ttl_us: int | None = None, rule_version: str = RULE_VERSION,
                 identity_retention_us: int = IDENTITY_RETENTION_US):
        self.lower = lower_us
        self.upper = upper_us
        self.ttl = ttl_us
        self.rule_version = rule_version
        self._rule_eid = escape(rule_version)
        self.identity_retention = identity_retention_us
        self._pruned_at = NEG_INF
        self.pay = KeyedSide(PAYMENTS)
        self.sig = KeyedSide(SIGNALS)
        # id -> [revision, payload_hash, key, event_us, where]; where in live|evicted|queued
        self.pay_ids: dict[str, list] = {}
        self.sig_ids: dict[str, list] = {}
        self.pay_live: dict[str, Entry] = {}
        self.sig_live: dict[str, Entry] = {}
        self.evicted_max_pay: dict[str, int] = {}
        self.evicted_max_sig: dict[str, int] = {}
        # Largest evicted_max of any key whose entry was dropped: a safe bound for missing keys.
        self.dropped_max_pay = NEG_INF
        self.dropped_max_sig = NEG_INF
        # Event times of queued records per key: a late event near one must not join live.
        self.queued_pay: dict[str, list[int]] = {}
        self.queued_sig: dict[str, list[int]] = {}
        # Payment-time intervals per key covered by a published generation (set by the host).
        self.covered: dict[str, list[tuple[int, int]]] = {}
        self.payment_wm = NEG_INF
        self.risk_wm = NEG_INF
        self.seq = 0
        self._pay_heap: list[tuple[int, str]] = []
        self._sig_heap: list[tuple[int, str]] = []
        self._ttl_heap: list[tuple[int, int, str, str]] = []
        self._ident_heap: list[tuple[int, str, str]] = []
        self.counters = {"late_joined": 0, "late_queued": 0, "corrections_live": 0,
                         "corrections_queued": 0, "evicted_payments": 0, "evicted_signals": 0,
                         "ttl_evictions": 0, "pairs_published": 0, "pairs_retired": 0}
        self.peak = {"records": 0, "bytes": 0, "hot_key": None, "hot_key_records": 0,
                     "hot_key_bytes": 0}

    # ------------------------------------------------------------------ helpers
    def own_wm(self, topic: str) -> int:
        return self.payment_wm if topic == PAYMENTS else self.risk_wm

    def _evicted_max_sig(self, key: str) -> int:
        v = self.evicted_max_sig.get(key)
        if v is not None:
            return v
        return self._fallback_sig()

    def _evicted_max_pay(self, key: str) -> int:
        v = self.evicted_max_pay.get(key)
        if v is not None:
            return v
        return self._fallback_pay()

    def _fallback_sig(self) -> int:
        """Upper bound on the evicted signal times of a key without an entry: signals below
        payment_wm - 47 min may have been evicted, and no dropped key evicted anything later
        than dropped_max_sig. Both bounds are safe; the smaller is used."""
        if self.ttl is not None:  # TTL evicts regardless of watermarks: only the max is safe
            return self.dropped_max_sig
        wm_bound = NEG_INF if self.payment_wm <= NEG_INF else self.payment_wm - self.lower
        return min(wm_bound, self.dropped_max_sig)

    def _fallback_pay(self) -> int:
        if self.ttl is not None:
            return self.dropped_max_pay
        wm_bound = NEG_INF if self.risk_wm <= NEG_INF else self.risk_wm - self.upper
        return min(wm_bound, self.dropped_max_pay)

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

    def _pay_blocker(self, key: str, t: int) -> str | None:
        """Why a payment at t cannot join live now, or None when it provably can."""
        if self._evicted_max_sig(key) >= t - self.lower:
            return "counterpart_evicted"
        if self._any_in(self.queued_sig.get(key), t - self.lower, t + self.upper):
            return "counterpart_queued"
        if self._covered(key, t, t):
            return "covered_by_generation"
        return None

    def _sig_blocker(self, key: str, s: int) -> str | None:
        if self._evicted_max_pay(key) >= s - self.upper:
            return "counterpart_evicted"
        if self._any_in(self.queued_pay.get(key), s - self.upper, s + self.lower):
            return "counterpart_queued"
        if self._covered(key, s - self.upper, s + self.lower):
            return "covered_by_generation"
        return None

    def _queue(self, rec: Record, reason: str, out: Emit, detail: dict | None = None) -> None:
        own = self.own_wm(rec.topic)
        out.queue.append(QueueEntry(rec.topic, rec.partition, rec.offset, rec.id, rec.revision,
                                    rec.key, rec.event_us, reason, own, detail or {}))
        out.disposition(rec, ROUTED)
        self._retire_identity(rec.topic, rec.id, rec.event_us)
        index = self.queued_pay if rec.topic == PAYMENTS else self.queued_sig
        insort(index.setdefault(rec.key, []), rec.event_us)
        if detail and "old_event_us" in detail:
            insort(index.setdefault(rec.key, []), detail["old_event_us"])

    def _new_entry(self, rec: Record) -> Entry:
        self.seq += 1
        return Entry(rec.id, rec.revision, rec.event_us, rec.key, self.seq, rec.size,
                     rec.payload, rec.arrival_us)

    # ------------------------------------------------------------------ facts
    def _pair_payload(self, p: Entry, s: Entry, pid: str) -> dict:
        return {"rule_version": self.rule_version, "pair_id": pid, "merchant_id": p.key,
                "payment_id": p.id, "payment_rev": p.rev, "signal_id": s.id, "signal_rev": s.rev,
                "payment_time": p.iso, "signal_time": s.iso,
                "amount_cents": p.payload.get("amount_cents"), "score": s.payload.get("score")}

    def _publish(self, p: Entry, s: Entry, out: Emit) -> str:
        pid = _pair_id_escaped(self._rule_eid, p.eid, p.rev, s.eid, s.rev)
        out.fact(Fact.make(pair_fact_key(p.t, pid, "publish"), "pair",
                           f"{p.eid}|{s.eid}|{self._rule_eid}", "current",
                           self._pair_payload(p, s, pid)))
        p.matches[s.id] = pid
        s.matches[p.id] = pid
        self.counters["pairs_published"] += 1
        return pid

    def _retire(self, payment_id: str, payment_rev: int, payment_t: int, signal_id: str,
                signal_rev: int, pid: str, successor: str | None, out: Emit) -> None:
        payload = {"rule_version": self.rule_version, "pair_id": pid, "payment_id": payment_id,
                   "payment_rev": payment_rev, "signal_id": signal_id, "signal_rev": signal_rev,
                   "successor_pair_id": successor}
        out.fact(Fact.make(pair_fact_key(payment_t, pid, "retire"), "pair",
                           pair_logical_key(payment_id, signal_id, self.rule_version), "retired",
                           payload, predecessor_key=pair_fact_key(payment_t, pid, "publish")))
        self.counters["pairs_retired"] += 1

    def _outcome(self, p: Entry, status: str, out: Emit) -> None:
        p.outcome_seq += 1
        p.outcome = status
        payload = {"payment_id": p.id, "payment_rev": p.rev, "merchant_id": p.key,
                   "payment_time": p.iso, "amount_cents": p.payload.get("amount_cents"),
                   "status": status, "match_count": len(p.matches),
                   "rule_version": self.rule_version}
        out.fact(Fact.make(f"outcome|{p.eid}|{p.rev}|{p.outcome_seq}", "outcome", p.id,
                           status, payload))

    # ------------------------------------------------------------------ records
    def on_record(self, rec: Record, out: Emit) -> None:
        if rec.topic == PAYMENTS:
            self._on_payment(rec, out)
        else:
            self._on_signal(rec, out)
        self._track_peak(rec.key)

    def _identity_check(self, ids: dict, rec: Record, out: Emit) -> str:
        """'new', 'correction', or a terminal disposition already emitted ('done')."""
        known = ids.get(rec.id)
        if known is None:
            return "new"
        rev, h = known[0], known[1]
        if rec.revision == rev:
            if rec.payload_hash == h:
                out.disposition(rec, DUPLICATE)
            else:
                out.quarantine.append(Quarantined(
                    rec.topic, rec.partition, rec.offset, "conflicting_duplicate",
                    f"{rec.id} revision {rec.revision} was seen with other content", ""))
            return "done"
        if rec.revision < rev:
            out.disposition(rec, STALE)
            return "done"
        return "correction"

    def _on_payment(self, rec: Record, out: Emit) -> None:
        what = self._identity_check(self.pay_ids, rec, out)
        if what == "done":
            return
        if what == "correction":
            self._correct_payment(rec, out)
            return
        t, key = rec.event_us, rec.key
        if t < self.payment_wm:
            blocker = self._pay_blocker(key, t)
            if blocker:
                self.counters["late_queued"] += 1
                self.pay_ids[rec.id] = [rec.revision, rec.payload_hash, key, t, "queued"]
                self._queue(rec, f"late_payment:{blocker}", out)
                return
            self.counters["late_joined"] += 1
        self.pay_ids[rec.id] = [rec.revision, rec.payload_hash, key, t, "live"]
        out.disposition(rec, ACCEPTED)
        self._insert_payment(self._new_entry(rec), out)

    def _insert_payment(self, p: Entry, out: Emit) -> None:
        self._place(p, True)
        for s in self.sig.probe(p.key, p.t - self.lower, p.t + self.upper):
            self._publish(p, s, out)
        if not p.matches:
            self._outcome(p, "provisional", out)
        self._evict_if_beyond_horizon(p, True, out)

    def _on_signal(self, rec: Record, out: Emit) -> None:
        what = self._identity_check(self.sig_ids, rec, out)
        if what == "done":
            return
        if what == "correction":
            self._correct_signal(rec, out)
            return
        s, key = rec.event_us, rec.key
        if s < self.risk_wm:
            blocker = self._sig_blocker(key, s)
            if blocker:
                self.counters["late_queued"] += 1
                self.sig_ids[rec.id] = [rec.revision, rec.payload_hash, key, s, "queued"]
                self._queue(rec, f"late_signal:{blocker}", out)
                return
            self.counters["late_joined"] += 1
        self.sig_ids[rec.id] = [rec.revision, rec.payload_hash, key, s, "live"]
        out.disposition(rec, ACCEPTED)
        self._insert_signal(self._new_entry(rec), out)

    def _insert_signal(self, s: Entry, out: Emit) -> None:
        self._place(s, False)
        for p in self.pay.probe(s.key, s.t - self.upper, s.t + self.lower):
            self._publish(p, s, out)
            if p.outcome == "provisional":
                self._outcome(p, "retracted", out)
        self._evict_if_beyond_horizon(s, False, out)

    # ------------------------------------------------------------------ corrections
    def _correct_payment(self, rec: Record, out: Emit) -> None:
        self._correct(rec, out, is_pay=True)

    def _correct_signal(self, rec: Record, out: Emit) -> None:
        self._correct(rec, out, is_pay=False)

    def _correct(self, rec: Record, out: Emit, is_pay: bool) -> None:
        """A higher revision: live only if the old version, its counterparts and the new
        version's range are all still in state under the same key; else queued whole."""
        ids, live, other_live = ((self.pay_ids, self.pay_live, self.sig_live) if is_pay
                                 else (self.sig_ids, self.sig_live, self.pay_live))
        old = live.get(rec.id)
        known = ids[rec.id]
        if old is None:
            reason = "correction:old_version_not_in_state"
        elif old.key != rec.key:
            reason = "correction:key_changed"
        elif any(cid not in other_live for cid in old.matches):
            reason = "correction:old_counterpart_evicted"
        else:
            blocker = (self._pay_blocker if is_pay else self._sig_blocker)(rec.key, rec.event_us)
            reason = f"correction:{blocker}" if blocker else None
        if reason:
            self.counters["corrections_queued"] += 1
            ids[rec.id] = [rec.revision, rec.payload_hash, rec.key, rec.event_us, "queued"]
            self._queue(rec, reason, out, {"old_revision": known[0], "old_event_us": known[3],
                                           "old_key": known[2]})
            return
        self.counters["corrections_live"] += 1
        ids[rec.id] = [rec.revision, rec.payload_hash, rec.key, rec.event_us, "live"]
        out.disposition(rec, ACCEPTED)
        # Take the old version out of state and off its counterparts.
        (self.pay if is_pay else self.sig).remove(old.key, old.t, old.seq, old.size)
        del live[old.id]
        old_pairs = list(old.matches.items())
        for cid, _ in old_pairs:
            other_live[cid].matches.pop(old.id, None)
        new = self._new_entry(rec)
        new.outcome_seq, new.outcome = old.outcome_seq, old.outcome
        self._place(new, is_pay)
        # Publish the new version's pairs first so each retirement can name its successor.
        staged = Emit()
        touched: dict[str, Entry] = {}
        if is_pay:
            for s in self.sig.probe(new.key, new.t - self.lower, new.t + self.upper):
                self._publish(new, s, staged)
            touched[new.id] = new
            for sid, old_pid in old_pairs:
                self._retire(old.id, old.rev, old.t, sid, self.sig_live[sid].rev, old_pid,
                             new.matches.get(sid), out)
        else:
            for p in self.pay.probe(new.key, new.t - self.upper, new.t + self.lower):
                self._publish(p, new, staged)
                touched[p.id] = p
            for pay_id, old_pid in old_pairs:
                p = touched.setdefault(pay_id, self.pay_live[pay_id])
                self._retire(pay_id, p.rev, p.t, old.id, old.rev, old_pid,
                             new.matches.get(pay_id), out)
        out.facts.extend(staged.facts)
        for p in touched.values():
            # A payment that gained its first match retracts its provisional outcome; one that
            # lost its last match is provisional again.
            if p.matches and p.outcome == "provisional":
                self._outcome(p, "retracted", out)
            elif not p.matches and p.outcome != "provisional":
                self._outcome(p, "provisional", out)
        self._evict_if_beyond_horizon(new, is_pay, out)

    def _place(self, e: Entry, is_pay: bool) -> None:
        """Insert an entry into its side's state, eviction heap and (opt-in) TTL heap."""
        side, live, heap = ((self.pay, self.pay_live, self._pay_heap) if is_pay
                            else (self.sig, self.sig_live, self._sig_heap))
        side.insert(e.key, e.t, e.seq, e, e.size)
        live[e.id] = e
        heapq.heappush(heap, (e.t, e.key))
        if self.ttl is not None:
            heapq.heappush(self._ttl_heap, (e.arrival, e.seq, PAYMENTS if is_pay else SIGNALS,
                                            e.id))

    def _evict_if_beyond_horizon(self, e: Entry, is_pay: bool, out: Emit) -> None:
        # Already beyond the horizon (a late join, or the other input ran ahead): evict now.
        if is_pay and e.t + self.upper < self.risk_wm:
            self._evict_payments(e.key, self.risk_wm - self.upper, out)
        elif not is_pay and e.t + self.lower < self.payment_wm:
            self._evict_signals(e.key, self.payment_wm - self.lower, out)

    # ------------------------------------------------------------------ time
    def on_watermark(self, topic: str, wm: int, out: Emit) -> None:
        if topic == PAYMENTS:
            if wm > self.payment_wm:
                self.payment_wm = wm
                bound = POS_INF if wm >= POS_INF else wm - self.lower
                self._drain_heap(self._sig_heap, bound, self._evict_signals, out)
        else:
            if wm > self.risk_wm:
                self.risk_wm = wm
                bound = POS_INF if wm >= POS_INF else wm - self.upper
                self._drain_heap(self._pay_heap, bound, self._evict_payments, out)
        self._maybe_prune_identities()

    def _maybe_prune_identities(self) -> None:
        low = min(self.payment_wm, self.risk_wm)
        if low <= NEG_INF or low >= POS_INF or low - self._pruned_at < 60 * US_PER_MIN:
            return
        self._pruned_at = low
        bound = low - self.identity_retention
        heap = self._ident_heap
        pruned = 0
        while heap and heap[0][0] < bound:
            t, side, eid = heapq.heappop(heap)
            ids = self.pay_ids if side == PAYMENTS else self.sig_ids
            v = ids.get(eid)
            # Only an identity still as it was when it left state (same time, not live again).
            if v is not None and v[4] != "live" and v[3] == t:
                del ids[eid]
                pruned += 1
        self.counters["identities_pruned"] = self.counters.get("identities_pruned", 0) + pruned

    def _retire_identity(self, side: str, eid: str, t: int) -> None:
        """An identity left live state (evicted or queued): a pruning candidate from now on."""
        heapq.heappush(self._ident_heap, (t, side, eid))

    @staticmethod
    def _drain_heap(heap, bound, evict, out) -> None:
        while heap and heap[0][0] < bound:
            _, key = heapq.heappop(heap)
            evict(key, bound, out)

    def _evict_payments(self, key: str, bound: int, out: Emit) -> None:
        """Evict payments with t < bound, i.e. risk_wm > t + 8 min: their outcome is final."""
        for p in self.pay.pop_before(key, bound, _size_of):
            self._finalize_payment(p, out)

    def _finalize_payment(self, p: Entry, out: Emit) -> None:
        self.pay_live.pop(p.id, None)
        ident = self.pay_ids.get(p.id)
        if ident is not None and ident[0] == p.rev:
            ident[4] = "evicted"
            self._retire_identity(PAYMENTS, p.id, ident[3])
        prev = self.evicted_max_pay.get(p.key)
        if prev is None:
            prev = self._fallback_pay()
        self.evicted_max_pay[p.key] = max(prev, p.t)
        self.counters["evicted_payments"] += 1
        self._outcome(p, "final", out)
        self._maybe_drop_key(p.key)

    def _evict_signals(self, key: str, bound: int, out: Emit) -> None:
        for s in self.sig.pop_before(key, bound, _size_of):
            self._finalize_signal(s)

    def _finalize_signal(self, s: Entry) -> None:
        self.sig_live.pop(s.id, None)
        ident = self.sig_ids.get(s.id)
        if ident is not None and ident[0] == s.rev:
            ident[4] = "evicted"
            self._retire_identity(SIGNALS, s.id, ident[3])
        prev = self.evicted_max_sig.get(s.key)
        if prev is None:
            prev = self._fallback_sig()
        self.evicted_max_sig[s.key] = max(prev, s.t)
        self.counters["evicted_signals"] += 1
        self._maybe_drop_key(s.key)

    def _maybe_drop_key(self, key: str) -> None:
        # A key with both sides empty gives up its entry to bound memory; its maxima fold into
        # the global dropped maxima so the fallback stays an upper bound.
        if key in self.pay.keys or key in self.sig.keys:
            return
        em_p = self.evicted_max_pay.pop(key, None)
        em_s = self.evicted_max_sig.pop(key, None)
        if em_p is not None and em_p > self.dropped_max_pay:
            self.dropped_max_pay = em_p
        if em_s is not None and em_s > self.dropped_max_sig:
            self.dropped_max_sig = em_s

    def on_clock(self, clock_us: int, out: Emit) -> None:
        """Source-time clock tick: only the opt-in TTL mode evicts on age."""
        if self.ttl is None:
            return
        heap = self._ttl_heap
        while heap and heap[0][0] + self.ttl < clock_us:
            _, seq, side, eid = heapq.heappop(heap)
            if side == PAYMENTS:
                p = self.pay_live.get(eid)
                if p is not None and p.seq == seq:
                    self.pay.remove(p.key, p.t, p.seq, p.size)
                    self.counters["ttl_evictions"] += 1
                    self._finalize_payment(p, out)
            else:
                s = self.sig_live.get(eid)
                if s is not None and s.seq == seq:
                    self.sig.remove(s.key, s.t, s.seq, s.size)
                    self.counters["ttl_evictions"] += 1
                    self._finalize_signal(s)

    def on_end_of_stream(self, out: Emit) -> None:
        self.on_watermark(PAYMENTS, POS_INF, out)
        self.on_watermark(SIGNALS, POS_INF, out)

    # ------------------------------------------------------------------ host hooks
    def set_queue_index(self, entries: Iterable[tuple[str, str, int]]) -> None:
        """Reload the queued-time index from the store's pending/held queue entries."""
        self.queued_pay, self.queued_sig = {}, {}
        for topic, key, t in entries:
            index = self.queued_pay if topic == PAYMENTS else self.queued_sig
            insort(index.setdefault(key, []), t)

    def set_covered(self, intervals: Iterable[tuple[str, int, int]]) -> None:
        self.covered = {}
        for key, start, end in intervals:
            self.covered.setdefault(key, []).append((start, end))

    # ------------------------------------------------------------------ observability
    def _track_peak(self, key: str) -> None:
        peak = self.peak
        recs = self.pay.records + self.sig.records
        if recs > peak["records"]:
            peak["records"] = recs
        b = self.pay.bytes + self.sig.bytes
        if b > peak["bytes"]:
            peak["bytes"] = b
        pi = self.pay.keys.get(key)
        si = self.sig.keys.get(key)
        n = (len(pi) if pi else 0) + (len(si) if si else 0)
        if n > peak["hot_key_records"]:
            peak["hot_key"] = key
            peak["hot_key_records"] = n
            peak["hot_key_bytes"] = (pi.bytes if pi else 0) + (si.bytes if si else 0)

    def hottest_key(self) -> tuple[str, int, int] | None:
        best = None
        for side in (self.pay, self.sig):
            for k, idx in side.keys.items():
                other = (self.sig if side is self.pay else self.pay).keys.get(k)
                n = len(idx) + (len(other) if other else 0)
                b = idx.bytes + (other.bytes if other else 0)
                if best is None or n > best[1] or (n == best[1] and k < best[0]):
                    best = (k, n, b)
        return best

    def state_metrics(self) -> dict:
        hot = self.hottest_key()
        keys = set(self.pay.keys) | set(self.sig.keys)
        return {
            "payment_wm": self.payment_wm, "risk_wm": self.risk_wm,
            "keys": len(keys),
            "payment_records": self.pay.records, "signal_records": self.sig.records,
            "state_records": self.pay.records + self.sig.records,
            "state_bytes": self.pay.bytes + self.sig.bytes,
            "hot_key": hot[0] if hot else None,
            "hot_key_records": hot[1] if hot else 0,
            "hot_key_bytes": hot[2] if hot else 0,
            "identities": len(self.pay_ids) + len(self.sig_ids),
            "queued_index": sum(len(v) for v in self.queued_pay.values())
            + sum(len(v) for v in self.queued_sig.values()),
            "peak": dict(self.peak),
            "horizon_violations": len(self.horizon_violations()),
            **self.counters,
        }

    def keyed_counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for k, idx in self.pay.keys.items():
            out.setdefault(k, {"payments": 0, "signals": 0, "bytes": 0})
            out[k]["payments"] = len(idx)
            out[k]["bytes"] += idx.bytes
        for k, idx in self.sig.keys.items():
            out.setdefault(k, {"payments": 0, "signals": 0, "bytes": 0})
            out[k]["signals"] = len(idx)
            out[k]["bytes"] += idx.bytes
        return out

    def horizon_violations(self) -> list[tuple[str, str, str]]:
        """Entries the horizon rule would already have evicted (must always be empty)."""
        bad = []
        for k, idx in self.pay.keys.items():
            for p in idx.items:
                if self.risk_wm > p.t + self.upper:
                    bad.append(("payment", k, p.id))
        for k, idx in self.sig.keys.items():
            for s in idx.items:
                if self.payment_wm > s.t + self.lower:
                    bad.append(("signal", k, s.id))
        return bad

    # ------------------------------------------------------------------ checkpoint
    def snapshot(self) -> dict:
        return {
            "rule_version": self.rule_version, "lower": self.lower, "upper": self.upper,
            "ttl": self.ttl,
            "payments": [p.dump() for idx in self.pay.keys.values() for p in idx.items],
            "signals": [s.dump() for idx in self.sig.keys.values() for s in idx.items],
            "pay_ids": self.pay_ids, "sig_ids": self.sig_ids,
            "evicted_max_pay": self.evicted_max_pay, "evicted_max_sig": self.evicted_max_sig,
            "dropped_max_pay": self.dropped_max_pay, "dropped_max_sig": self.dropped_max_sig,
            "queued_pay": self.queued_pay, "queued_sig": self.queued_sig,
            "payment_wm": self.payment_wm, "risk_wm": self.risk_wm, "seq": self.seq,
            "pruned_at": self._pruned_at, "identity_retention": self.identity_retention,
            "ttl_heap": [list(x) for x in self._ttl_heap],
            "ident_heap": [list(x) for x in self._ident_heap],
            "counters": self.counters, "peak": self.peak,
        }

    def restore(self, snap: dict) -> None:
        if snap["rule_version"] != self.rule_version:
            raise ValueError(f"checkpoint rule version {snap['rule_version']} != {self.rule_version}")
        self.lower, self.upper, self.ttl = snap["lower"], snap["upper"], snap["ttl"]
        self.pay_ids = snap["pay_ids"]
        self.sig_ids = snap["sig_ids"]
        self.evicted_max_pay = snap["evicted_max_pay"]
        self.evicted_max_sig = snap["evicted_max_sig"]
        self.dropped_max_pay = snap["dropped_max_pay"]
        self.dropped_max_sig = snap["dropped_max_sig"]
        self.queued_pay = snap["queued_pay"]
        self.queued_sig = snap["queued_sig"]
        self.payment_wm, self.risk_wm, self.seq = snap["payment_wm"], snap["risk_wm"], snap["seq"]
        self._pruned_at = snap["pruned_at"]
        self.identity_retention = snap["identity_retention"]
        self.counters = snap["counters"]
        self.peak = snap["peak"]
        for row in snap["payments"]:
            p = Entry.load(row)
            self.pay.insert(p.key, p.t, p.seq, p, p.size)
            self.pay_live[p.id] = p
            self._pay_heap.append((p.t, p.key))
        for row in snap["signals"]:
            s = Entry.load(row)
            self.sig.insert(s.key, s.t, s.seq, s, s.size)
            self.sig_live[s.id] = s
            self._sig_heap.append((s.t, s.key))
        heapq.heapify(self._pay_heap)
        heapq.heapify(self._sig_heap)
        self._ident_heap = [tuple(x) for x in snap["ident_heap"]]
        heapq.heapify(self._ident_heap)
        self._ttl_heap = [tuple(x) for x in snap["ttl_heap"]]
        heapq.heapify(self._ttl_heap)
