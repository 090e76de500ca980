"""What changed in an operator's state since its last checkpoint.

Most of a long-running ledger's or scorer's state is a map that only grows, or changes a few
entries at a time: the identities kept for duplicate detection, the payments each merchant has
had. Writing all of it at every checkpoint made checkpoints cost the whole state each time
(O(n^2 / interval) over a run). An operator that names such maps (`snapshot_parts`) lets the
host write a checkpoint as the changes since the one before: the rest of its snapshot whole,
and for each named map only the keys changed or deleted, or the items appended to each list.
The host marks the parts (`mark`) once a checkpoint of either kind has taken them.

The owner of a map records what it changes (`RowChanges.changed`); nothing here watches the
map, so a change not recorded would be lost from the next delta: every write to a named map
goes through code that records it (operators.identity for the identities)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class RowChanges:
    """A map whose changed keys its owner records in `changed` whenever it sets, changes or
    deletes one: as an ordered set (a dict of None, each row then read from `rows`), or, with
    `holds_rows`, mapping each key to its row object as `rows` holds it (None once deleted).
    `encode` turns a row into what the snapshot holds for it (the identity of a row
    otherwise).

    `holds_rows` is for an owner that changes its rows in place or through the code that
    records the change, as operators.identity does: a delta then reads no row back from a map
    of every identity, one lookup per changed key into a table far larger than the caches
    (0.75 s of a 1,000,000-payment ledger's checkpoints; docs/performance.md, twentieth
    round)."""

    rows: dict[str, Any]
    changed: dict[str, Any]
    encode: Callable[[Any], Any] | None = None
    holds_rows: bool = False

    def changes(self) -> dict[str, Any]:
        """Key -> its row as the snapshot holds it, or None for a key deleted since the mark."""
        enc = self.encode
        if self.holds_rows:
            return (dict(self.changed) if enc is None else
                    {k: None if row is None else enc(row) for k, row in self.changed.items()})
        rows = self.rows
        out: dict[str, Any] = {}
        for k in self.changed:
            row = rows.get(k)
            out[k] = None if row is None else (row if enc is None else enc(row))
        return out

    def full(self) -> dict[str, Any]:
        """The whole map as the snapshot holds it."""
        enc = self.encode
        return self.rows if enc is None else {k: enc(row) for k, row in self.rows.items()}

    def mark(self) -> None:
        self.changed.clear()


@dataclass(frozen=True, slots=True)
class AppendedItems:
    """A map of lists that only ever grow at their end (no list shrinks or leaves the map).
    `marks` holds each list's length at the last mark."""

    lists: dict[str, list[Any]]
    marks: dict[str, int]

    def changes(self) -> dict[str, list[Any]]:
        """Key -> the items appended to its list since the mark (keys with none left out)."""
        marks = self.marks
        return {k: lst[marks.get(k, 0):] for k, lst in self.lists.items()
                if len(lst) > marks.get(k, 0)}

    def mark(self) -> None:
        self.marks.update((k, len(lst)) for k, lst in self.lists.items())


# What `GroupedRows.changed` gives for a group it holds nothing for.
_UNSEEN: Final[Any] = object()


@dataclass(frozen=True, slots=True)
class GroupedRows:
    """A map of groups, each holding a map of members (a ledger window's payments), written
    as the members changed rather than as every group changed whole. `members` gives a
    group's member map. The owner records, per group key in `changed`, each member it adds at
    the group's end (`member_added`), each member it sets in place or deletes
    (`member_changed`), and that the group was created or dropped (`group_changed`), after
    which the group is written whole, or as None once it is gone.

    What `changed` holds for a group: None, written whole; an int, the index (in the group's
    order) from which its members are the ones added since the mark, no other member having
    changed; or the names of the members changed, as an ordered set (a dict of None). A
    window that has only taken new payments since the mark, the common case by far, is the
    int: nothing is stored per payment, and its delta is the tail of its map. Naming every
    payment was a store into a map of its window's names per payment, cold more often than
    not: 3.0% of a 1,000,000-payment ledger worker's samples, against 0.9% for the lookup
    that is left (py-spy; docs/performance.md, fifty-second round).

    A changed group is `[whole, members]` in a delta: `whole` true when `members` is the
    group's every member (the group starts over from them), false when it holds only the
    members set since the mark, in the order they were first changed, with None for a member
    deleted."""

    groups: dict[str, Any]
    members: Callable[[Any], dict[str, Any]]
    changed: dict[str, dict[str, None] | int | None]

    def member_added(self, group: str, member: str, at: int) -> None:
        """`member` was added at the group's end, at index `at` (the group's member count
        before it)."""
        changed = self.changed
        names = changed.get(group, _UNSEEN)
        if names is _UNSEEN:
            changed[group] = at
        elif names is not None and not isinstance(names, int):
            # Named: one more name. Tracked from an index, or whole: already in what is
            # written.
            names[member] = None

    def member_changed(self, group: str, member: str) -> None:
        """`member` of the group is set in place, or is about to be deleted: called before a
        deletion, while the members added since the mark still stand where the group's index
        says (it is turned into their names then)."""
        changed = self.changed
        names = changed.get(group, _UNSEEN)
        if names is _UNSEEN:
            # Not `setdefault(group, {})`: that makes an empty map on every call.
            changed[group] = {member: None}
        elif names is None:  # the group is written whole
            return
        elif isinstance(names, int):
            named = dict.fromkeys(islice(self.members(self.groups[group]), names, None))
            named[member] = None
            changed[group] = named
        else:
            names[member] = None

    def group_changed(self, group: str) -> None:
        self.changed[group] = None

    def changes(self) -> dict[str, Any]:
        """Group key -> [whole, members] as above, or None for a group dropped since the mark."""
        out: dict[str, Any] = {}
        for k, names in self.changed.items():
            group = self.groups.get(k)
            if group is None:
                out[k] = None
                continue
            members = self.members(group)
            if names is None:
                out[k] = [True, members]
            elif isinstance(names, int):
                # Read back from the end, so only the members added are walked: read from
                # the index on, every member before it was walked too (1,400 windows of 700
                # payments, 1 to 70 added to each: 25 ms against 14).
                added = list(islice(reversed(members.items()), len(members) - names))
                added.reverse()
                out[k] = [False, dict(added)]
            else:
                out[k] = [False, {m: members.get(m) for m in names}]
        return out

    def full(self) -> dict[str, Any]:
        """Every group's member map, by group key."""
        members = self.members
        return {k: members(g) for k, g in self.groups.items()}

    def mark(self) -> None:
        self.changed.clear()


@dataclass(frozen=True, slots=True)
class SnapshotParts:
    """An operator's snapshot split for a delta checkpoint: `whole`, every key of `snapshot()`
    but the named maps, written as it is; `rows` and `appended`, the named maps by their
    snapshot key, written as their changes since the mark."""

    whole: dict[str, Any]
    rows: dict[str, RowChanges] = field(default_factory=dict)
    appended: dict[str, AppendedItems] = field(default_factory=dict)
    grouped: dict[str, GroupedRows] = field(default_factory=dict)

    def full(self) -> dict[str, Any]:
        """The whole snapshot: what `snapshot()` returns and a full checkpoint holds."""
        return {**self.whole, **self.named()}

    def named(self) -> dict[str, Any]:
        """The named maps whole, by their snapshot keys: the snapshot less `whole`."""
        return {**{k: p.full() for k, p in self.rows.items()},
                **{k: p.lists for k, p in self.appended.items()},
                **{k: p.full() for k, p in self.grouped.items()}}

    def entries(self) -> int:
        """How many entries the named maps hold: rows, list items and group members. What a
        full checkpoint's size goes with (`CheckpointChain.wants_full` estimates it from
        this); counted from the maps' and lists' lengths, nothing encoded or walked."""
        rows = sum(len(p.rows) for p in self.rows.values())
        items = sum(len(lst) for p in self.appended.values() for lst in p.lists.values())
        members = sum(len(p.members(g)) for p in self.grouped.values()
                      for g in p.groups.values())
        return rows + items + members

    def changes(self) -> dict[str, dict[str, Any]]:
        out = {"rows": {k: p.changes() for k, p in self.rows.items()},
               "appended": {k: p.changes() for k, p in self.appended.items()}}
        if self.grouped:  # absent otherwise: the deltas of operators without groups unchanged
            out["grouped"] = {k: p.changes() for k, p in self.grouped.items()}
        return out

    def mark(self) -> None:
        for rows in self.rows.values():
            rows.mark()
        for appended in self.appended.values():
            appended.mark()
        for grouped in self.grouped.values():
            grouped.mark()


def apply_changes(snapshot: dict[str, Any], whole: dict[str, Any],
                  changes: dict[str, dict[str, Any]]) -> None:
    """Bring `snapshot` (an earlier full snapshot, changed in place) to the moment of a delta:
    its `whole` keys replace the earlier ones, its row changes set or delete keys of the named
    maps, its appended items extend the named lists, its grouped changes set, start over or
    drop groups and set or delete their members. Raises ValueError on a delta that names a
    map the snapshot does not hold."""
    snapshot.update(whole)
    for name, rows in changes.get("rows", {}).items():
        _set_rows(_named_map(snapshot, name, "changes rows of"), rows)
    for name, appended in changes.get("appended", {}).items():
        target = _named_map(snapshot, name, "appends to")
        for k, items in appended.items():
            target.setdefault(k, []).extend(items)
    for name, grouped in changes.get("grouped", {}).items():
        target = _named_map(snapshot, name, "changes groups of")
        for k, change in grouped.items():
            if change is None:
                target.pop(k, None)
                continue
            replaces_group, members = change
            if replaces_group:
                target[k] = dict(members)
                continue
            group = target.get(k)
            if not isinstance(group, dict):
                raise ValueError(f"the delta changes members of group {k!r} of {name!r}, which "
                                 f"the state does not hold")
            _set_rows(group, members)


def _named_map(snapshot: dict[str, Any], name: str, what: str) -> dict[str, Any]:
    target = snapshot.get(name)
    if not isinstance(target, dict):
        raise ValueError(f"the delta {what} {name!r}, which the state does not hold")
    return target


def _set_rows(target: dict[str, Any], rows: dict[str, Any]) -> None:
    """Set each key to its row, or delete it where the row is None."""
    for k, row in rows.items():
        if row is None:
            target.pop(k, None)
        else:
            target[k] = row
