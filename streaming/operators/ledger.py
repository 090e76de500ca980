"""Account-hour risk ledger as a pure state machine.

Key: (account_id, event hour). Payments are deduplicated by payment_id (identities retained in
the checkpoint) and temporally joined to the merchant category version effective at each
payment's event time. Each window emits revisions under the stable key `account|hour|revision`:

  provisional  when payments_wm >= hour_end
  revised      for each change while payments_wm <  hour_end + retention
  final        once payments_wm >= hour_end + retention (the window then leaves state)

A payment for a final window, a correction touching one, or a category version that changes a
payment of one becomes an HMAC-signed repair request (rebuilt and published by the repair path).
Every decision is taken per record or per watermark step, never per batch, so the revisions do
not depend on batch boundaries or on a throttle."""

from __future__ import annotations

from typing import Any, Final, TypeAlias

import heapq
from collections.abc import Callable, Iterable

from ..collector import UNTRACK_FLAT
from ..contracts import Record
from ..hashing import digest
from ..state import Held
from ..timeutil import NEG_INF, POS_INF, US_PER_HOUR, US_PER_MIN, event_date, us_to_dt, us_to_iso
from .base import (ACCEPTED, AGGREGATE_OVERFLOW, DUPLICATE, ROUTED, STALE, BoundedTexts, Emit,
                   Fact, Quarantined, fits_int64, json_recurring, json_scalar)
from .changes import AppendedItems, GroupedRows, RowChanges, SnapshotParts
from .identity import CONFLICT, CORRECTION, LIVE, IdentityIndex, settle
from .ledger_categories import (CATEGORY, DUPLICATE as VERSION_DUPLICATE, HIGH_RISK, SIZE,
                                CategoryVersions, VersionRejected, version_from_record)

STATE_SCHEMA: Final = "ledger/1"
RULE_VERSION: Final = "ledger-v1:hour"
PAYMENTS: Final = "payments"
CATEGORIES: Final = "merchant_categories"
WATERMARK_DELAY_US: Final = 5 * US_PER_MIN
RETENTION_US: Final = 60 * US_PER_MIN
MAX_BACKLOG_AGE_US: Final = 15 * US_PER_MIN
REPAIR_TABLE: Final = "ledger_repair_requests"
UNCATEGORIZED: Final = "uncategorized"

# Identity row (operators.identity): [revision, payload_hash, account_id, hour_us, merchant_id,
# event_us, where]. The ledger forgets no identity: `by_merchant` finds payments through them.
I_REV: Final = 0
I_HASH: Final = 1
I_ACCOUNT: Final = 2
I_HOUR: Final = 3
I_MERCHANT: Final = 4
I_EVENT: Final = 5
I_WHERE: Final = 6
P_SIZE: Final = 4  # a window payment: [revision, merchant, amount, event_us, source bytes]
ROUTED_WHERE: Final = "routed"

Signer: TypeAlias = Callable[[dict[str, Any]], str]
# The counter each settled identity outcome adds to.
_SETTLED_COUNTER: Final = {DUPLICATE: "duplicates", CONFLICT: "conflicts", STALE: "stale"}


# An hour's label by its start, kept (a bounded store: a recording of more hours starts over).
_HOUR_LABELS: Final = BoundedTexts(4096)  # Final: compiled, a static instead of a module lookup


def hour_label(hour_us: int) -> str:
    # Kept: every payment needs its window key and strftime dominated the operator's cost. A
    # compiled store rather than `lru_cache`: one C lookup where the cache's call was about
    # 550 instructions a payment (docs/performance.md, thirty-first round).
    label = _HOUR_LABELS.get(hour_us)
    if label is not None:
        return label
    return _HOUR_LABELS.keep(hour_us, us_to_dt(hour_us).strftime("%Y-%m-%dT%H:00Z"))


def window_logical_key(account: str, hour_us: int) -> str:
    return f"{account}|{hour_label(hour_us)}"


def window_fact_key(account: str, hour_us: int, revision: int) -> str:
    return f"{account}|{hour_label(hour_us)}|{revision}"


def window_content(account: str, hour_us: int, payments: Iterable[tuple[str, int, int]],
                   cats: CategoryVersions) -> dict[str, Any]:
    """Business content of a window from its payments [(merchant, amount_cents, event_us)]:
    the one aggregation used live and by the repair rebuild."""
    total = 0
    count = 0
    risk = 0
    by_cat: dict[str, int] = {}
    for merchant, amount, t in payments:
        total += amount
        count += 1
        v = cats.effective(merchant, t)
        if v is None:
            name = UNCATEGORIZED
        else:
            name = v[CATEGORY]
            if v[HIGH_RISK]:
                risk += 1
        by_cat[name] = by_cat.get(name, 0) + 1
    return {"account_id": account, "event_hour": hour_label(hour_us), "total_cents": total,
            "payment_count": count, "risk_count": risk,
            "category_counts": dict(sorted(by_cat.items()))}


# A window's canonical documents (sorted keys, compact), written member by member rather than
# built as dicts for orjson to sort and walk: a revision took two dicts and two encodings, one
# for the content's hash and one for the fact, about half of what publishing it cost
# (docs/performance.md, thirty-first round). The content and the fact share every member up to
# "payment_count"; the fact adds "revision" and "status" at their places in key order.
# Integers are their decimal digits (the overflow guard keeps every total in the 64-bit range
# orjson allows), texts as canonical JSON spells them (`json_scalar`; `json_recurring` for
# categories and statuses), and an hour's label needs no escaping.
# tests/test_ledger_fact_encoding.py checks both against orjson's sorted encoding of the dicts.
def window_head(account: str, hour_us: int, count: int, by_cat: dict[str, int]) -> str:
    """The members both documents of a window begin with, through "payment_count". (The
    category names sorted alone: sorting the (name, count) pairs compared tuples.)"""
    cats = ",".join([f"{json_recurring(name)}:{by_cat[name]}" for name in sorted(by_cat)])
    return (f'{{"account_id":{json_scalar(account)},"category_counts":{{{cats}}},'
            f'"event_hour":"{hour_label(hour_us)}","payment_count":{count},')


def content_json(head: str, risk: int, total: int) -> str:
    """The content's document: what a revision's content hash is taken over."""
    return f'{head}"risk_count":{risk},"total_cents":{total}}}'


def window_fact(account: str, hour_us: int, revision: int, status: str,
                content: dict[str, Any]) -> Fact:
    """The fact of a window's revision from its content (`window_content`)."""
    head = window_head(account, hour_us, content["payment_count"], content["category_counts"])
    return _window_fact(account, hour_us, window_logical_key(account, hour_us), revision,
                        status, head, content["risk_count"], content["total_cents"])


def _window_fact(account: str, hour_us: int, key: str, revision: int, status: str, head: str,
                 risk: int, total: int) -> Fact:
    """`key`: the window's logical key (an open window holds it; composed again it cost a
    new text per revision)."""
    text = (f'{head}"revision":{revision},"risk_count":{risk},'
            f'"status":{json_recurring(status)},"total_cents":{total}}}')
    pred = window_fact_key(account, hour_us, revision - 1) if revision > 1 else None
    # The fact carries its text only: `payload` is decoded from it when something reads it.
    return Fact(window_fact_key(account, hour_us, revision), "window", key, status, None,
                digest(text), pred, text)


class Window:
    """One account-hour window: its payments and their aggregates, kept up to date as payments
    arrive, leave and change category, so publishing a revision costs O(1) rather than a pass
    over the window (the aggregates always equal `window_content` over `payments`)."""

    __slots__ = ("account", "hour", "key", "payments", "revision", "content_hash", "status",
                 "total", "risk", "by_cat", "cls", "size")

    def __init__(self, account: str, hour: int):
        self.account = account
        self.hour = hour
        self.key = window_logical_key(account, hour)
        # payment_id -> [revision, merchant, amount, event_us, source bytes]
        self.payments: dict[str, list[Any]] = {}
        self.revision = 0
        self.content_hash = ""
        self.status = "open"
        self.total = 0
        self.risk = 0
        self.by_cat: dict[str, int] = {}  # category -> payments (names with none are absent)
        # payment_id -> the category version it was counted under (None: uncategorized). The
        # version itself, not a (category, high risk) pair made per payment: a version's
        # category and risk never change (another content under its ID is refused).
        self.cls: dict[str, list[Any] | None] = {}
        # The payments' source bytes, kept as they come and go: a window leaving state
        # releases them without a pass over payments long out of the caches.
        self.size = 0

    def add(self, pid: str, entry: list[Any], version: list[Any] | None) -> int:
        """Add a payment [revision, merchant, amount, event_us, source bytes] under its
        effective version; the payment is not in the window. Returns its index in the
        window's order, at the end (what a delta of the window's payments reads,
        `GroupedRows.member_added`). Out of the cyclic collector's sight: a window keeps its
        payments until it is final (streaming.collector)."""
        payments = self.payments
        at = len(payments)
        payments[pid] = entry
        untrack = UNTRACK_FLAT
        if untrack is not None:
            untrack(entry)
        # The entry's ints read as ints: added to the int totals as they come out of the list
        # (typed Any), each sum was the generic one, after boxing the total (callgrind).
        amount: int = entry[2]
        size: int = entry[P_SIZE]
        self.total += amount
        self.size += size
        self._classify(pid, version)
        return at

    def remove(self, pid: str) -> list[Any]:
        entry = self.payments.pop(pid)
        amount: int = entry[2]
        size: int = entry[P_SIZE]
        self.total -= amount
        self.size -= size
        self._unclassify(pid)
        return entry

    def held_bytes(self) -> int:
        """The source bytes of the window's payments."""
        return self.size

    def reclassify(self, pid: str, version: list[Any] | None) -> None:
        """A category version changed which version holds this payment's event time."""
        self._unclassify(pid)
        self._classify(pid, version)

    def _classify(self, pid: str, version: list[Any] | None) -> None:
        self.cls[pid] = version
        if version is None:
            self.by_cat[UNCATEGORIZED] = self.by_cat.get(UNCATEGORIZED, 0) + 1
            return
        name: str = version[CATEGORY]
        self.by_cat[name] = self.by_cat.get(name, 0) + 1
        if version[HIGH_RISK]:
            self.risk += 1

    def _unclassify(self, pid: str) -> None:
        version = self.cls.pop(pid)
        name: str = UNCATEGORIZED if version is None else version[CATEGORY]
        n = self.by_cat[name] - 1
        if n:
            self.by_cat[name] = n
        else:
            del self.by_cat[name]
        if version is not None and version[HIGH_RISK]:
            self.risk -= 1

    def content(self) -> dict[str, Any]:
        """The same dict `window_content` computes over this window's payments."""
        return {"account_id": self.account, "event_hour": hour_label(self.hour),
                "total_cents": self.total, "payment_count": len(self.payments),
                "risk_count": self.risk, "category_counts": dict(sorted(self.by_cat.items()))}

    def header(self) -> list[Any]:
        """The window as its checkpoint row holds it; its payments are checkpointed apart
        (`LedgerOperator.snapshot_parts`)."""
        return [self.account, self.hour, self.revision, self.content_hash, self.status]

    @classmethod
    def load(cls, row: list[Any], payments: dict[str, list[Any]] | None,
             cats: CategoryVersions) -> Window:
        """A window from its checkpoint row and its payments; the aggregates are recomputed
        from the payments under the restored category versions (they are derived, so not
        checkpointed). `payments` None: a row checkpointed before the payments were kept
        apart, [account, hour, payments, revision, content hash, status]."""
        if payments is None:
            payments, row = row[2], [*row[:2], *row[3:]]
        w = cls(row[0], row[1])
        for pid, entry in payments.items():
            # Entries checkpointed before they carried their source bytes count none.
            w.add(pid, [*entry, 0] if len(entry) == P_SIZE else list(entry),
                  cats.effective(entry[1], entry[3]))
        w.revision, w.content_hash, w.status = row[2], row[3], row[4]
        return w


def _payments_of(w: Window) -> dict[str, list[Any]]:
    return w.payments


class LedgerOperator:
    pipeline = "ledger"
    state_schema = STATE_SCHEMA
    rule_version = RULE_VERSION

    def __init__(self, signer: Signer, key_source: str, retention_us: int = RETENTION_US):
        self.sign = signer
        self.key_source = key_source
        self.retention = retention_us
        self.cats = CategoryVersions()
        self.ids = IdentityIndex(time_slot=I_EVENT, where_slot=I_WHERE, track_changes=True)
        self.by_merchant: dict[str, list[str]] = {}
        # Each account and merchant, and each hour, once (`_shared`): texts and ints apart, so
        # the texts' map keeps CPython's lookup for text keys, and the hour a payment falls in
        # is, most of the time, the one before it (`_hour`).
        self._texts: dict[str, str] = {}
        self._hours: dict[int, Any] = {}
        self._last_hour = NEG_INF
        self._last_hour_value: Any = None
        self._merchant_marks: dict[str, int] = {}  # by_merchant's lengths at the last checkpoint
        self.windows: dict[str, Window] = {}
        # Each account's latest opened window as (hour, its logical key): the key of a payment
        # in that hour without composing it again (`_window_key`). Derived, not checkpointed.
        # The hour typed int: compared with a payment's as machine integers, where an object
        # there was compared through the generic path after boxing the payment's (callgrind).
        self._latest_keys: dict[str, tuple[int, str]] = {}
        # The keys of the windows changed, published or closed since the last checkpoint
        # (operators.changes): every change to a window goes through `_changed` or `_emit`.
        self._windows_changed: dict[str, None] = {}
        # And the payments each window gained or lost since then, or that it was opened or
        # closed: every `Window.add` and `Window.remove` of an open window records its payment
        # here, `_window` records an opening and `_advance` a closing.
        self._payments = GroupedRows(self.windows, _payments_of, {})
        self.held = Held()  # payments in open windows and category versions
        self.wm = NEG_INF
        self._due_provisional: list[tuple[int, str]] = []
        self._due_final: list[tuple[int, str]] = []
        # The counters by name (`counters`). The one counted per payment is a machine int
        # beside the map and written into it when the map is read: counted in the map, it was a
        # lookup, a generic addition and a store, about 490 instructions a payment (callgrind,
        # docs/performance.md, fiftieth round).
        self._payments_accepted = 0
        self._counters = {"payments_accepted": 0, "duplicates": 0, "conflicts": 0, "stale": 0,
                          "corrections_live": 0, "routed_payments": 0, "category_versions": 0,
                          "category_rejected": 0, "category_routed": 0, "repair_requests": 0,
                          "revisions": 0, "provisional": 0, "revised": 0, "final": 0}
        self.peak = {"open_windows": 0}

    @property
    def counters(self) -> dict[str, int]:
        """The counters by name, as the metrics and the checkpoint read them."""
        counters = self._counters
        counters["payments_accepted"] = self._payments_accepted
        return counters

    # ------------------------------------------------------------------ helpers
    def _shared(self, row: list[Any]) -> None:
        """An identity row made to hold the one object of its account, merchant and hour
        (`_texts`, `_hours`), as the live path builds it. The ledger keeps every identity for
        good, and decoding (or a restore) gives each payment its own copies of these few
        values: shared, a 1,000,000-payment run holds about 140 MB less (660 MB against 797),
        and a checkpoint encodes the identities about a tenth faster, as it touches fewer
        scattered objects, for about 1% more instructions per payment (docs/performance.md,
        eighteenth round). The values are typed Any where they are kept: the compiled core
        would box a new int object from an int-typed hour."""
        texts = self._texts
        for slot in (I_ACCOUNT, I_MERCHANT):
            v = row[slot]
            row[slot] = texts.setdefault(v, v)
        row[I_HOUR] = self._hour(row[I_HOUR])

    def _hour(self, h: int) -> Any:
        """The one object of hour `h` (`_shared`). Payments come mostly in time order, so the
        last hour asked for is compared first, as native ints: no boxing and no lookup."""
        if h == self._last_hour:
            return self._last_hour_value
        v = self._hours.setdefault(h, h)
        self._last_hour, self._last_hour_value = h, v
        return v

    def _is_final(self, hour_us: int) -> bool:
        return self.wm >= hour_us + US_PER_HOUR + self.retention

    def _window_key(self, account: str, hour_us: int) -> str:
        """`window_logical_key(account, hour_us)`, the text the account's latest opened window
        already holds when the payment falls in its hour (nearly every payment: an account's
        payments come hour after hour). Composed, the key cost about 1,000 instructions a
        payment; found here, about 500 (docs/performance.md, thirty-third round)."""
        latest = self._latest_keys.get(account)
        if latest is not None and latest[0] == hour_us:
            return latest[1]
        return window_logical_key(account, hour_us)

    def _window(self, account: str, hour_us: int, key: str | None = None) -> Window:
        """The open window of (account, hour), created if new; `key` is its logical key when
        the caller has it already."""
        k = key or window_logical_key(account, hour_us)
        w = self.windows.get(k)
        if w is None:
            w = self.windows[k] = Window(account, hour_us)
            self._latest_keys[account] = (hour_us, w.key)
            self._payments.group_changed(k)
            heapq.heappush(self._due_provisional, (hour_us + US_PER_HOUR, k))
            heapq.heappush(self._due_final, (hour_us + US_PER_HOUR + self.retention, k))
            if len(self.windows) > self.peak["open_windows"]:
                self.peak["open_windows"] = len(self.windows)
        return w

    def _mark_changed(self, key: str) -> None:
        """Window `key` changed since the last checkpoint. Most payments fall in a window
        marked already: looked up, not stored again (storing a present key cost about 210
        instructions, twice a lookup; callgrind). The first mark fixes its place in the
        order either way."""
        changed = self._windows_changed
        if key not in changed:
            changed[key] = None

    def _emit(self, w: Window, status: str, out: Emit, force: bool = False) -> None:
        self._mark_changed(w.key)
        head = window_head(w.account, w.hour, len(w.payments), w.by_cat)
        h = digest(content_json(head, w.risk, w.total))
        if h == w.content_hash and not force:
            return
        w.revision += 1
        w.content_hash = h
        w.status = status
        out.fact(_window_fact(w.account, w.hour, w.key, w.revision, status, head, w.risk,
                              w.total))
        self._counters["revisions"] += 1
        self._counters[status] += 1

    def _changed(self, w: Window, out: Emit) -> None:
        """A window's payments or categories changed: published windows get a new revision."""
        if w.revision > 0:
            self._emit(w, "revised", out)
        elif self.wm >= w.hour + US_PER_HOUR:
            self._emit(w, "provisional", out)
        else:
            self._mark_changed(w.key)  # `_emit` marks the windows it publishes

    def _request(self, rec: Record, kind: str, account: str, hour_us: int, reason: str,
                 out: Emit) -> None:
        body = {"request_id": f"{kind}|{account}|{hour_label(hour_us)}|{rec.topic}:"
                              f"{rec.partition}:{rec.offset}",
                "kind": kind, "account_id": account, "event_hour": hour_label(hour_us),
                "hour_us": hour_us, "topic": rec.topic, "partition": rec.partition,
                "offset": rec.offset, "subject_id": rec.id, "subject_revision": rec.revision,
                "subject_hash": rec.payload_hash, "reason": reason, "watermark_us": self.wm}
        out.add_extra(REPAIR_TABLE, {**body, "queue_date": event_date(hour_us),
                                     "signature": self.sign(body), "key_source": self.key_source,
                                     "status": "pending", "status_reason": None,
                                     "corrected_fact_key": None, "repaired_at": None})
        self._counters["repair_requests"] += 1

    # ------------------------------------------------------------------ records
    def on_record(self, rec: Record, out: Emit) -> None:
        if rec.topic == PAYMENTS:
            self._on_payment(rec, out)
        else:
            self._on_category(rec, out)

    def _on_payment(self, rec: Record, out: Emit) -> None:
        what, known = self.ids.classify(rec)
        if known is not None and what != CORRECTION:
            # A duplicate, stale or conflicting version: it keeps nothing of its own.
            self._counters[_SETTLED_COUNTER[what]] += 1
            settle(what, rec, out)
            return
        p = rec.payload
        # The account, merchant and hour as their one object, however many identities and
        # window payments hold them: `_shared` says why.
        texts = self._texts
        a, m = p["account_id"], p["merchant_id"]
        account: str = texts.setdefault(a, a)
        merchant: str = texts.setdefault(m, m)
        t = rec.event_us
        hour: Any = self._hour(t - t % US_PER_HOUR)
        if known is not None:
            self._correct(rec, known, account, merchant, hour, out)
            return
        if self._is_final(hour):
            self._route(rec, account, merchant, hour, [(account, hour)], "beyond_retention", out)
            return
        # Once per payment: the overflow check and the window's update both need it.
        key = self._window_key(account, hour)
        w = self.windows.get(key)
        amount: Any = p["amount_cents"]  # read once: the check and the window's entry
        if self._overflows_in(w, amount):
            self._route(rec, account, merchant, hour, [(account, hour)], AGGREGATE_OVERFLOW, out)
            return
        # The event time boxed once (compiled, each use of the int would box a new object):
        # the identity row and the window's entry hold the one object.
        event_us: Any = t
        self.ids.remember(rec.id, [rec.revision, rec.payload_hash, account, hour, merchant,
                                   event_us, LIVE])
        self.by_merchant.setdefault(merchant, []).append(rec.id)
        self._payments_accepted += 1
        out.disposition(rec, ACCEPTED)
        if w is None:
            w = self._window(account, hour, key)
        at = w.add(rec.id, [rec.revision, merchant, amount, event_us, rec.size],
                   self.cats.effective(merchant, t))
        self._payments.member_added(key, rec.id, at)
        self.held.hold(rec.size)
        self._changed(w, out)

    def _overflows(self, account: str, hour: int, amount: int, leaving: str | None = None
                   ) -> bool:
        """Would adding `amount` (and taking payment `leaving` out) push the window of
        (account, hour) out of the 64-bit range?"""
        return self._overflows_in(self.windows.get(window_logical_key(account, hour)), amount,
                                  leaving)

    def _overflows_in(self, w: Window | None, amount: int, leaving: str | None = None) -> bool:
        """The same for the open window `w` (None: not open yet, so `amount` alone)."""
        if w is None:
            return not fits_int64(amount)
        total = w.total + amount
        if leaving is not None and leaving in w.payments:
            total -= w.payments[leaving][2]
        return not fits_int64(total)

    # `hour` is typed Any in `_route` and `_correct`: typed int, the compiled core would box a
    # new object for the identity row instead of passing the shared one (`_shared`).
    def _route(self, rec: Record, account: str, merchant: str, hour: Any,
               windows: list[tuple[str, int]], reason: str, out: Emit) -> None:
        if rec.id not in self.ids or self.ids[rec.id][I_MERCHANT] != merchant:
            self.by_merchant.setdefault(merchant, []).append(rec.id)
        self.ids.remember(rec.id, [rec.revision, rec.payload_hash, account, hour, merchant,
                                   rec.event_us, ROUTED_WHERE])
        self._counters["routed_payments"] += 1
        out.disposition(rec, ROUTED)
        for acct, h in dict.fromkeys(windows):
            self._request(rec, "payment", acct, h, reason, out)

    def _correct(self, rec: Record, known: list[Any], account: str, merchant: str, hour: Any,
                 out: Emit) -> None:
        """A higher revision replaces the payment's amount and merchant (and, if it moved, its
        window). Live only when the old and the new window are both open."""
        old_key = (known[I_ACCOUNT], known[I_HOUR])
        targets = [old_key, (account, hour)]
        if known[I_WHERE] == ROUTED_WHERE:
            self._route(rec, account, merchant, hour, targets, "correction_of_routed_payment",
                        out)
            return
        if self._is_final(known[I_HOUR]) or self._is_final(hour):
            self._route(rec, account, merchant, hour, targets, "correction_beyond_retention", out)
            return
        if self._overflows(account, hour, rec.payload["amount_cents"], leaving=rec.id):
            self._route(rec, account, merchant, hour, targets, AGGREGATE_OVERFLOW, out)
            return
        self._counters["corrections_live"] += 1
        out.disposition(rec, ACCEPTED)
        old_w = self.windows[window_logical_key(*old_key)]
        self._payments.member_changed(old_w.key, rec.id)  # before the removal: see there
        self.held.release(old_w.remove(rec.id)[P_SIZE])
        if merchant != known[I_MERCHANT]:
            self.by_merchant.setdefault(merchant, []).append(rec.id)
        self.ids.remember(rec.id, [rec.revision, rec.payload_hash, account, hour, merchant,
                                   rec.event_us, LIVE])
        new_w = self._window(account, hour)
        at = new_w.add(rec.id, [rec.revision, merchant, rec.payload["amount_cents"],
                                rec.event_us, rec.size],
                       self.cats.effective(merchant, rec.event_us))
        self._payments.member_added(new_w.key, rec.id, at)
        self.held.hold(rec.size)
        self._changed(old_w, out)
        if new_w is not old_w:
            self._changed(new_w, out)

    def _on_category(self, rec: Record, out: Emit) -> None:
        merchant, v = version_from_record(rec)
        try:
            verdict = self.cats.check(merchant, v)
        except VersionRejected as exc:
            self._counters["category_rejected"] += 1
            out.quarantine.append(Quarantined(rec.topic, rec.partition, rec.offset, exc.reason,
                                              exc.detail, ""))
            return
        if verdict == VERSION_DUPLICATE:
            self._counters["duplicates"] += 1
            out.disposition(rec, DUPLICATE)
            return
        # Payments of this merchant at or after the version's start may change category.
        f = v[0]
        before: dict[str, tuple[Any, ...] | None] = {}
        for pid in self.by_merchant.get(merchant, ()):
            ident = self.ids[pid]
            if ident[I_MERCHANT] != merchant or ident[I_EVENT] < f or ident[I_WHERE] != LIVE:
                continue
            e = self.cats.effective(merchant, ident[I_EVENT])
            before[pid] = (e[CATEGORY], e[HIGH_RISK]) if e else None
        self.cats.add(merchant, v)
        self.held.hold(v[SIZE])
        self._counters["category_versions"] += 1
        open_changed: dict[str, Window] = {}
        final_changed: dict[tuple[str, int], None] = {}
        for pid, old in before.items():
            ident = self.ids[pid]
            e = self.cats.effective(merchant, ident[I_EVENT])
            if ((e[CATEGORY], e[HIGH_RISK]) if e else None) == old:
                continue
            wk = window_logical_key(ident[I_ACCOUNT], ident[I_HOUR])
            w = self.windows.get(wk)
            if w is not None:
                # A version only changes payments at or after its start (`before` holds them
                # all), so updating these keeps the window's aggregates exact.
                w.reclassify(pid, e)
                open_changed[wk] = w
            else:
                final_changed[(ident[I_ACCOUNT], ident[I_HOUR])] = None
        for wk in sorted(open_changed):
            self._changed(open_changed[wk], out)
        if final_changed:
            self._counters["category_routed"] += 1
            out.disposition(rec, ROUTED)
            for acct, h in sorted(final_changed):
                self._request(rec, "category", acct, h, "category_change_for_final_window", out)
        else:
            out.disposition(rec, ACCEPTED)

    # ------------------------------------------------------------------ time
    def on_watermark(self, topic: str, wm: int, out: Emit) -> None:
        if topic != PAYMENTS or wm <= self.wm:
            return
        self.wm = wm
        self._advance(out)

    def _advance(self, out: Emit) -> None:
        due_p, due_f = self._due_provisional, self._due_final
        wm = self.wm
        while due_p and due_p[0][0] <= wm:
            _, k = heapq.heappop(due_p)
            w = self.windows.get(k)
            if w is not None and w.revision == 0 and not self._is_final(w.hour):
                self._emit(w, "provisional", out, force=True)
        while due_f and due_f[0][0] <= wm:
            _, k = heapq.heappop(due_f)
            w = self.windows.pop(k, None)
            if w is not None:
                self._emit(w, "final", out, force=True)  # and marked changed: it left state
                self._payments.group_changed(k)
                self.held.release(w.held_bytes(), len(w.payments))

    # Windows close on the payments watermark only, never on a clock: the host need not call
    # on_clock.
    clocked = False

    def on_clock(self, clock_us: int, out: Emit) -> None:
        return None

    def on_end_of_stream(self, out: Emit) -> None:
        self.wm = POS_INF
        self._advance(out)

    # ------------------------------------------------------------------ observability
    def state_metrics(self) -> dict[str, Any]:
        payments = sum(len(w.payments) for w in self.windows.values())
        return {"state_records": len(self.ids) + payments + len(self.cats),
                "state_bytes": self.held.bytes, "open_windows": len(self.windows),
                "open_window_payments": payments, "identities": len(self.ids),
                "category_versions": len(self.cats), "payments_wm": us_to_iso(self.wm),
                "peak": dict(self.peak), **self.counters}

    # ------------------------------------------------------------------ checkpoint
    def snapshot(self) -> dict[str, Any]:
        return self.snapshot_parts().full()

    def snapshot_parts(self) -> SnapshotParts:
        """The snapshot split for a delta checkpoint: the identities (every payment ever seen,
        by far the largest part) as those remembered since the last checkpoint, the windows as
        those changed, published or closed since, the windows' payments as those each window
        gained or lost since (a window opened or closed since, whole), and each merchant's
        payments as those appended since (its list only grows)."""
        whole = {"rule_version": RULE_VERSION, "retention_us": self.retention, "wm": self.wm,
                 "categories": self.cats.snapshot(), "counters": self.counters,
                 "peak": self.peak}
        assert self.ids.changed is not None  # tracked since __init__ and restore
        return SnapshotParts(
            whole, rows={"ids": RowChanges(self.ids.rows, self.ids.changed, holds_rows=True),
                         "windows": RowChanges(self.windows, self._windows_changed,
                                               Window.header)},
            appended={"by_merchant": AppendedItems(self.by_merchant, self._merchant_marks)},
            grouped={"window_payments": self._payments})

    def restore(self, snap: dict[str, Any]) -> None:
        if snap["rule_version"] != RULE_VERSION:
            raise ValueError(f"checkpoint rule version {snap['rule_version']} != {RULE_VERSION}")
        self.retention = snap["retention_us"]
        self.wm = snap["wm"]
        self.ids = IdentityIndex(time_slot=I_EVENT, where_slot=I_WHERE, track_changes=True)
        self.ids.load(snap["ids"], [])
        self._texts = {}
        self._hours = {}
        self._last_hour, self._last_hour_value = NEG_INF, None
        for row in self.ids.rows.values():
            self._shared(row)
        self._latest_keys = {}
        self.by_merchant = {k: list(v) for k, v in snap["by_merchant"].items()}
        self._merchant_marks = {k: len(v) for k, v in self.by_merchant.items()}
        self.cats = CategoryVersions.restore(snap["categories"])
        self._counters = dict(snap["counters"])
        self._payments_accepted = self._counters["payments_accepted"]
        self.peak = dict(snap["peak"])
        self.windows = {}
        self._due_provisional = []
        self._due_final = []
        self.held = Held()
        for versions in self.cats.by_merchant.values():
            for v in versions:
                self.held.hold(v[SIZE] if len(v) > SIZE else 0)
        self._windows_changed = {}
        self._payments = GroupedRows(self.windows, _payments_of, {})
        # Keyed by window since delta checkpoints, a list in checkpoints written before; the
        # payments apart since the ninth round, inside each window's row before.
        rows = snap["windows"]
        payments = snap.get("window_payments")
        keyed = rows.items() if isinstance(rows, dict) else ((None, row) for row in rows)
        for key, row in keyed:
            w = Window.load(row, None if payments is None else payments[key], self.cats)
            self.held.hold(w.held_bytes(), len(w.payments))
            k = w.key
            self.windows[k] = w
            if w.revision == 0:
                self._due_provisional.append((w.hour + US_PER_HOUR, k))
            self._due_final.append((w.hour + US_PER_HOUR + self.retention, k))
        heapq.heapify(self._due_provisional)
        heapq.heapify(self._due_final)
