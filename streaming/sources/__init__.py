"""Sources: partitioned logs with positions. The embedded default is the file log; NATS
JetStream is the production source. Both present records as (topic, partition, offset)."""


def open_source(location: str, topics: list[str], arrival_fields: dict[str, str]):
    """Open a partitioned source by location: a directory is a file log; `nats://host:port`
    (optionally `?stream=NAME`) is NATS JetStream."""
    if location.startswith("nats://"):
        from .nats import NatsSource
        return NatsSource(location, topics, arrival_fields)
    from .filelog import FileLog
    return FileLog(location, topics, arrival_fields)
