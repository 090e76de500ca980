"""The collector settings a run uses (streaming/collector.py): set for the block, undone
after it, also when the block raises; cyclic garbage made inside it is still collected."""

from __future__ import annotations

import gc
import weakref

import pytest

from streaming.collector import RUN_THRESHOLDS, run_collector


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
