"""Sources: partitioned logs with positions. The embedded default is the file log; NATS
JetStream is the production source. Both present records as (topic, partition, offset)."""


from .filelog import DEFAULT_MAX_ARRIVAL_JUMP_US


def open_source(location: str, topics: list[str], arrival_fields: dict[str, str],
                max_arrival_jump_us: int | None = DEFAULT_MAX_ARRIVAL_JUMP_US):
    """Open a partitioned source by location: a directory is a file log; `nats://host:port`
    (optionally `?stream=NAME`) is NATS JetStream (which judges arrival jumps with the
    default bound)."""
    if location.startswith("nats://"):
        from .nats import NatsSource
        return NatsSource(location, topics, arrival_fields)
    from .filelog import FileLog
    return FileLog(location, topics, arrival_fields, max_arrival_jump_us)
