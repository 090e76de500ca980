"""A batch's records through the operator: the worker's per-record loop, compiled.

For every record the host moves its partition's position and the worker clock, decodes the
line against its topic's contract (quarantining what it refuses), hands the record to the
operator, advances the topic's watermark, and follows or makes idleness decisions. Around
that it keeps what the batch's journal entry needs: each partition's offset range and line
digest, the order the partitions' runs came in, and the arrival-time jumps the source judged.

This module holds only that loop and the bookkeeping it fills (`BatchTrace`); the worker
(`host.loop.Worker`) stays interpreted and calls `drive_batch` once per batch. It is in the
compiled set (`streaming.native`): interpreted, the loop's own steps cost about as much as
the decoder (docs/performance.md, seventeenth round)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any, Final, TypeAlias, cast

from blake3 import blake3

from ..contracts.canonical import DecodePlan, decoded_record
from ..contracts.core import Contract, decode, quarantine_text
from ..contracts.record import InvalidRecord, Record
from ..hashing import digests
from ..operators.base import Emit, Quarantined
from ..sources.raw import RawRecord
from ..watermarks import InputWatermark
from .checkpoints import tp_str

TP: TypeAlias = tuple[str, int]
# idleness(index of the record just handled, worker clock, emit, decisions made): the worker's
# evidence-based idleness check, asked after every record when idleness is on.
Idleness: TypeAlias = Callable[[int, int, Emit, list], None]


class BatchTrace:
    """What one batch's loop leaves for its journal entry and stage timings.

    `ranges`: "topic:p" -> [first offset, last offset] of the records consumed (the digest
    and the judged jumps are appended once the batch is done, `journal_ranges`);
    `order_runs`: ["topic:p", count] per run of one partition's records, in the order read;
    `jumps`: "topic:p" -> offsets the source judged arrival-time jumps; `made`: the idleness
    decisions taken (or followed) as [record index, topic, partition, idle];
    `lines`: "topic:p" -> the consumed lines, for the digest; `decode_s`: seconds spent
    decoding; `clock`: the worker clock after the batch."""

    def __init__(self, clock: int) -> None:
        self.ranges: dict[str, list[Any]] = {}
        self.order_runs: list[list[Any]] = []
        self.jumps: dict[str, list[int]] = {}
        self.made: list[list[Any]] = []
        self.lines: dict[str, list[bytes]] = {}
        self.decode_s = 0.0
        self.clock = clock

    def journal_ranges(self) -> dict[str, list[Any]]:
        """`ranges` with each partition's line digest and judged jumps appended: the journal's
        [first, last, digest, jumps] per "topic:p"."""
        for tps, lines in self.lines.items():
            self.ranges[tps].extend((lines_digest(lines), self.jumps.get(tps, [])))
        return self.ranges


# How the journal's line digests are spelled since the thirty-seventh round: BLAKE3, 128 bits,
# after this prefix. SHA-256 over every consumed line was about 3% of a worker's time (0.3 s per
# 1,000,000 ledger lines here); BLAKE3 takes a ninth of that and is as hard to forge. A digest
# without the prefix is SHA-256's (32 hex digits), as every journal written before holds; a
# replay checks each entry in the form it was written (`digest_like`).
DIGEST_PREFIX: Final = "b3:"


def _digested(h: Any, lines: list[bytes]) -> Any:
    """`h` fed what a line digest covers: each line followed by a newline, in offset order.
    (One update over the joined lines: the same bytes as an update per line and per newline,
    in one call.)"""
    if lines:
        h.update(b"\n".join(lines))
        h.update(b"\n")
    return h


def lines_digest(lines: list[bytes]) -> str:
    """The journal's digest of a partition's consumed lines: BLAKE3 (`_digested`), its first 16
    bytes as hex after DIGEST_PREFIX."""
    return DIGEST_PREFIX + _digested(blake3(), lines).hexdigest(length=16)


def sha256_lines_digest(lines: list[bytes]) -> str:
    """The digest journals held before DIGEST_PREFIX: SHA-256 (`_digested`), its first 32 hex
    digits."""
    return _digested(hashlib.sha256(), lines).hexdigest()[:32]


def digest_like(stored: str, lines: list[bytes]) -> str:
    """The digest of `lines` in the form `stored` was written in."""
    return (lines_digest(lines) if stored.startswith(DIGEST_PREFIX)
            else sha256_lines_digest(lines))


def range_lines(raws: list[RawRecord]) -> dict[str, list[bytes]]:
    """Per topic-partition ("topic:p"), the lines `raws` holds, in their order (what a replay
    checks against the digests its entry journaled)."""
    lines: dict[str, list[bytes]] = {}
    topic, part = "", -1
    run: list[bytes] = []
    for raw in raws:
        if raw.partition != part or raw.topic != topic:
            topic, part = raw.topic, raw.partition
            key = tp_str(topic, part)
            got = lines.get(key)
            if got is None:
                got = lines[key] = []
            run = got
        run.append(raw.line)
    return lines


# Records decoded ahead of the operator, at most: enough that their content hashes go through
# the vector lanes together (`hashing.digests`, 8 messages at a time), few enough that the
# records are still in the processor's caches when the operator takes them (a batch decoded
# whole, then driven, reads its records back cold: docs/performance.md, fortieth round).
DECODE_AHEAD: Final = 256


def decode_chunk(raws: list[RawRecord], start: int, end: int,
                 contracts: dict[str, Contract]) -> list[Any]:
    """`raws[start:end]` decoded: per raw its Record, or the InvalidRecord that refused it
    (None for a raw the source judged faulty: the loop quarantines it). The records the C
    decoder built are hashed together, after it."""
    got: list[Any] = []
    later: list[Record] = []
    # Each topic's decode plan, read once per chunk: `Contract` is an interpreted class, so
    # `contract.plan` per record was a generic attribute lookup, about 190 instructions
    # (callgrind, docs/performance.md, fifty-second round).
    plans: dict[str, DecodePlan] = {topic: c.plan for topic, c in contracts.items()}
    for j in range(start, end):
        raw = raws[j]
        if raw.fault is not None:
            got.append(None)
            continue
        try:
            # Straight from the line's bytes: the C decoder builds the record; only a line it
            # refuses is judged by the general path (`decode`), to name the defect.
            rec = decoded_record(plans[raw.topic], raw.line, raw.partition, raw.offset, False)
            if rec is None:
                rec = decode(contracts[raw.topic], raw.line, raw.partition, raw.offset)
            else:
                later.append(rec)
            got.append(rec)
        except InvalidRecord as exc:
            got.append(exc)
    if later:
        hashes = digests([cast(str, r.payload_json) for r in later])
        for k in range(len(later)):
            later[k].payload_hash = hashes[k]
    return got


def _end_run(run: list[Any], rng: list[Any], positions: dict[TP, int], tp: TP, count: int,
             last_off: int) -> None:
    """The run in hand ended after `count` records, the last at `last_off`: its journal run
    and its partition's range say so, and the worker's position is past it."""
    run[1] = count
    rng[1] = last_off
    positions[tp] = last_off + 1


def drive_batch(raws: list[RawRecord], op: Any, wms: dict[str, InputWatermark],
                contracts: dict[str, Contract], out: Emit, positions: dict[TP, int],
                names: dict[TP, str], trace: BatchTrace, on_clock: Any,
                pending: list[list[Any]] | None, idleness: Idleness | None) -> None:
    """Run `raws` (source records, `RawRecord`) through `op` in order; fill `trace`.

    `positions` and `names` are the worker's (position after each record's offset; the
    "topic:p" spelling of each partition). `on_clock`: the operator's clock callback, asked
    after every record, or None for an operator that decides nothing by the clock.
    `pending`: the journaled idleness decisions of a replayed batch, sorted by record index
    (followed instead of deciding anew), or None; `idleness`: the worker's idleness check,
    asked after every record when not replaying, or None when idleness is off."""
    perf = time.perf_counter
    clock = trace.clock
    ranges = trace.ranges
    lines = trace.lines
    decode_s = 0.0
    # The run of records of one partition in hand: its journal run and range. Records come in
    # runs (the merge hands out a partition's records by arrival), so per record the loop
    # only counts and the partition's names are looked up per run. The run's count, last
    # offset and the worker's position after it are kept as machine ints while the run lasts
    # and written into `run`, `rng` and `positions` when it ends (`_end_run`), or before the
    # idleness check reads the positions: stored per record, they cost about 570 instructions
    # a record, most of it a new int object each and a generic addition (callgrind,
    # docs/performance.md, fiftieth round).
    run_topic, run_part = "", -1
    run: list[Any] = []
    rng: list[Any] = []
    run_n = 0
    last_off = 0
    run_lines: list[bytes] = []
    tp: TP = ("", -1)
    tps = ""
    wm: InputWatermark | None = None
    pi = 0
    n_pending = 0 if pending is None else len(pending)
    i = 0
    n_raws = len(raws)
    chunk_start = 0
    decoded: list[Any] = []
    try:
        for raw in raws:
            if i == chunk_start + len(decoded):
                # The next chunk's records, decoded and hashed ahead of the operator.
                chunk_start = i
                t_dec = perf()
                decoded = decode_chunk(raws, i, min(n_raws, i + DECODE_AHEAD), contracts)
                decode_s += perf() - t_dec
            off: int = raw.offset
            part: int = raw.partition
            topic: str = raw.topic
            if part != run_part or topic != run_topic:
                if run_n:
                    _end_run(run, rng, positions, tp, run_n, last_off)
                run_n = 0
                run_topic, run_part = topic, part
                tp = (topic, part)
                got_name = names.get(tp)
                if got_name is None:
                    got_name = names[tp] = tp_str(topic, part)
                tps = got_name
                run = [tps, 0]
                trace.order_runs.append(run)
                got_rng = ranges.get(tps)
                if got_rng is None:
                    got_rng = ranges[tps] = [off, off]
                    lines[tps] = []
                rng = got_rng
                run_lines = lines[tps]
                wm = wms[topic]
            assert wm is not None
            run_n += 1
            last_off = off
            line: bytes = raw.line
            run_lines.append(line)
            arrival: int = raw.arrival_us
            if arrival > clock:
                clock = arrival
            got = decoded[i - chunk_start]
            fault = raw.fault
            if fault is not None:
                jumps = trace.jumps.get(tps)
                if jumps is None:
                    jumps = trace.jumps[tps] = []
                jumps.append(off)
                got = InvalidRecord(fault[0], fault[1])
            if isinstance(got, InvalidRecord):
                out.quarantine.append(Quarantined(topic, part, off, got.reason, got.detail,
                                                  quarantine_text(line)))
                wm.touch(part, arrival)
            else:
                rec: Record = got
                op.on_record(rec, out)
                if wm.observe(part, rec.event_us, arrival):
                    op.on_watermark(topic, wm.wm, out)
            if on_clock is not None:
                on_clock(clock, out)
            # Idleness: follow journaled decisions on replay, decide from evidence otherwise.
            if pending is not None:
                while pi < n_pending and pending[pi][0] == i:
                    decision = pending[pi]
                    d_topic: str = decision[1]
                    d_wm = wms[d_topic]
                    if d_wm.set_idle(decision[2], decision[3]):
                        op.on_watermark(d_topic, d_wm.wm, out)
                    trace.made.append(decision)
                    pi += 1
            elif idleness is not None:
                positions[tp] = off + 1  # the check reads the worker's positions
                idleness(i, clock, out, trace.made)
            i += 1
    finally:
        # Also when the operator raised: the trace and positions name what was consumed.
        if run_n:
            _end_run(run, rng, positions, tp, run_n, last_off)
    trace.clock = clock
    trace.decode_s += decode_s
