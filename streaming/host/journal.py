"""Journal replay: a committed batch past the checkpoint is read again from the source, record
for record in its journaled order, with its journaled idleness decisions, so the operator makes
the same decisions it made before the crash."""

from __future__ import annotations

import orjson

from ..sources.filelog import RawRecord
from .checkpoints import SourceMismatch
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
    return raws, decisions
