"""Journal replay: a committed batch past the checkpoint is read again from the source, record
for record in its journaled order, with its journaled idleness decisions, so the operator makes
the same decisions it made before the crash.

Each journal entry records, per topic-partition, the offset range it consumed, a digest of
the consumed lines (`drive.lines_digest`; an entry written before the thirty-seventh round
holds SHA-256's, checked as such) and the offsets the source judged arrival-time jumps
(replay follows those decisions, `follow_jump_decisions`). Replay recomputes the digest of
what it re-read and refuses (exit 4) when a consumed line changed: the checkpoint's
fingerprints cover only the bytes before the checkpoint, the digests cover every journaled
batch after it."""

from __future__ import annotations

import orjson

from ..sources.filelog import RawRecord
from ..sources.records import ARRIVAL_JUMP
from .checkpoints import SourceMismatch
from .drive import digest_like, range_lines
from .settings import TP, Source


def journaled_batch(entry: dict, source: Source,
                    positions: dict[TP, int]) -> tuple[list[RawRecord], list]:
    """The records (read from `positions` on, in the journaled order) and the idleness
    decisions of one journal entry."""
    runs = orjson.loads(entry["order_runs"])
    decisions = orjson.loads(entry["idleness"])
    raws: list[RawRecord] = []
    cursor = dict(positions)
    for tps, count in runs:
        topic, part = tps.rsplit(":", 1)
        tp = (topic, int(part))
        off = cursor[tp]
        if off + count > source.end_offset(tp):
            raise SourceMismatch(f"journal batch {entry['seq']} consumed {tps} up to "
                                 f"{off + count - 1} but the log ends at "
                                 f"{source.end_offset(tp) - 1}: restore refused")
        for i in range(count):
            raws.append(source.read_at(tp, off + i))
        cursor[tp] = off + count
    verify_digests(entry, raws)
    follow_jump_decisions(entry, raws)
    return raws, decisions


def follow_jump_decisions(entry: dict, raws: list[RawRecord]) -> None:
    """Give each re-read record the arrival-jump decision the batch was consumed with. The
    source judges a partition's last records by what the log held when it was read (later
    records, the other partitions): a log that grew since can judge them otherwise, and a
    replay must not. Entries written before decisions were journaled keep the source's."""
    ranges = orjson.loads(entry["ranges"])
    for raw in raws:
        rng = ranges.get(f"{raw.topic}:{raw.partition}")
        if rng is None or len(rng) < 4:
            continue
        journaled = raw.offset in rng[3]
        if journaled and raw.fault is None:
            raw.fault = (ARRIVAL_JUMP, f"judged an arrival-time jump when journal batch "
                                       f"{entry['seq']} was first read; it moves no clock")
        elif not journaled and raw.fault is not None:
            raw.fault = None


def verify_journal(entries: list[dict], source: Source, positions: dict[TP, int]) -> None:
    """Re-read every journaled batch past the checkpoint and check its digests, before the run
    writes anything (a refused restore leaves the store exactly as it was)."""
    cursor = dict(positions)
    for entry in entries:
        raws, _ = journaled_batch(entry, source, cursor)
        for raw in raws:
            cursor[(raw.topic, raw.partition)] = raw.offset + 1


def verify_digests(entry: dict, raws: list[RawRecord]) -> None:
    """Refuse a replay whose re-read lines differ from what the batch consumed. Entries written
    before digests were journaled carry none and are not checked."""
    ranges = orjson.loads(entry["ranges"])
    lines = range_lines(raws)
    for tps, rng in ranges.items():
        if len(rng) < 3:
            continue
        got = digest_like(rng[2], lines.get(tps, []))
        if got != rng[2]:
            raise SourceMismatch(
                f"journal batch {entry['seq']} consumed {tps} offsets {rng[0]}..{rng[1]} and "
                f"those lines changed since (content digest {got[:15]} != "
                f"{rng[2][:15]}): restore refused")
