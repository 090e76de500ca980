"""The interval-join pipeline: contracts, lateness, operator factory and host hooks."""

from __future__ import annotations

from sqlalchemy import select

from ..contracts import PAYMENT, RISK_SIGNAL
from ..host.settings import PipelineSpec, RunSettings
from ..operators.interval_join import LATENESS_US, RULE_VERSION, IntervalJoin
from ..store import schema as S
from ..store.ops import Store

NAME = "join"


def make_operator(settings: RunSettings) -> IntervalJoin:
    return IntervalJoin(ttl_us=settings.ttl_us)


def prepare(op: IntervalJoin, store: Store) -> None:
    """Reload what the host knows beyond the checkpoint: queued records that are not processed
    yet (a late event near one must not join live) and intervals covered by a published
    generation."""
    q = S.replay_queue.c
    rows = store.rows(select(q.topic, q.key, q.event_us, q.detail).where(
        q.pipeline == NAME, q.status.in_(("pending", "held"))))
    entries = []
    import orjson
    for r in rows:
        entries.append((r["topic"], r["key"], r["event_us"]))
        old = orjson.loads(r["detail"]).get("old_event_us")
        if old is not None:
            entries.append((r["topic"], r["key"], old))
    op.set_queue_index(entries)
    p = S.generation_pointers.c
    op.set_covered((r["interval_key"], r["interval_start_us"], r["interval_end_us"])
                   for r in store.rows(select(p.interval_key, p.interval_start_us,
                                              p.interval_end_us).where(p.pipeline == NAME)))


SPEC = PipelineSpec(
    name=NAME,
    contracts={"payments": PAYMENT, "risk_signals": RISK_SIGNAL},
    lateness_us={"payments": LATENESS_US, "risk_signals": LATENESS_US},
    make_operator=make_operator,
    prepare=prepare,
    reference_versions=lambda op: {"rule_version": RULE_VERSION},
)
