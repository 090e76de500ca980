"""Source accounting, defined once: per pipeline, topic and partition, what was read and the
bucket each record landed in.

read     the offset range the journal says the pipeline consumed (from the lowest first offset
         to the highest last offset of its batches), as a count of positions;
buckets  accepted, duplicate, stale and routed_to_repair from the archive's dispositions,
         quarantined from the quarantine; every position read is in exactly one of them;
closes   read = accepted + duplicate + stale + quarantined + routed_to_repair.

The dbt model `rec_source_ranges` computes the same columns in the warehouse from the ingested
journal, archive and quarantine; a test holds the two equal on a seed run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from ..operators.base import BUCKETS, QUARANTINED
from . import schema as S


def journal_ranges(ranges_json: dict[str, list[int]]) -> list[tuple[str, int, int, int]]:
    """A journal entry's `ranges` ({"topic:partition": [first, last, digest]}) as rows."""
    out = []
    for tp, rng in ranges_json.items():
        lo, hi = rng[0], rng[1]
        topic, part = tp.rsplit(":", 1)
        out.append((topic, int(part), lo, hi))
    return out


def source_accounting(conn: Connection, pipeline: str) -> list[dict[str, Any]]:
    """One row per topic-partition: first/last offset, read, the five buckets and `closes`."""
    ranges: dict[tuple[str, int], list[int]] = {}
    j = S.journal.c
    # Scaled-out workers journal under `<pipeline>@I/N`; their partition ranges are disjoint.
    for (text,) in conn.execute(select(j.ranges).where(
            (j.pipeline == pipeline) | j.pipeline.like(f"{pipeline}@%"))):
        for topic, part, lo, hi in journal_ranges(orjson.loads(str(text))):
            cur = ranges.setdefault((topic, part), [lo, hi])
            cur[0] = min(cur[0], lo)
            cur[1] = max(cur[1], hi)
    buckets: dict[tuple[str, int], dict[str, int]] = {}
    a = S.archive.c
    archived: Sequence[Any] = conn.execute(
        select(a.topic, a.partition, a.disposition, func.count())
        .where(a.pipeline == pipeline).group_by(a.topic, a.partition, a.disposition)).all()
    for a_topic, a_part, disposition, n in archived:
        buckets.setdefault((a_topic, a_part), {})[disposition] = n
    q = S.quarantine.c
    quarantined: Sequence[Any] = conn.execute(
        select(q.topic, q.partition, func.count())
        .where(q.pipeline == pipeline).group_by(q.topic, q.partition)).all()
    for q_topic, q_part, n in quarantined:
        buckets.setdefault((q_topic, q_part), {})[QUARANTINED] = n
    out = []
    for tp in sorted(set(ranges) | set(buckets)):
        lo, hi = ranges.get(tp, [0, -1])
        b = buckets.get(tp, {})
        row: dict[str, Any] = {"topic": tp[0], "partition": tp[1], "first_offset": lo,
                               "last_offset": hi, "read": hi - lo + 1 if hi >= lo else 0}
        for name in BUCKETS:
            row[name] = b.get(name, 0)
        row["closes"] = row["read"] == sum(row[n] for n in BUCKETS)
        out.append(row)
    return out
