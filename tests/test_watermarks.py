"""Per-partition watermarks: monotonic, held by silent partitions, opt-in idleness."""

from streaming.timeutil import NEG_INF, POS_INF
from streaming.watermarks import InputWatermark

L = 3


def test_min_over_partitions_and_silent_partition_holds():
    w = InputWatermark("t", 2, L)
    assert not w.observe(0, 100, 100)
    assert w.wm == NEG_INF  # partition 1 has sent nothing: hold
    assert w.observe(1, 50, 101)
    assert w.wm == 47 and w.partition_wm(0) == 97


def test_never_moves_back():
    w = InputWatermark("t", 1, L)
    w.observe(0, 100, 1)
    w.observe(0, 20, 2)  # an older event does not lower the watermark
    assert w.wm == 97


def test_idle_partition_is_excluded_then_rejoins_without_regress():
    w = InputWatermark("t", 2, L)
    w.observe(0, 100, 1)
    w.observe(1, 10, 2)
    assert w.wm == 7
    assert w.set_idle(1, True) and w.wm == 97
    # Partition 1 resumes with an old event: it rejoins, the watermark stays at 97.
    assert not w.observe(1, 20, 3)
    assert w.wm == 97 and w.idle == [False, False]


def test_all_idle_holds_and_end_of_stream_finalizes():
    w = InputWatermark("t", 1, L)
    w.observe(0, 100, 1)
    assert not w.set_idle(0, True)
    assert w.wm == 97
    assert w.end_of_stream() and w.wm == POS_INF


def test_snapshot_round_trip():
    w = InputWatermark("t", 3, L)
    w.observe(2, 100, 5)
    w.set_idle(0, True)
    r = InputWatermark.restore(w.snapshot())
    assert r.snapshot() == w.snapshot()
