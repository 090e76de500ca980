"""The metrics snapshot written with every batch (and returned at the end of a run): clock,
watermarks per input and partition, idleness, checkpoint, operator state, process health and
event-time freshness, kept apart because a restored, healthy process can still be far behind."""

from __future__ import annotations

from typing import Protocol

from ..operators.base import Emit
from ..timeutil import NEG_INF, POS_INF, us_to_iso
from ..watermarks import InputWatermark
from .settings import Operator, PipelineSpec
from .throttle import SinkThrottle


class HostView(Protocol):
    """What the snapshot reads from the host loop."""

    spec: PipelineSpec
    op: Operator
    wms: dict[str, InputWatermark]
    clock: int
    records_total: int
    last_ckpt: dict
    replaying: bool
    source_head_us: int | None
    throttle: SinkThrottle | None

    @property
    def restored_from(self) -> int | None: ...


def metrics_snapshot(host: HostView, out: Emit | None = None) -> dict:
    op = host.op
    sm = op.state_metrics()
    parts = {t: [us_to_iso(w.partition_wm(p)) if w.max_event[p] > NEG_INF else None
                 for p in range(len(w.max_event))] for t, w in host.wms.items()}
    snap = {
        "clock": us_to_iso(host.clock) if host.clock > NEG_INF else None,
        "records_total": host.records_total,
        "input_wm": {t: w.wm for t, w in host.wms.items()},
        "input_wm_iso": {t: us_to_iso(w.wm) for t, w in host.wms.items()},
        "partition_wm": parts,
        "idle_partitions": {t: [p for p, i in enumerate(w.idle) if i]
                            for t, w in host.wms.items()},
        "checkpoint": dict(host.last_ckpt),
        "state": sm,
    }
    if hasattr(op, "keyed_counts"):
        kc = op.keyed_counts()
        top = sorted(kc.items(), key=lambda kv: (-(kv[1]["bytes"]), kv[0]))[:5]
        snap["top_keys"] = dict(top)
    if out is not None:
        snap["batch"] = {"facts": len(out.facts), "queued": len(out.queue),
                         "quarantined": len(out.quarantine)}
    # Process health and event-time freshness are reported apart: a restored, healthy
    # process can still be far behind the source in event time.
    snap["process"] = {"restored_from_checkpoint": host.restored_from,
                       "replaying_journal": host.replaying}
    snap["source_head"] = us_to_iso(host.source_head_us)
    snap["source_head_us"] = host.source_head_us
    read_clock = host.clock
    if host.throttle is not None:
        bm = host.throttle.backlog_metrics()
        snap["backlog"] = bm
        if host.throttle.now_us is not None:
            read_clock = max(read_clock, host.throttle.now_us)
    snap["event_time_lag_s"] = {
        t: ((read_clock - w.wm) / 1e6 if NEG_INF < w.wm < POS_INF and read_clock > NEG_INF
            else None) for t, w in host.wms.items()}
    if host.spec.health is not None:
        snap.update(host.spec.health(op, snap))
    return snap
