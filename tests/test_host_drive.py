"""The worker's per-record loop (`host.drive`): what a batch leaves for its journal entry
(ranges, line digests, partition runs, judged jumps), positions, the clock, quarantine, and
the calls the operator gets, on records of two partitions of two topics."""

from __future__ import annotations

import hashlib

import orjson
import pytest
from blake3 import blake3
from hypothesis import given, strategies as st

from streaming.contracts import CONTRACTS, InvalidRecord, decode
from streaming.host.drive import (DECODE_AHEAD, DIGEST_PREFIX, BatchTrace, decode_chunk,
                                  digest_like, drive_batch, lines_digest, range_lines,
                                  sha256_lines_digest)
from streaming.operators.base import Emit
from streaming.sources.records import RawRecord
from streaming.timeutil import NEG_INF, parse_utc_us
from streaming.watermarks import InputWatermark


PAYMENT, RISK_SIGNAL = "payments", "risk_signals"


def payment(pid: str, event: str, arrival: str) -> bytes:
    return orjson.dumps({"payment_id": pid, "revision": 1, "merchant_id": "m-1",
                         "account_id": "a-1", "amount_cents": 100, "event_time": event,
                         "arrival_time": arrival})


def signal(sid: str, event: str, arrival: str) -> bytes:
    return orjson.dumps({"signal_id": sid, "revision": 1, "merchant_id": "m-1", "score": 0.5,
                         "event_time": event, "arrival_time": arrival})


class Recorder:
    """An operator that records what the loop hands it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_record(self, rec, out) -> None:
        self.calls.append(("record", rec.topic, rec.id))

    def on_watermark(self, topic, wm, out) -> None:
        self.calls.append(("watermark", topic, wm))

    def on_clock(self, clock, out) -> None:
        self.calls.append(("clock", clock))


def us(t: str) -> int:
    return parse_utc_us(t)


def raw(topic: str, part: int, off: int, line: bytes, arrival: str,
        fault: tuple[str, str] | None = None) -> RawRecord:
    return RawRecord(topic, part, off, line, us(arrival), fault)


def _batch() -> list[RawRecord]:
    return [
        raw(PAYMENT, 0, 10, payment("p-1", "2026-10-06T10:00:00Z", "2026-10-06T10:00:01Z"),
            "2026-10-06T10:00:01Z"),
        raw(PAYMENT, 0, 11, payment("p-2", "2026-10-06T10:01:00Z", "2026-10-06T10:01:01Z"),
            "2026-10-06T10:01:01Z"),
        raw(RISK_SIGNAL, 0, 3, signal("s-1", "2026-10-06T10:00:30Z", "2026-10-06T10:01:02Z"),
            "2026-10-06T10:01:02Z"),
        raw(PAYMENT, 1, 0, b'{"payment_id": "p-3",', "2026-10-06T10:01:03Z"),
        raw(PAYMENT, 0, 12, payment("p-4", "2026-10-06T10:02:00Z", "2026-10-06T12:02:00Z"),
            "2026-10-06T10:01:01Z", fault=("arrival_time_jump", "judged a jump")),
        raw(PAYMENT, 0, 13, payment("p-5", "2026-10-06T10:03:00Z", "2026-10-06T10:03:01Z"),
            "2026-10-06T10:03:01Z"),
    ]


def _wms() -> dict[str, InputWatermark]:
    return {PAYMENT: InputWatermark(PAYMENT, 2, 0), RISK_SIGNAL: InputWatermark(RISK_SIGNAL, 1, 0)}


def test_a_batch_leaves_ranges_runs_jumps_positions_and_quarantine():
    raws = _batch()
    op, out, wms = Recorder(), Emit(), _wms()
    positions: dict = {}
    names: dict = {}
    trace = BatchTrace(NEG_INF)
    drive_batch(raws, op, wms, CONTRACTS, out, positions, names, trace, op.on_clock, None, None)

    assert trace.order_runs == [["payments:0", 2], ["risk_signals:0", 1], ["payments:1", 1],
                                ["payments:0", 2]]
    digests = {k: lines_digest(v) for k, v in range_lines(raws).items()}
    assert range_lines(raws)["payments:0"] == [r.line for r in raws if r.topic == PAYMENT
                                               and r.partition == 0]
    assert trace.journal_ranges() == {
        "payments:0": [10, 13, digests["payments:0"], [12]],
        "risk_signals:0": [3, 3, digests["risk_signals:0"], []],
        "payments:1": [0, 0, digests["payments:1"], []]}
    assert positions == {(PAYMENT, 0): 14, (RISK_SIGNAL, 0): 4, (PAYMENT, 1): 1}
    assert trace.clock == us("2026-10-06T10:03:01Z")
    assert [(q.topic, q.partition, q.offset, q.reason) for q in out.quarantine] == [
        (PAYMENT, 1, 0, "malformed_json"), (PAYMENT, 0, 12, "arrival_time_jump")]
    assert out.quarantine[0].raw == '{"payment_id": "p-3",'
    # Records in order; the payments watermark waits for partition 1 (it has sent no
    # accepted event), the signals' one follows its only partition; the clock after each.
    records = [c for c in op.calls if c[0] == "record"]
    assert records == [("record", PAYMENT, "p-1"), ("record", PAYMENT, "p-2"),
                       ("record", RISK_SIGNAL, "s-1"), ("record", PAYMENT, "p-5")]
    assert ("watermark", RISK_SIGNAL, us("2026-10-06T10:00:30Z")) in op.calls
    assert not [c for c in op.calls if c[0] == "watermark" and c[1] == PAYMENT]
    assert [c[1] for c in op.calls if c[0] == "clock"] == [
        us("2026-10-06T10:00:01Z"), us("2026-10-06T10:01:01Z"), us("2026-10-06T10:01:02Z"),
        us("2026-10-06T10:01:03Z"), us("2026-10-06T10:01:03Z"), us("2026-10-06T10:03:01Z")]
    # The quarantined line still counts as a sign of life of its partition.
    assert wms[PAYMENT].last_arrival[1] == us("2026-10-06T10:01:03Z")


def test_journaled_idleness_is_followed_at_its_record_and_fresh_decisions_are_asked():
    raws = _batch()[:3]
    op, wms = Recorder(), _wms()
    # Payments partition 1 declared idle after record 1: the payments watermark then follows
    # partition 0 alone.
    trace = BatchTrace(NEG_INF)
    drive_batch(raws, op, wms, CONTRACTS, Emit(), {}, {}, trace, None,
                [[1, PAYMENT, 1, True]], None)
    assert trace.made == [[1, PAYMENT, 1, True]]
    marks = [c for c in op.calls if c[0] == "watermark"]
    assert marks[0] == ("watermark", PAYMENT, us("2026-10-06T10:01:00Z"))
    assert op.calls.index(marks[0]) == 2  # after the second record, before the third

    asked: list[tuple[int, int]] = []

    def idleness(i, clock, out, made):
        asked.append((i, clock))
        made.append([i, "x", 0, True])

    trace = BatchTrace(NEG_INF)
    drive_batch(raws, Recorder(), _wms(), CONTRACTS, Emit(), {}, {}, trace, None, None,
                idleness)
    assert asked == [(0, us("2026-10-06T10:00:01Z")), (1, us("2026-10-06T10:01:01Z")),
                     (2, us("2026-10-06T10:01:02Z"))]
    assert trace.made == [[0, "x", 0, True], [1, "x", 0, True], [2, "x", 0, True]]


def test_the_idleness_check_reads_positions_past_the_record_just_consumed():
    """A run's count and range are written when it ends, but the worker's positions the
    idleness check reads already include the record in hand."""
    raws = _batch()
    positions: dict = {}
    seen: list[dict] = []

    def idleness(i, clock, out, made):
        seen.append(dict(positions))

    drive_batch(raws, Recorder(), _wms(), CONTRACTS, Emit(), positions, {}, BatchTrace(NEG_INF),
                None, None, idleness)
    assert seen == [
        {(PAYMENT, 0): 11},
        {(PAYMENT, 0): 12},
        {(PAYMENT, 0): 12, (RISK_SIGNAL, 0): 4},
        {(PAYMENT, 0): 12, (RISK_SIGNAL, 0): 4, (PAYMENT, 1): 1},
        {(PAYMENT, 0): 13, (RISK_SIGNAL, 0): 4, (PAYMENT, 1): 1},
        {(PAYMENT, 0): 14, (RISK_SIGNAL, 0): 4, (PAYMENT, 1): 1}]


def test_an_operator_that_raises_leaves_the_trace_and_positions_at_its_record():
    class Failing(Recorder):
        def on_record(self, rec, out) -> None:
            super().on_record(rec, out)
            if rec.id == "s-1":
                raise RuntimeError("operator failed")

    raws = _batch()
    positions: dict = {}
    trace = BatchTrace(NEG_INF)
    with pytest.raises(RuntimeError, match="operator failed"):
        drive_batch(raws, Failing(), _wms(), CONTRACTS, Emit(), positions, {}, trace, None,
                    None, None)
    assert trace.order_runs == [["payments:0", 2], ["risk_signals:0", 1]]
    assert {k: v[:2] for k, v in trace.ranges.items()} == {"payments:0": [10, 11],
                                                          "risk_signals:0": [3, 3]}
    assert positions == {(PAYMENT, 0): 12, (RISK_SIGNAL, 0): 4}


@given(st.lists(st.binary(max_size=40).filter(lambda b: b"\n" not in b), max_size=20))
def test_the_line_digest_is_blake3_of_each_line_and_its_newline(lines):
    h = blake3()
    for line in lines:
        h.update(line)
        h.update(b"\n")
    assert lines_digest(lines) == DIGEST_PREFIX + h.hexdigest()[:32]
    # Journals written before the prefix hold SHA-256's 32 hex digits; each form is checked
    # as it was written.
    old = hashlib.sha256()
    for line in lines:
        old.update(line)
        old.update(b"\n")
    assert sha256_lines_digest(lines) == old.hexdigest()[:32]
    assert digest_like(old.hexdigest()[:32], lines) == sha256_lines_digest(lines)
    assert digest_like(lines_digest([b"other"]), lines) == lines_digest(lines)


def test_a_replay_checks_each_entry_in_the_digest_form_it_was_written_in():
    """A journal entry's digests as this release writes them (BLAKE3) and as earlier releases
    did (SHA-256): the same lines pass either way, a changed line is refused either way."""
    import pytest

    from streaming.host.checkpoints import SourceMismatch
    from streaming.host.journal import verify_digests

    raws = _batch()
    trace = BatchTrace(NEG_INF)
    drive_batch(raws, Recorder(), _wms(), CONTRACTS, Emit(), {}, {}, trace, None, None, None)
    ranges = trace.journal_ranges()
    assert all(rng[2].startswith(DIGEST_PREFIX) for rng in ranges.values())
    legacy = {tps: [rng[0], rng[1], sha256_lines_digest(range_lines(raws)[tps]), rng[3]]
              for tps, rng in ranges.items()}
    changed = list(raws)
    changed[1] = raw(PAYMENT, 0, 11, payment("p-2", "2026-10-06T10:01:00Z",
                                             "2026-10-06T10:01:02Z"), "2026-10-06T10:01:01Z")
    for written in (ranges, legacy):
        entry = {"seq": 7, "ranges": orjson.dumps(written)}
        verify_digests(entry, raws)
        with pytest.raises(SourceMismatch, match="journal batch 7 consumed payments:0"):
            verify_digests(entry, changed)
        verify_digests(entry, [r for r in raws if r.topic != PAYMENT or r.partition != 0]
                       + [r for r in raws if r.topic == PAYMENT and r.partition == 0])


def test_records_decoded_ahead_carry_the_hashes_one_at_a_time_decoding_gives():
    raws = _batch()
    got = decode_chunk(raws, 0, len(raws), CONTRACTS)
    assert [type(g).__name__ for g in got] == ["Record", "Record", "Record", "InvalidRecord",
                                               "NoneType", "Record"]
    for r, g in zip(raws, got, strict=True):
        if isinstance(g, InvalidRecord) or g is None:
            continue
        one = decode(CONTRACTS[r.topic], r.line, r.partition, r.offset)
        assert (g.id, g.payload_hash, g.payload_json) == (one.id, one.payload_hash,
                                                          one.payload_json)
        assert g.payload_hash == hashlib.blake2b(one.payload_json.encode(),
                                                 digest_size=16).hexdigest()


def test_a_batch_longer_than_the_decode_ahead_reaches_the_operator_whole_and_in_order():
    raws = [raw(PAYMENT, 0, i, payment(f"p-{i}", "2026-10-06T10:00:00Z",
                                       "2026-10-06T10:00:01Z"), "2026-10-06T10:00:01Z")
            for i in range(2 * DECODE_AHEAD + 3)]
    op, out = Recorder(), Emit()
    trace = BatchTrace(NEG_INF)
    drive_batch(raws, op, _wms(), CONTRACTS, out, {}, {}, trace, None, None, None)
    assert [c[2] for c in op.calls if c[0] == "record"] == [f"p-{i}" for i in range(len(raws))]
    assert trace.ranges["payments:0"] == [0, len(raws) - 1]
