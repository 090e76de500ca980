"""Delta snapshots (operators.changes): the changes an operator records since its last
checkpoint, applied to the full snapshot before them, give exactly its snapshot now, however
records, corrections, forgetting and checkpoints interleave; and an operator restored from that
state goes on exactly as the one that never stopped."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riskstream_tools.workloads.ledger_seed import at, payment, version
from streaming.models.registry import INITIAL_ARTIFACT, Model
from streaming.operators.base import Emit
from streaming.operators.changes import (AppendedItems, GroupedRows, RowChanges, SnapshotParts,
                                         apply_changes)
from streaming.operators.ledger import LedgerOperator
from streaming.operators.receipts import ReceiptScorer

from .ledgerutil import TEST_KEY, Driver
from .receiptsutil import rcpt, record
from .test_receipts_operator import wm


def as_stored(obj: Any) -> Any:
    """What a checkpoint gives back: the JSON round trip."""
    return orjson.loads(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))


def test_row_changes_name_set_changed_and_deleted_keys_once_in_first_order():
    rows = {"a": [1], "b": [2]}
    changed: dict[str, None] = {}
    part = RowChanges(rows, changed, encode=lambda r: r[0])
    rows["c"] = [3]
    changed["c"] = None
    rows["a"][0] = 10
    changed["a"] = None
    del rows["b"]
    changed["b"] = None
    changed["c"] = None  # changed again: still once, in its first place
    assert list(part.changes().items()) == [("c", 3), ("a", 10), ("b", None)]
    part.mark()
    assert part.changes() == {} and changed == {}


def test_identity_changes_carry_each_row_as_it_stands_without_reading_the_map_back():
    """The identity index records each changed ID with its row object (`holds_rows`): a row
    changed in place after it was recorded appears changed, a forgotten one as None, and the
    changes are what reading every changed key back from the rows gives."""
    from streaming.operators.identity import LIVE, IdentityIndex
    ids = IdentityIndex(time_slot=2, where_slot=3, track_changes=True)
    assert ids.changed is not None
    part = RowChanges(ids.rows, ids.changed, holds_rows=True)
    ids.remember("p1", [1, "h1", 100, LIVE])
    ids.remember("p2", [1, "h2", 200, LIVE])
    part.mark()
    ids.remember("p3", [1, "h3", 300, LIVE])
    ids.remember("p1", [2, "h1b", 150, LIVE])  # a correction: a new row object
    ids.left_state("p2", 1, "closed")  # changes the rows in place
    ids.left_state("p3", 1, "closed")
    ids.rows["p3"][1] = "h3b"  # in place after it was recorded: the recorded object is it
    assert ids.evict_before(250) == 1  # p2 left live state at 200: forgotten
    got = part.changes()
    assert list(got.items()) == [("p3", [1, "h3b", 300, "closed"]),
                                 ("p1", [2, "h1b", 150, LIVE]), ("p2", None)]
    assert got["p1"] is ids.rows["p1"]
    read_back = RowChanges(ids.rows, dict.fromkeys(ids.changed)).changes()
    assert got == read_back
    part.mark()
    assert part.changes() == {} and ids.changed == {}


def test_appended_items_are_the_tails_since_the_mark_and_new_lists_whole():
    lists = {"m1": ["p1", "p2"]}
    marks: dict[str, int] = {}
    part = AppendedItems(lists, marks)
    assert part.changes() == {"m1": ["p1", "p2"]}
    part.mark()
    lists["m1"].append("p3")
    lists["m2"] = ["q1"]
    assert part.changes() == {"m1": ["p3"], "m2": ["q1"]}
    part.mark()
    assert part.changes() == {} and marks == {"m1": 3, "m2": 1}


def test_apply_changes_replaces_whole_keys_sets_deletes_and_extends():
    snap = {"wm": 1, "ids": {"a": [1], "b": [2]}, "by_m": {"m1": ["a"]}}
    apply_changes(snap, {"wm": 2}, {"rows": {"ids": {"b": None, "c": [3]}},
                                    "appended": {"by_m": {"m1": ["c"], "m2": ["d"]}}})
    assert snap == {"wm": 2, "ids": {"a": [1], "c": [3]}, "by_m": {"m1": ["a", "c"],
                                                                    "m2": ["d"]}}
    with pytest.raises(ValueError, match="'gone', which the state does not hold"):
        apply_changes(snap, {}, {"rows": {"gone": {"x": [1]}}})
    with pytest.raises(ValueError, match="appends to 'wm'"):
        apply_changes(snap, {}, {"appended": {"wm": {"x": [1]}}})


def test_grouped_rows_name_changed_members_and_opened_or_dropped_groups_whole():
    groups = {"w1": {"p1": [1], "p2": [2]}, "w2": {"q1": [3]}}
    part = GroupedRows(groups, lambda g: g, {})
    groups["w1"]["p3"] = [4]
    part.member_changed("w1", "p3")
    del groups["w1"]["p1"]
    part.member_changed("w1", "p1")
    part.member_changed("w1", "p3")  # again: once, in its first place
    groups["w3"] = {"r1": [5]}
    part.group_changed("w3")
    part.member_changed("w3", "r1")  # a member of a group written whole: nothing more
    del groups["w2"]
    part.group_changed("w2")
    assert list(part.changes().items()) == [
        ("w1", [False, {"p3": [4], "p1": None}]), ("w3", [True, {"r1": [5]}]), ("w2", None)]
    before = {"w1": {"p1": [1], "p2": [2]}, "w2": {"q1": [3]}}
    snap = {"g": before}
    apply_changes(snap, {}, {"grouped": {"g": part.changes()}})
    assert snap["g"] == groups == part.full()
    part.mark()
    assert part.changes() == {}
    # Dropped and opened again since the mark: written whole, so no member of the group it
    # replaced survives the apply.
    del groups["w1"]
    part.group_changed("w1")
    groups["w1"] = {"p9": [9]}
    part.group_changed("w1")
    apply_changes(snap, {}, {"grouped": {"g": part.changes()}})
    assert snap["g"]["w1"] == {"p9": [9]}


def test_grouped_rows_track_a_group_that_only_took_new_members_by_its_index():
    groups = {"w1": {"p1": [1], "p2": [2]}}
    part = GroupedRows(groups, lambda g: g, {})
    groups["w1"]["p3"] = [3]
    part.member_added("w1", "p3", 2)
    groups["w1"]["p4"] = [4]
    part.member_added("w1", "p4", 3)
    assert part.changed == {"w1": 2}  # nothing stored per member
    groups["w1"]["p3"] = [33]  # set in place: still the tail, with its value now
    part.member_changed("w1", "p3")
    assert part.changed == {"w1": {"p3": None, "p4": None}}
    part.member_changed("w1", "p1")  # before its deletion
    del groups["w1"]["p1"]
    groups["w1"]["p5"] = [5]
    part.member_added("w1", "p5", 3)
    assert part.changes() == {"w1": [False, {"p3": [33], "p4": [4], "p1": None, "p5": [5]}]}
    part.mark()
    groups["w1"]["p6"] = [6]
    part.member_added("w1", "p6", 4)
    assert part.changes() == {"w1": [False, {"p6": [6]}]}


# One step on a map of three groups: (what, group, member). Members are named from a small
# set, so the same one is added, set, deleted and added again.
_GROUP_STEPS = st.lists(st.tuples(
    st.sampled_from(["add", "set", "delete", "open", "drop", "mark"]),
    st.sampled_from(["w1", "w2", "w3"]), st.sampled_from([f"p{i}" for i in range(6)])),
    max_size=60)


@settings(max_examples=300, deadline=None)
@given(steps=_GROUP_STEPS)
def test_grouped_rows_changes_equal_naming_every_changed_member_in_first_change_order(steps):
    """Tracked by index where a group only took new members, the changes are exactly those of
    naming each member when it changed (the layout before the fifty-second round): the same
    groups, members, values and order. Applied to the state at the mark, they give the map."""
    groups: dict[str, dict[str, list[int]]] = {"w1": {"p0": [0]}, "w2": {}}
    part = GroupedRows(groups, lambda g: g, {})
    named: dict[str, dict[str, None] | None] = {}  # the reference: every change by name
    at_mark = as_stored(groups)

    def name(group: str, member: str) -> None:
        names = named.setdefault(group, {})
        if names is not None:
            names[member] = None

    for n, (what, group, member) in enumerate(steps):
        members = groups.get(group)
        if what == "mark":
            assert part.changes() == _named_changes(groups, named)
            assert list(part.changes()) == list(_named_changes(groups, named))
            snap = {"g": at_mark}
            apply_changes(snap, {}, as_stored({"grouped": {"g": part.changes()}}))
            assert snap["g"] == as_stored(groups)
            part.mark()
            named.clear()
            at_mark = as_stored(groups)
        elif what == "open" and members is None:
            groups[group] = {}
            part.group_changed(group)
            named[group] = None
        elif what == "drop" and members is not None:
            del groups[group]
            part.group_changed(group)
            named[group] = None
        elif members is None or what in ("open", "drop"):
            continue
        elif what == "add" and member not in members:
            at = len(members)
            members[member] = [n]
            part.member_added(group, member, at)
            name(group, member)
        elif what == "set" and member in members:
            members[member] = [n]
            part.member_changed(group, member)
            name(group, member)
        elif what == "delete" and member in members:
            part.member_changed(group, member)
            del members[member]
            name(group, member)
    got, want = part.changes(), _named_changes(groups, named)
    assert got == want
    assert [(k, None if v is None else [v[0], list(v[1].items())]) for k, v in got.items()] == \
        [(k, None if v is None else [v[0], list(v[1].items())]) for k, v in want.items()]


def _named_changes(groups: dict[str, dict[str, Any]],
                   named: dict[str, dict[str, None] | None]) -> dict[str, Any]:
    """The changes as naming every changed member gives them."""
    out: dict[str, Any] = {}
    for k, names in named.items():
        group = groups.get(k)
        if group is None:
            out[k] = None
        elif names is None:
            out[k] = [True, group]
        else:
            out[k] = [False, {m: group.get(m) for m in names}]
    return out


def test_apply_changes_refuses_members_of_a_group_the_state_does_not_hold():
    with pytest.raises(ValueError, match="changes groups of 'gone'"):
        apply_changes({"g": {}}, {}, {"grouped": {"gone": {"w1": None}}})
    with pytest.raises(ValueError, match="members of group 'w9' of 'g'"):
        apply_changes({"g": {"w1": {}}}, {}, {"grouped": {"g": {"w9": [False, {"p": [1]}]}}})


class Checkpoints:
    """Takes checkpoints of an operator the way the host does: the first full (unless it starts
    from a restored `state`), the rest as deltas applied to the state so far (both through the
    JSON round trip a store gives)."""

    def __init__(self, state: dict | None = None) -> None:
        self.state = as_stored(state) if state is not None else None
        self.deltas = 0

    def take(self, op: Any) -> dict:
        parts: SnapshotParts = op.snapshot_parts()
        if self.state is None:
            self.state = as_stored(op.snapshot())
        else:
            stored = as_stored({"whole": parts.whole, "changes": parts.changes()})
            apply_changes(self.state, stored["whole"], stored["changes"])
            self.deltas += 1
        parts.mark()
        return self.state


def _facts(out: Emit) -> list[tuple]:
    return [(f.fact_key, f.payload_hash) for f in out.facts]


def _ledger_feed(rnd: random.Random, n: int) -> list[dict]:
    """Payments over a few hours with redeliveries, corrections (higher revisions), stale
    versions, late arrivals and category versions for their merchants."""
    objs: list[dict] = []
    for i in range(n):
        # Event time moves forward with the feed, with disorder around it, so the watermark
        # crosses window ends one by one (provisional, then final) between checkpoints.
        minute = min(5 * 60 - 1, max(0, i * 5 * 60 // n + rnd.randint(-25, 5)))
        h, m = divmod(minute, 60)
        t = at(8 + h, m)
        pid = f"p{rnd.randint(0, n // 2)}"  # IDs come back: duplicates, conflicts, corrections
        merchant = f"m-{rnd.randint(0, 3)}"
        roll = rnd.random()
        if roll < 0.08:
            objs.append(version(f"v{i}", merchant, rnd.choice(["grocery", "gambling"]),
                                rnd.random() < 0.5, at(8 + h), None, at(8 + h, m)))
            continue
        arrival = at(8 + h, m) if roll < 0.8 else at(min(23, 9 + h), m)  # some arrive late
        objs.append(payment(pid, f"acct-{rnd.randint(0, 5)}", merchant, t, arrival,
                            rnd.randint(1, 90_000), rnd.choice([1, 1, 1, 2, 3])))
    return objs


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ledger_deltas_rebuild_its_snapshot_and_a_restore_goes_on_the_same(seed):
    rnd = random.Random(seed)
    objs = _ledger_feed(rnd, 600)
    d = Driver()
    cks = Checkpoints()
    restored: Driver | None = None
    restored_cks = Checkpoints()
    tail: list[tuple] = []
    kept: list[tuple] = []
    for i, obj in enumerate(objs):
        out = d.feed(obj)
        if restored is not None:
            tail.extend(_facts(restored.feed(obj)))
            kept.extend(_facts(out))
        if rnd.random() < 0.08:
            state = cks.take(d.op)
            assert state == as_stored(d.op.snapshot()), i
            if restored is not None:  # its own deltas build on the state it was restored from
                assert restored_cks.take(restored.op) == state, i
            elif cks.deltas >= 3:
                # A worker restored here must go on exactly as this one.
                restored = Driver(LedgerOperator(TEST_KEY.sign, TEST_KEY.source))
                restored.op.restore(as_stored(state))
                restored_cks = Checkpoints(state)
                restored.max_event, restored.offset = d.max_event, d.offset
    assert cks.deltas >= 5 and restored is not None and restored_cks.deltas >= 2
    assert tail == kept and len(kept) > 20
    assert as_stored(restored.op.snapshot()) == as_stored(d.op.snapshot())


@pytest.mark.parametrize("seed", [4, 5])
def test_receipt_deltas_follow_forgetting_and_reuploads_and_a_restore_goes_on_the_same(seed):
    model = Model.from_artifact(INITIAL_ARTIFACT)
    rnd = random.Random(seed)
    op, twin = ReceiptScorer(model), None
    cks = twin_cks = Checkpoints()
    minute, offset = 0.0, 0
    kept: list[tuple] = []
    tail: list[tuple] = []
    for step in range(80):
        batch = []
        for _ in range(rnd.randint(0, 30)):
            minute += rnd.choice([0.5, 7.0, 90.0])  # long gaps: identities are forgotten
            rid = f"r-{rnd.randint(0, 150)}"  # IDs come back, some after being forgotten
            batch.append(record(rcpt(rid, f"m-{rnd.randint(0, 4)}", minute,
                                     cents=rnd.randint(1, 9000)), 0, offset))
            offset += 1
        for op_ in (op, twin):
            if op_ is None:
                continue
            out = Emit()
            for r in batch:
                op_.on_record(r, out)
            op_.on_watermark("receipts", wm(minute - 2), out)
            (kept if op_ is op else tail).extend(_facts(out))
        if rnd.random() < 0.4:
            state = cks.take(op)
            assert state == as_stored(op.snapshot()), step
            if twin is not None:  # its own deltas build on the state it was restored from
                assert twin_cks.take(twin) == state, step
            elif cks.deltas >= 3:
                twin = ReceiptScorer(model)
                twin.restore(as_stored(state))
                twin_cks = Checkpoints(state)
                kept.clear()
    assert cks.deltas >= 10 and twin is not None and twin_cks.deltas >= 5
    assert op.counters["evicted"] > 0 and len(op.ids) < offset  # identities were forgotten
    assert tail == kept and len(kept) > 20
    assert as_stored(twin.snapshot()) == as_stored(op.snapshot())


def _receipt_feed(op: ReceiptScorer, rnd: random.Random, start: int, n: int) -> list[tuple]:
    """`n` receipts from `start` on, ten a minute over three merchants, some out of order, the
    watermark two minutes behind; the facts they made."""
    out = Emit()
    for i in range(start, start + n):
        minute = i / 10 + rnd.choice([0, 0, 0, -0.5, -3, -9])
        op.on_record(record(rcpt(f"r{i:05d}", f"m-{rnd.randint(0, 2)}", max(minute, 0),
                                 cents=rnd.randint(1, 900)), 0, i), out)
        if i % 10 == 9:
            op.on_watermark("receipts", wm(i / 10 - 2), out)
    return _facts(out)


def test_a_receipt_delta_holds_the_entries_written_and_evicted_since_the_mark_only():
    """A delta names the receipts written (taken, scored, rescored) or evicted since the last
    checkpoint, not every entry of the windows; each row is the entry's fields and merchant."""
    from streaming.operators.receipts import ENCODED, ID, MERCHANT
    op = ReceiptScorer(Model.from_artifact(INITIAL_ARTIFACT))
    rnd = random.Random(3)
    _receipt_feed(op, rnd, 0, 400)  # 40 minutes: evictions start after 12
    parts = op.snapshot_parts()
    parts.mark()
    before = {rid: list(e) for rid, e in op.entries.items()}
    assert len(before) > 100
    _receipt_feed(op, rnd, 400, 10)
    changes = as_stored(op.snapshot_parts().changes()["rows"]["entries"])
    evicted = set(before) - set(op.entries)
    written = {rid for rid, e in op.entries.items() if before.get(rid) != e}
    assert evicted and written and len(changes) < len(before) / 4
    assert set(changes) == evicted | written
    assert all(changes[rid] is None for rid in evicted)
    for rid in written:
        e = op.entries[rid]
        assert changes[rid] == as_stored([*e[:ENCODED], e[MERCHANT]]) and e[ID] == rid


@pytest.mark.parametrize("layout", ["entries", "merchants", "merchants-before-sizes"])
def test_receipts_restore_windows_checkpointed_in_each_layout(layout):
    # Entries are checkpointed by receipt ID in the order they were taken, not in their
    # windows' order (receipts out of order here), and a restore puts each window in order.
    # Until the fifty-eighth round the windows were checkpointed as each merchant's list of
    # entries in window order (each the fields without the merchant); before entries carried
    # their source bytes, without the size. Each restores to the same state, which goes on as
    # the scorer it was taken from.
    from streaming.operators.receipts import ENCODED, ID, MERCHANT, SIZE
    model = Model.from_artifact(INITIAL_ARTIFACT)
    op = ReceiptScorer(model)
    _receipt_feed(op, random.Random(5), 0, 300)
    snap = as_stored(op.snapshot())
    assert len(snap["entries"]) > 100
    order = [rid for m in op.windows for rid in (e[ID] for e in op.live_entries(m))]
    assert list(snap["entries"]) != order
    cut = ENCODED if layout == "merchants" else SIZE
    older = {k: v for k, v in snap.items() if k != "entries"}
    older["merchants"] = {m: [e[:cut] for e in op.live_entries(m)] for m in op.windows}
    if layout == "entries":
        older = snap
    if layout == "merchants-before-sizes":
        for e in op.entries.values():
            op.held.release(e[SIZE])
            e[SIZE] = 0
            e[ENCODED] = None
        snap = as_stored(op.snapshot())
    again = ReceiptScorer(model)
    again.restore(older)
    assert as_stored(again.snapshot()) == snap
    assert {rid: e[MERCHANT] for rid, e in again.entries.items()} == \
        {rid: e[MERCHANT] for rid, e in op.entries.items()}
    assert _receipt_feed(again, random.Random(6), 300, 100) == \
        _receipt_feed(op, random.Random(6), 300, 100)
    assert as_stored(again.snapshot()) == as_stored(op.snapshot())


@pytest.mark.parametrize("layout", ["list", "keyed"])
def test_ledger_restores_windows_checkpointed_in_earlier_layouts(layout):
    # Before delta checkpoints the windows were a list; until the ninth round each window's
    # row held its payments ([account, hour, payments, revision, content hash, status]),
    # keyed by window in between. Both restore to the same state.
    d = Driver()
    for obj in _ledger_feed(random.Random(9), 200):
        d.feed(obj)
    snap = as_stored(d.op.snapshot())
    assert snap["windows"] and set(snap["window_payments"]) == set(snap["windows"])
    assert any(snap["window_payments"].values())
    rows = {k: [*row[:2], snap["window_payments"][k], *row[2:]]
            for k, row in snap["windows"].items()}
    older = {k: v for k, v in snap.items() if k != "window_payments"}
    older["windows"] = list(rows.values()) if layout == "list" else rows
    again = LedgerOperator(TEST_KEY.sign, TEST_KEY.source)
    again.restore(older)
    assert as_stored(again.snapshot()) == snap


def test_snapshot_parts_count_the_entries_of_every_named_map():
    """Rows, list items and group members: what a full checkpoint's size goes with
    (`CheckpointChain.wants_full`)."""
    rows = {"a": [1], "b": [2]}
    lists = {"m1": [1, 2, 3], "m2": [4]}
    groups = {"g1": {"p1": 1, "p2": 2}, "g2": {"p3": 3, "p4": 4, "p5": 5}, "g3": {}}
    parts = SnapshotParts({"wm": 0}, rows={"ids": RowChanges(rows, {})},
                          appended={"by_merchant": AppendedItems(lists, {})},
                          grouped={"window_payments": GroupedRows(groups, lambda g: g, {})})
    assert parts.entries() == 2 + 4 + 5
    rows["c"] = [3]
    lists["m2"].append(5)
    del groups["g2"]
    assert parts.entries() == 3 + 5 + 2
    assert SnapshotParts({"wm": 0}).entries() == 0


@pytest.mark.parametrize("seed", [1, 2])
def test_a_ledgers_entries_are_what_its_snapshot_holds_in_its_named_maps(seed):
    d = Driver()
    for obj in _ledger_feed(random.Random(seed), 300):
        d.feed(obj)
    snap = d.op.snapshot()
    held = (len(snap["ids"]) + len(snap["windows"])
            + sum(len(v) for v in snap["by_merchant"].values())
            + sum(len(v) for v in snap["window_payments"].values()))
    assert snap["windows"] and snap["window_payments"]
    assert held > 2 * len(snap["ids"])  # each identity, its merchant's list entry and more
    assert d.op.snapshot_parts().entries() == held


def test_a_ledgers_window_changes_name_each_window_once_in_first_change_order():
    """A payment into a window already changed since the checkpoint leaves its place as it
    was (the operator looks the mark up before storing it), and a published window's new
    revision is marked the same way."""
    d = Driver()
    parts = d.op.snapshot_parts()
    parts.mark()
    feed = [("p1", "a1", 8, 1), ("p2", "a2", 8, 2), ("p3", "a1", 8, 3), ("p4", "a2", 9, 4),
            ("p5", "a1", 8, 5), ("p6", "a3", 9, 20), ("p7", "a1", 8, 21)]
    for pid, account, hour, minute in feed:
        d.feed(payment(pid, account, "m-1", at(hour, minute), at(hour, minute, 30), 100))
    windows = d.op.snapshot_parts().changes()["rows"]["windows"]
    assert list(windows) == ["a1|2026-10-06T08:00Z", "a2|2026-10-06T08:00Z",
                             "a2|2026-10-06T09:00Z", "a3|2026-10-06T09:00Z"]
    # By then the 08:00 windows were published (the watermark passed 09:00), and p7's new
    # revision of a1's window was marked where a1 already stood.
    assert windows["a1|2026-10-06T08:00Z"][2] == 2 and windows["a2|2026-10-06T08:00Z"][2] == 1
