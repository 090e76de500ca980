"""Sources: partitioned logs with positions. The embedded default is the file log; NATS
JetStream is the production source. Both present records as (topic, partition, offset)."""

from __future__ import annotations

import logging
from typing import Any

from .filelog import DEFAULT_MAX_ARRIVAL_JUMP_US

log = logging.getLogger(__name__)


def open_source(location: str, topics: list[str], arrival_fields: dict[str, str],
                max_arrival_jump_us: int | None = DEFAULT_MAX_ARRIVAL_JUMP_US):
    """Open a partitioned source by location: a directory is a file log; `nats://host:port`
    (optionally `?stream=NAME`) is NATS JetStream. Both judge arrival jumps with
    `max_arrival_jump_us`."""
    if location.startswith("nats://"):
        from .nats import NatsSource
        source: Any = NatsSource(location, topics, arrival_fields, max_arrival_jump_us)
    else:
        from .filelog import FileLog
        source = FileLog(location, topics, arrival_fields, max_arrival_jump_us)
    log.info("opened %s source: %s, partitions %s", type(source).__name__,
             getattr(getattr(source, "location", None), "server_address", location),
             source.partition_counts)
    return source
