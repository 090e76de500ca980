"""Record identity, the one definition the operators share.

Every operator remembers, per event ID, the latest version it has seen: its revision and the
hash of its canonical payload, followed by whatever the operator needs to find that version
again (its key, its event time, where it is now). An incoming record is then exactly one of

  new          the ID was never seen (or its identity was evicted)
  duplicate    the same revision with the same content: a redelivery, adds nothing
  conflict     the same revision with other content: quarantined as `conflicting_duplicate`
  stale        a lower revision than the one seen: superseded, adds nothing
  correction   a higher revision: the operator applies or routes the change

Remembered identities are evicted by event time: the operator names an identity a candidate
once it may be forgotten (it left live state, or it was taken at all when nothing else holds
it), and `evict_before` forgets the candidates older than a bound. A candidate whose row
changed since (a newer version at another time, or live again) is kept: it was named again
when it changed, if it may be forgotten at all.

Rows are plain lists, `[revision, payload_hash, *operator fields]`, so an operator's
checkpoint holds them as they are."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from ..collector import UNTRACK_FLAT
from ..contracts import Record
from ..state import TimeQueue
from .base import DUPLICATE, STALE, Emit, Quarantined

# Every row starts with these; the operator's fields follow.
REV: Final = 0
HASH: Final = 1

NEW: Final = "new"
CONFLICT: Final = "conflicting_duplicate"
CORRECTION: Final = "correction"
# DUPLICATE and STALE are the dispositions of the same names (operators.base).

LIVE: Final = "live"  # the `where` value of an identity whose version is held in live state


class IdentityIndex:
    """Event ID -> `[revision, payload_hash, *fields]` of the latest version seen, with the
    eviction candidates ordered by event time.

    `time_slot` is the row field holding the version's event time; `where_slot`, when given,
    the field saying where the version is: a row whose `where` is LIVE is never evicted."""

    __slots__ = ("rows", "time_slot", "where_slot", "candidates", "changed")

    def __init__(self, time_slot: int, where_slot: int | None = None,
                 track_changes: bool = False, ordered_candidates: bool = False) -> None:
        self.rows: dict[str, list[Any]] = {}
        self.time_slot = time_slot
        self.where_slot = where_slot
        # (event time, id); `ordered_candidates` when they are named mostly in time order (an
        # operator naming them as its entries leave state: see TimeQueue).
        self.candidates = TimeQueue(mostly_ordered=ordered_candidates)
        # With `track_changes`: the IDs remembered, changed or forgotten since the operator's
        # last checkpoint took them (operators.changes), in the order first changed, each with
        # its row as it stands (the row object `rows` holds; None once forgotten). Every change
        # to a row goes through this class, so this is the `RowChanges` of `rows` with
        # `holds_rows`.
        self.changed: dict[str, list[Any] | None] | None = {} if track_changes else None

    # ------------------------------------------------------------------ lookup
    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, eid: object) -> bool:
        return eid in self.rows

    def __getitem__(self, eid: str) -> list[Any]:
        return self.rows[eid]

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def get(self, eid: str) -> list[Any] | None:
        return self.rows.get(eid)

    def classify(self, rec: Record) -> tuple[str, list[Any] | None]:
        """(outcome, the remembered row or None for a new ID)."""
        row = self.rows.get(rec.id)
        if row is None:
            return NEW, None
        rev = row[REV]
        if rec.revision == rev:
            return (DUPLICATE if rec.payload_hash == row[HASH] else CONFLICT), row
        if rec.revision < rev:
            return STALE, row
        return CORRECTION, row

    # ------------------------------------------------------------------ change
    def remember(self, eid: str, row: list[Any]) -> None:
        """`row` is now the latest version of `eid`. Out of the cyclic collector's sight: the
        index keeps it for as long as the identity is remembered (streaming.collector)."""
        self.rows[eid] = row
        untrack = UNTRACK_FLAT
        if untrack is not None:
            untrack(row)
        if self.changed is not None:
            self.changed[eid] = row

    def may_forget(self, eid: str, t: Any) -> None:
        """The identity of `eid` at event time t may be forgotten once t is below the bound
        given to `evict_before`. (t typed Any: the queue keeps the caller's int object, as
        TimeQueue.push does, instead of a new one boxed by compiled code.)"""
        self.candidates.push(t, eid)

    def left_state(self, eid: str, rev: int, where: Any) -> None:
        """Version `rev` of `eid` left live state (`where` says where it went): if it is still
        the latest seen, it is marked so and named a candidate at its event time. One version a
        call: an operator evicting several calls it for each as it walks them, where a list of
        (id, revision) tuples built for one call cost the tuples and the list (callgrind,
        fifty-fifth round)."""
        ws = self.where_slot
        if ws is None:
            raise ValueError("left_state needs an index with a where slot")
        row = self.rows.get(eid)
        if row is None:
            return
        # The row's revision read as an int: compared as the object it is, the comparison
        # was the interpreter's generic one (callgrind, fifty-second round).
        row_rev: int = row[REV]
        if row_rev == rev:
            row[ws] = where
            # Called on the queue, not through a bound method taken once: compiled, the
            # method is then a direct call, where the bound one was a generic attribute
            # lookup and a call through the interpreter's protocol (callgrind).
            self.candidates.push(row[self.time_slot], eid)
            changed = self.changed
            if changed is not None:
                changed[eid] = row

    def evict_before(self, bound: int) -> int:
        """Forget the candidates with event time < bound whose rows are as they were when
        named (same event time, not live). Returns how many were forgotten."""
        queue, rows = self.candidates, self.rows
        ts, ws = self.time_slot, self.where_slot
        changed = self.changed
        forgotten = 0
        if not queue.has_before(bound):
            return 0
        # Taken in one call (forgetting pushes nothing into the queue), each ID beside its time.
        eids: list[str] = []
        times: list[int] = []
        queue.take_before(bound, eids, times)
        for i in range(len(eids)):
            eid = eids[i]
            row = rows.get(eid)
            if row is None:
                continue
            row_t: int = row[ts]  # as an int: see `left_state`
            if row_t != times[i]:
                continue
            if ws is not None:
                where: str = row[ws]  # as a str: compared in C, not by the generic protocol
                if where == LIVE:
                    continue
            del rows[eid]
            if changed is not None:
                changed[eid] = None
            forgotten += 1
        return forgotten

    # ------------------------------------------------------------------ checkpoint
    def load(self, rows: dict[str, list[Any]], candidates: list[tuple[int, str]]) -> None:
        """Restore rows and eviction candidates from a checkpoint (which holds them all: no
        change since it is left to record)."""
        self.rows = {k: list(v) for k, v in rows.items()}
        untrack = UNTRACK_FLAT
        if untrack is not None:
            for row in self.rows.values():
                untrack(row)
        self.candidates = TimeQueue(candidates, self.candidates.mostly_ordered)
        if self.changed is not None:
            self.changed.clear()


def settle(outcome: str, rec: Record, out: Emit, conflict_detail: str | None = None) -> bool:
    """Emit what a duplicate, a stale version or a conflict ends with; True when `outcome` was
    one of those (the record is done), False for NEW and CORRECTION."""
    if outcome == DUPLICATE or outcome == STALE:
        out.disposition(rec, outcome)
        return True
    if outcome == CONFLICT:
        out.quarantine.append(Quarantined(
            rec.topic, rec.partition, rec.offset, CONFLICT,
            conflict_detail or f"{rec.id} revision {rec.revision} was seen with other content",
            ""))
        return True
    return False
