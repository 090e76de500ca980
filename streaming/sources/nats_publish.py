"""Load a file-log recording into NATS JetStream, and manage the streams the source reads.

Every topic-partition `DIR/<topic>/p<N>.jsonl` becomes subject `<stream>.<topic>.p<N>`, each
line one message with the line's bytes as payload (malformed lines included: the worker
quarantines them with their position). Messages are published in the file log's replay order,
so stream sequences follow arrival time and every subject keeps its file order. The stream is
created with the partition layout in its description, limits retention without limits, and
message deletion and purging denied, because a removed message would shift the offsets of
every later message of its subject."""

from __future__ import annotations

import os
import re
import time
from typing import Callable

from .filelog import FileLog, SourceError
from .nats import NatsLocation, connect, decode_layout, encode_layout, run_private

DEFAULT_PARTITIONER = "recorded"
# Publishes in flight before waiting for acknowledgements.
PUBLISH_WINDOW = 512
_PART_RE = re.compile(r"^p\d+\.jsonl$")


class PublishError(RuntimeError):
    pass


def recorded_topics(root: str) -> list[str]:
    """Topic directories of a recording: those holding at least one p<N>.jsonl file."""
    if not os.path.isdir(root):
        raise PublishError(f"recording directory {root!r} does not exist")
    topics = sorted(d for d in os.listdir(root)
                    if os.path.isdir(os.path.join(root, d))
                    and any(_PART_RE.match(f) for f in os.listdir(os.path.join(root, d))))
    if not topics:
        raise PublishError(f"{root!r} holds no topic directories with p<N>.jsonl files")
    return topics


def _arrival_fields(topics: list[str]) -> dict[str, str]:
    from ..contracts import CONTRACTS
    return {t: CONTRACTS[t].arrival_time_field for t in topics if t in CONTRACTS}


def publish_file_log(root: str, location: str, recreate: bool = False,
                     partitioner: str = DEFAULT_PARTITIONER,
                     progress: Callable[[int, int], None] | None = None) -> dict:
    """Publish the recording under `root` to the stream named by `location`. Returns a
    summary: stream, creation time, partitions, messages per subject, seconds."""
    loc = NatsLocation.parse(location)
    topics = recorded_topics(root)
    log = FileLog(root, topics, _arrival_fields(topics))
    description = encode_layout(log.partition_counts, partitioner)
    records = list(log.merged({}))
    t0 = time.perf_counter()

    async def publish() -> dict:
        from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
        from nats.js.errors import NotFoundError
        nc = await connect(loc)
        try:
            js = nc.jetstream(timeout=loc.timeout_s)
            try:
                await js.stream_info(loc.stream)
                exists = True
            except NotFoundError:
                exists = False
            if exists and not recreate:
                raise PublishError(f"stream {loc.stream!r} already exists at "
                                   f"{loc.server_address}; pass --recreate to replace it")
            if exists:
                await js.delete_stream(loc.stream)
            await js.add_stream(StreamConfig(
                name=loc.stream, subjects=[f"{loc.stream}.>"], description=description,
                retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
                discard=DiscardPolicy.NEW, max_msgs=-1, max_bytes=-1, max_age=0,
                deny_delete=True, deny_purge=True))
            last_seq = 0
            for start in range(0, len(records), PUBLISH_WINDOW):
                window = records[start:start + PUBLISH_WINDOW]
                futures = [await js.publish_async(
                    loc.subject(r.topic, r.partition), r.line,
                    headers={"Nats-Msg-Id": f"{r.topic}/p{r.partition}/{r.offset}"})
                    for r in window]
                for r, fut in zip(window, futures):
                    ack = await fut
                    # One connection keeps publish order; the check proves it per message.
                    if ack.duplicate or ack.seq <= last_seq:
                        raise PublishError(f"{r.topic}/p{r.partition} offset {r.offset} was "
                                           f"stored as sequence {ack.seq} after {last_seq}"
                                           f"{' (duplicate)' if ack.duplicate else ''}")
                    last_seq = ack.seq
                if progress:
                    progress(start + len(window), len(records))
            info = await js.stream_info(loc.stream, subjects_filter=f"{loc.stream}.>")
        finally:
            await nc.close()
        counts = info.state.subjects or {}
        for tp in log.tps():
            if counts.get(loc.subject(*tp), 0) != log.end_offset(tp):
                raise PublishError(f"{loc.subject(*tp)} holds {counts.get(loc.subject(*tp), 0)} "
                                   f"messages, the recording {log.end_offset(tp)}")
        return {"stream": loc.stream, "server": loc.server_address,
                "stream_created": info.created.isoformat() if info.created else None,
                "partitions": dict(log.partition_counts), "partitioner": partitioner,
                "messages": len(records),
                "subjects": {loc.subject(*tp): log.end_offset(tp) for tp in log.tps()},
                "seconds": round(time.perf_counter() - t0, 3)}

    try:
        return run_private(publish)
    except SourceError as exc:
        raise PublishError(str(exc)) from None


def describe_stream(location: str) -> dict:
    """Layout, creation time and per-subject message counts of a stream."""
    loc = NatsLocation.parse(location)

    async def describe() -> dict:
        from nats.js.errors import NotFoundError
        nc = await connect(loc)
        try:
            js = nc.jetstream(timeout=loc.timeout_s)
            try:
                info = await js.stream_info(loc.stream, subjects_filter=f"{loc.stream}.>")
            except NotFoundError:
                raise PublishError(f"stream {loc.stream!r} does not exist at "
                                   f"{loc.server_address}") from None
        finally:
            await nc.close()
        layout = decode_layout(loc.stream, info.config.description)
        return {"stream": loc.stream, "server": loc.server_address,
                "stream_created": info.created.isoformat() if info.created else None,
                "partitions": layout["partitions"], "partitioner": layout.get("partitioner"),
                "messages": info.state.messages, "first_seq": info.state.first_seq,
                "last_seq": info.state.last_seq,
                "subjects": dict(sorted((info.state.subjects or {}).items()))}

    try:
        return run_private(describe)
    except SourceError as exc:
        raise PublishError(str(exc)) from None


def delete_stream(location: str) -> bool:
    """Delete the stream named by `location`; False when it did not exist."""
    loc = NatsLocation.parse(location)

    async def delete() -> bool:
        from nats.js.errors import NotFoundError
        nc = await connect(loc)
        try:
            try:
                return await nc.jetstream(timeout=loc.timeout_s).delete_stream(loc.stream)
            except NotFoundError:
                return False
        finally:
            await nc.close()

    try:
        return run_private(delete)
    except SourceError as exc:
        raise PublishError(str(exc)) from None
