"""Sources: partitioned logs with positions. The embedded default is the file log; NATS
JetStream is the production source. Both present records as (topic, partition, offset)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .filelog import DEFAULT_MAX_ARRIVAL_JUMP_US

log = logging.getLogger(__name__)


def open_source(location: str, topics: list[str], arrival_fields: dict[str, str],
                max_arrival_jump_us: int | None = DEFAULT_MAX_ARRIVAL_JUMP_US,
                owns: Callable[[tuple[str, int]], bool] | None = None):
    """Open a partitioned source by location: a directory is a file log; `nats://host:port`
    (optionally `?stream=NAME`) is NATS JetStream. Both judge arrival jumps with
    `max_arrival_jump_us`. `owns` (a file log only) says which partitions this worker reads."""
    if location.startswith("nats://"):
        if owns is not None:
            raise ValueError("a share of a NATS stream's partitions is read with --follow")
        from .nats import NatsSource
        source: Any = NatsSource(location, topics, arrival_fields, max_arrival_jump_us)
    else:
        from .filelog import FileLog
        source = FileLog(location, topics, arrival_fields, max_arrival_jump_us, owns=owns)
    log.info("opened %s source: %s, partitions %s", type(source).__name__,
             getattr(getattr(source, "location", None), "server_address", location),
             source.partition_counts)
    return source
