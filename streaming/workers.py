"""A pipeline's progress read across its workers.

One worker journals, checkpoints and writes metrics under the pipeline's name; scaled-out
workers (`--worker I/N`) each under `<pipeline>@I/N` (streaming/assignment.py), over disjoint
partitions. Readers that judge the pipeline as a whole (repairs, reconciliation, the incident
report, the gates) read every worker's rows: the pipeline ran once any worker committed a
batch, it is quiescent only when every worker's checkpoint covers its journal, and its
watermark of a topic is the minimum over the workers (an event is past the pipeline's
watermark only when every worker that may hold its partition has passed it)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from .store import schema as S
from .store.ops import Store
from .timeutil import NEG_INF


def _mine(column, pipeline: str):
    return (column == pipeline) | column.like(f"{pipeline}@%")


def worker_keys(store: Store, pipeline: str) -> list[str]:
    """The journal keys the pipeline's workers committed under (sorted)."""
    j = S.journal.c
    return sorted(r["pipeline"] for r in store.rows(
        select(j.pipeline).where(_mine(j.pipeline, pipeline)).distinct()))


@dataclass(frozen=True)
class WorkerProgress:
    key: str
    last_journal_seq: int
    checkpoint: dict | None
    metrics: dict | None

    @property
    def covered(self) -> int:
        return self.checkpoint["journal_seq"] if self.checkpoint else 0


def progress(store: Store, pipeline: str) -> list[WorkerProgress]:
    """Each worker's last journal seq, latest checkpoint and latest metrics snapshot."""
    j = S.journal.c
    last = {r["pipeline"]: int(r["seq"]) for r in store.rows(
        select(j.pipeline, func.max(j.seq).label("seq")).where(_mine(j.pipeline, pipeline))
        .group_by(j.pipeline))}
    return [WorkerProgress(k, last[k], store.latest_checkpoint(k), store.last_metrics(k))
            for k in sorted(last)]


def ran(store: Store, pipeline: str) -> bool:
    """True once any worker of the pipeline committed a batch."""
    return any(w.last_journal_seq > 0 for w in progress(store, pipeline))


def unfinished(store: Store, pipeline: str) -> list[WorkerProgress]:
    """Workers whose latest checkpoint does not cover their journal (stopped mid-run)."""
    return [w for w in progress(store, pipeline) if w.last_journal_seq > w.covered]


def input_watermark(store: Store, pipeline: str, topic: str) -> int:
    """The pipeline's committed watermark of `topic`: the minimum over its workers' latest
    metrics (NEG_INF before any, or while a worker has none for the topic)."""
    marks = []
    for w in progress(store, pipeline):
        wm = ((w.metrics or {}).get("input_wm") or {}).get(topic)
        marks.append(NEG_INF if wm is None else wm)
    return min(marks) if marks else NEG_INF
