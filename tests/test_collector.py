"""The collector settings a run uses (streaming/collector.py): set for the block, undone
after it, also when the block raises; cyclic garbage made inside it is still collected. And the
state rows out of the collector's sight (streaming/_collector.c): which lists go, which stay,
that nothing they hold is collected early, and that every operator's rows named in
streaming/collector.py are out of sight, live and after a restore."""

from __future__ import annotations

import gc
import weakref

import pytest

from streaming.collector import RUN_THRESHOLDS, run_collector

from .conftest import hand_written


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_thresholds_and_freeze_hold_for_the_block_only():
    before = gc.get_threshold()
    assert before != RUN_THRESHOLDS
    frozen_before = gc.get_freeze_count()
    with run_collector():
        assert gc.get_threshold() == RUN_THRESHOLDS
        assert gc.get_freeze_count() > frozen_before  # what existed is out of sight
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen_before


def test_settings_are_undone_when_the_block_raises():
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    with pytest.raises(RuntimeError), run_collector():
        raise RuntimeError("stop")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen_before


def test_cycles_made_in_the_block_are_collected_past_the_threshold():
    with run_collector():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        assert gone() is not None  # a cycle: reference counting alone does not free it
        # Enough surviving young objects to pass the young threshold: the collector runs on
        # its own and frees the cycle.
        keep = [[] for _ in range(RUN_THRESHOLDS[0] + 1000)]
        assert gone() is None
        del keep


# ---------------------------------------------------------------- rows out of sight
# `untrack_flat` (streaming/_collector.c) and the operators' state rows that use it.

@pytest.fixture(scope="module")
def c():
    return hand_written("streaming._collector")


def _untracked_tuple() -> tuple:
    t = tuple([1, "a"])  # made at run time: tracked until a collection looks at it
    gc.collect()
    assert not gc.is_tracked(t)
    return t


def test_a_list_of_ints_texts_and_none_goes_out_of_sight(c):
    row = [3, "hash", None, 1.5, b"bytes", True, _untracked_tuple()]
    assert gc.is_tracked(row)
    assert c.untrack_flat(row) is True
    assert not gc.is_tracked(row)
    assert c.untrack_flat(row) is True  # already out of sight: says so, changes nothing
    assert row == [3, "hash", None, 1.5, b"bytes", True, (1, "a")]


@pytest.mark.parametrize("item", [[1], {"a": [1]}, (1, [2]), _Node(), {1, 2}],
                         ids=["list", "dict", "tracked tuple", "instance", "set"])
def test_a_list_holding_anything_the_collector_may_track_stays_in_sight(c, item):
    row = [1, "a", item]
    assert c.untrack_flat(row) is False
    assert gc.is_tracked(row)


def test_only_a_list_is_taken(c):
    for other in ((1, 2), {"a": 1}, "text"):
        with pytest.raises(TypeError, match="takes a list"):
            c.untrack_flat(other)


def test_what_a_row_out_of_sight_holds_is_never_collected_early(c):
    # A cycle put into a row after it left the collector's sight: the row is a reference from
    # outside, so the cycle lives while the row holds it and is collected once it does not.
    row: list = [1]
    assert c.untrack_flat(row)
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    row.append(a)
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is not None and row[1] is gone()
    row.pop()
    gc.collect()
    assert gone() is None


def _out_of_sight(rows) -> list:
    """The rows still in the collector's sight (none, when all went out of it)."""
    rows = list(rows)
    assert rows, "nothing to check"
    return [r for r in rows if gc.is_tracked(r)]


def test_each_operators_state_rows_are_out_of_sight_live_and_restored(c):
    # The rows streaming/collector.py names, with the compiled core in use (`c` skips or fails
    # without it): every identity row, every ledger window's payments, every receipt entry,
    # as the live path makes them and as a restore from a checkpoint does.
    import orjson

    from riskstream_tools.workloads.ledger_seed import at, payment
    from streaming import native
    from streaming.models.registry import INITIAL_ARTIFACT, Model
    from streaming.operators.base import Emit
    from streaming.operators.interval_join import IntervalJoin
    from streaming.operators.ledger import LedgerOperator
    from streaming.operators.receipts import ReceiptScorer
    from streaming.timeutil import parse_utc_us

    from . import joinutil, receiptsutil
    from .ledgerutil import TEST_KEY, Driver

    if native.active != "compiled":  # built, but this process runs pure on purpose
        pytest.skip(f"the rows stay in sight in a pure run ({native.active})")
    ledger = Driver()
    for i in range(12):
        t = at(10, i)
        ledger.feed(payment(f"p{i}", f"acct-{i % 3}", f"m-{i % 2}", t, t, 100 + i, 1))
    restored = LedgerOperator(TEST_KEY.sign, TEST_KEY.source)
    restored.restore(orjson.loads(orjson.dumps(ledger.op.snapshot(),
                                               option=orjson.OPT_NON_STR_KEYS)))
    for op in (ledger.op, restored):
        assert len(op.ids) == 12
        assert _out_of_sight(op.ids.rows.values()) == []
        assert _out_of_sight(e for w in op.windows.values() for e in w.payments.values()) == []

    model = Model.from_artifact(INITIAL_ARTIFACT)
    scorer, out = ReceiptScorer(model), Emit()
    for i in range(12):
        scorer.on_record(receiptsutil.record(receiptsutil.rcpt(f"r{i}", f"m{i % 2}", i), 0, i),
                         out)
    scorer.on_watermark("receipts", parse_utc_us(receiptsutil.at(6)), out)
    assert out.facts  # some entries scored (encoded), the rest pending
    again = ReceiptScorer()
    again.restore(orjson.loads(orjson.dumps(scorer.snapshot())))
    for op in (scorer, again):
        assert len(op.entries) == 12
        assert _out_of_sight(op.entries.values()) == []
        assert _out_of_sight(op.ids.rows.values()) == []

    join, out = IntervalJoin(), Emit()
    join.on_record(joinutil.record(joinutil.pay("p1", "m1", 0), 0, 0), out)
    join.on_record(joinutil.record(joinutil.sig("s1", "m1", 1), 0, 1), out)
    for side in (join.payments, join.signals):
        assert _out_of_sight(side.ids.rows.values()) == []
