"""`state_bytes` is measured one way in every operator (state.Held): the source-line bytes of
the records held in state. It grows with each held record by exactly its size, falls when
records leave (eviction, a final window, a correction replacing a version), and survives a
checkpoint round trip."""

from __future__ import annotations

import orjson

from riskstream_tools.workloads.ledger_seed import at as lat, payment, version
from streaming.models.registry import INITIAL_ARTIFACT, Model
from streaming.operators.base import Emit
from streaming.operators.interval_join import IntervalJoin
from streaming.operators.ledger import LedgerOperator
from streaming.operators.receipts import ReceiptScorer
from streaming.state import Held
from streaming.timeutil import POS_INF, parse_utc_us

from . import joinutil as J
from . import receiptsutil as R
from .ledgerutil import TEST_KEY, rec as ledger_rec

M = "merchant-1"


def roundtrip(op, fresh):
    fresh.restore(orjson.loads(orjson.dumps(op.snapshot())))
    return fresh


def test_held_counts_records_and_bytes():
    h = Held()
    h.hold(100)
    h.hold(250, 2)
    h.release(100)
    assert (h.records, h.bytes) == (2, 250)


def test_join_bytes_are_the_held_records_sizes():
    op = IntervalJoin()
    out = Emit()
    recs = [J.record(o, offset=i) for i, o in enumerate(
        [J.pay("p1", M, 0), J.pay("p2", M, 30, cents=123456), J.sig("s1", M, 5),
         J.sig("s2", M, 100)])]
    held = 0
    for r in recs:
        op.on_record(r, out)
        held += r.size
        assert op.state_metrics()["state_bytes"] == held
    # The signal watermark passes p1's horizon (t + 8 min): p1 leaves state, its bytes with it.
    op.on_watermark("risk_signals", parse_utc_us(J.at(10)), out)
    assert op.state_metrics()["state_bytes"] == held - recs[0].size
    back = roundtrip(op, IntervalJoin())
    assert back.state_metrics()["state_bytes"] == held - recs[0].size
    op.on_end_of_stream(out)
    assert op.state_metrics()["state_bytes"] == 0


def test_ledger_bytes_follow_open_window_payments_and_category_versions():
    op = LedgerOperator(TEST_KEY.sign, TEST_KEY.source)
    out = Emit()
    cat = ledger_rec(version("v1", "m-1", "grocery", False, lat(0), None, lat(7)), offset=0)
    p1 = ledger_rec(payment("a", "acct-8", "m-1", lat(10, 5), lat(10, 5), 100), offset=1)
    p2 = ledger_rec(payment("b", "acct-8", "m-1", lat(10, 6), lat(10, 6), 200), offset=2)
    op.on_record(cat, out)
    assert op.state_metrics()["state_bytes"] == cat.size
    op.on_record(p1, out)
    op.on_record(p2, out)
    assert op.state_metrics()["state_bytes"] == cat.size + p1.size + p2.size
    # A correction replaces the version it corrects: its bytes replace the old ones.
    fix = ledger_rec(payment("a", "acct-8", "m-1", lat(10, 5), lat(10, 9), 123456789, rev=2),
                     offset=3)
    op.on_record(fix, out)
    assert fix.size != p1.size
    assert op.state_metrics()["state_bytes"] == cat.size + fix.size + p2.size
    back = roundtrip(op, LedgerOperator(TEST_KEY.sign, TEST_KEY.source))
    assert back.state_metrics()["state_bytes"] == cat.size + fix.size + p2.size
    # A window keeps its payments' bytes as they come and go (what it releases when final).
    for o in (op, back):
        assert [w.held_bytes() for w in o.windows.values()] == [fix.size + p2.size]
    # A correction into another hour moves its bytes to that hour's window.
    moved = ledger_rec(payment("b", "acct-8", "m-1", lat(11, 1), lat(11, 2), 200, rev=2),
                       offset=4)
    op.on_record(moved, out)
    assert sorted(w.held_bytes() for w in op.windows.values()) == sorted([fix.size, moved.size])
    assert op.state_metrics()["state_bytes"] == cat.size + fix.size + moved.size
    # The window turns final and leaves state; the category version stays.
    op.on_end_of_stream(out)
    assert op.state_metrics()["state_bytes"] == cat.size


def test_receipts_bytes_grow_with_entries_and_fall_on_eviction():
    op = ReceiptScorer(Model.from_artifact(INITIAL_ARTIFACT))
    out = Emit()
    recs = [R.record(R.rcpt(f"r{i}", "m1", m, cents=100 * 10 ** i), 0, i)
            for i, m in enumerate((0, 1, 30))]
    held = 0
    for r in recs:
        op.on_record(r, out)
        held += r.size
        assert op.state_metrics()["state_bytes"] == held
    assert op.state_metrics()["peak"]["bytes"] == held
    # Entries below wm - 12 min are no longer read: the first two leave.
    op.on_watermark("receipts", parse_utc_us(R.at(20)), out)
    assert op.state_metrics()["state_bytes"] == recs[2].size
    back = roundtrip(op, ReceiptScorer())
    assert back.state_metrics()["state_bytes"] == recs[2].size
    op.on_watermark("receipts", POS_INF, out)
    assert op.state_metrics()["state_bytes"] == 0
