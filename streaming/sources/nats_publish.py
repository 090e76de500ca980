"""Load a file-log recording into NATS JetStream, and manage the streams the source reads.

Every topic-partition `DIR/<topic>/p<N>.jsonl` becomes subject `<stream>.<topic>.p<N>`, each
line one message with the line's bytes as payload (malformed lines included: the worker
quarantines them with their position). Messages are published in the file log's replay order,
so stream sequences follow arrival time and every subject keeps its file order. The stream is
created with the partition layout in its description, limits retention without limits, and
message deletion and purging denied, because a removed message would shift the offsets of
every later message of its subject."""

from __future__ import annotations

import hashlib
import os
import re
import time
import zlib
from dataclasses import dataclass
from collections.abc import Callable

import orjson

from .filelog import FileLog, SourceError
from .nats import NatsLocation, connect, decode_layout, encode_layout, run_private
from .nats_wire import WireConnection

DEFAULT_PARTITIONER = "recorded"
# The field each pipeline partitions a topic by (its key); topics not listed for a pipeline
# (reference data) keep the recording's routing.
PARTITION_KEYS: dict[str, dict[str, str]] = {
    "join": {"payments": "merchant_id", "risk_signals": "merchant_id"},
    "ledger": {"payments": "account_id"},
    "receipts": {"receipts": "merchant_id"},
}
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


def recording_digest(log: FileLog) -> str:
    """A short content hash of the recording: the prefix of its message IDs, so publishing
    the same recording again is de-duplicated and another recording never collides."""
    h = hashlib.sha256()
    for tp in log.tps():
        h.update(f"{tp[0]}/{tp[1]}/{log.end_offset(tp)}:".encode())
        h.update(log.fingerprint(tp, log.end_offset(tp)).encode())
    return h.hexdigest()[:16]


def partition_of(key: bytes, partitions: int) -> int:
    """The stated key -> partition function: CRC-32 (zlib, IEEE) of the key's UTF-8 bytes,
    modulo the partition count."""
    return zlib.crc32(key) % partitions


@dataclass(frozen=True)
class Routing:
    """Where each recorded line goes. `recorded`: the recording's own partition. `keyed`: the
    pipeline's key field (PARTITION_KEYS) through `partition_of` into `partitions` partitions;
    topics without a key field for the pipeline (reference data) keep their recorded routing.
    A line whose key cannot be read (malformed, missing field) is routed by its raw bytes, so
    it still reaches a worker, which quarantines it with its position."""

    pipeline: str | None = None
    partitions: int | None = None

    @property
    def name(self) -> str:
        if self.pipeline is None:
            return DEFAULT_PARTITIONER
        return f"crc32/{self.pipeline}/{self.partitions}"

    def layout(self, recorded: dict[str, int]) -> dict[str, int]:
        if self.pipeline is None:
            return dict(recorded)
        keys = PARTITION_KEYS[self.pipeline]
        assert self.partitions is not None  # a pipeline partitioner names its count
        return {t: (self.partitions if t in keys else n) for t, n in recorded.items()}

    def partition(self, raw) -> int:
        if self.pipeline is None:
            return raw.partition
        field_name = PARTITION_KEYS[self.pipeline].get(raw.topic)
        if field_name is None:
            return raw.partition
        obj = raw.obj
        key = obj.get(field_name) if isinstance(obj, dict) else None
        data = key.encode() if isinstance(key, str) else raw.line
        assert self.partitions is not None  # a pipeline partitioner names its count
        return partition_of(data, self.partitions)


class AckWindow:
    """The server's acknowledgements of one window of published messages. Message k of the
    window asks for its reply at `prefix + str(k)`; one subscription (`prefix*`) takes them
    all, and the replies are read in publish order once all are in.

    Why not the client library's acknowledged publish: it made a future, a random token (a
    system call) and a timed semaphore wait for every message, nearly three quarters of the
    publishing coroutine's time (docs/performance.md, forty-fourth round); the messages now go
    out over the snapshot reader's own protocol connection (`nats_wire.WireConnection.
    publish_window`), a window at a time."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._replies: dict[int, tuple[bytes, str | None]] = {}
        self._expected = 0

    def reply_subject(self, k: int) -> str:
        return f"{self.prefix}{k}"

    def expect(self, n: int) -> None:
        """A new window of `n` messages is about to be published."""
        self._replies = {}
        self._expected = n

    @property
    def received(self) -> int:
        return len(self._replies)

    @property
    def complete(self) -> bool:
        return len(self._replies) == self._expected

    def on_reply(self, subject: str, data: bytes, status: str | None) -> None:
        """A reply at `subject`; `status` the code of a status reply (503: no stream took
        the message), None for the stream's own JSON."""
        if not subject.startswith(self.prefix):
            return
        try:
            k = int(subject[len(self.prefix):])
        except ValueError:
            return
        if not 0 <= k < self._expected or k in self._replies:
            # Not one this window waits for. (A reply of an earlier window cannot come late:
            # each window waits for all of its own.)
            return
        self._replies[k] = (data, status)

    def ack(self, k: int, what: str) -> tuple[int, bool]:
        """(stream sequence, duplicate) of message k; PublishError, naming `what`, when the
        server refused it or no stream took its subject."""
        data, status = self._replies[k]
        if status:
            raise PublishError(f"{what}: no stream stored it (status {status}"
                               + (", no responders)" if status == "503" else ")"))
        try:
            reply = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise PublishError(f"{what}: the server replied {data[:200]!r}, not an "
                               "acknowledgement") from None
        error = reply.get("error") if isinstance(reply, dict) else None
        if error is not None or not isinstance(reply, dict) or "seq" not in reply:
            detail = error.get("description", error) if isinstance(error, dict) else reply
            raise PublishError(f"{what}: the stream refused it: {detail}")
        return int(reply["seq"]), bool(reply.get("duplicate", False))


def publish_file_log(root: str, location: str, recreate: bool = False,
                     partitioner: str = DEFAULT_PARTITIONER,
                     progress: Callable[[int, int], None] | None = None,
                     rate: float | None = None, routing: Routing | None = None,
                     topics: list[str] | None = None) -> dict:
    """Append the recording under `root` to the stream named by `location`, creating the
    stream (with its partition layout) when it is missing; `recreate` deletes it first. At
    `rate` messages per second when given (paced in windows of 1/20 s), else as fast as the
    server acknowledges. Each message carries `Nats-Msg-Id: <recording digest>/<topic>/p<N>/
    <offset>`, so publishing the same recording again inside the stream's duplicate window
    stores nothing twice (counted as `duplicates`). Returns a summary: stream, creation time,
    partitions, messages, duplicates, messages per subject, seconds."""
    loc = NatsLocation.parse(location)
    topics = topics or recorded_topics(root)
    log = FileLog(root, topics, _arrival_fields(topics))
    routing = routing or Routing()
    if routing.pipeline is not None:
        partitioner = routing.name
    partitions = routing.layout(log.partition_counts)
    description = encode_layout(partitions, partitioner)
    records = list(log.merged({}))
    digest = recording_digest(log)
    if rate is not None and rate <= 0:
        raise PublishError("--rate must be > 0 messages per second")
    window_size = PUBLISH_WINDOW if rate is None else max(1, min(PUBLISH_WINDOW, int(rate / 20)))
    t0 = time.perf_counter()

    async def prepare() -> dict[str, int]:
        """Check or create the stream: its messages per subject before."""
        from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
        from nats.js.errors import NotFoundError
        nc = await connect(loc)
        try:
            js = nc.jetstream(timeout=loc.timeout_s)
            try:
                info = await js.stream_info(loc.stream, subjects_filter=f"{loc.stream}.>")
                exists = True
            except NotFoundError:
                exists = False
            if exists and recreate:
                await js.delete_stream(loc.stream)
                exists = False
            if exists:
                layout = decode_layout(loc.stream, info.config.description)
                if layout["partitions"] != partitions or layout.get("partitioner") != partitioner:
                    raise PublishError(
                        f"stream {loc.stream!r} has layout {layout['partitions']} by "
                        f"{layout.get('partitioner')!r}; this recording would be published as "
                        f"{partitions} by {partitioner!r}: refusing to mix layouts in one stream")
                return dict(info.state.subjects or {})
            await js.add_stream(StreamConfig(
                name=loc.stream, subjects=[f"{loc.stream}.>"], description=description,
                retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
                discard=DiscardPolicy.NEW, max_msgs=-1, max_bytes=-1, max_age=0,
                deny_delete=True, deny_purge=True))
            return {}
        finally:
            await nc.close()

    def publish(conn: WireConnection) -> tuple[dict[str, int], int]:
        """Every record, a window at a time: (messages stored per subject, duplicates)."""
        last_seq = 0
        duplicates = 0
        added: dict[str, int] = {}
        acks = AckWindow(conn.acknowledgements)
        for start in range(0, len(records), window_size):
            window = records[start:start + window_size]
            subjects = [loc.subject(r.topic, routing.partition(r)) for r in window]
            conn.publish_window(
                [(subject, f"{digest}/{r.topic}/p{r.partition}/{r.offset}", r.line)
                 for r, subject in zip(window, subjects, strict=True)], acks)
            for k, (r, subject) in enumerate(zip(window, subjects, strict=True)):
                seq, duplicate = acks.ack(k, f"{r.topic}/p{r.partition} offset {r.offset}")
                if duplicate:
                    duplicates += 1
                    continue
                # One connection keeps publish order; the check proves it per message.
                if seq <= last_seq:
                    raise PublishError(f"{r.topic}/p{r.partition} offset {r.offset} was "
                                       f"stored as sequence {seq} after {last_seq}")
                last_seq = seq
                added[subject] = added.get(subject, 0) + 1
            if progress:
                progress(start + len(window), len(records))
            if rate is not None:
                ahead = t0 + (start + len(window)) / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
        return added, duplicates

    async def stream_now():
        nc = await connect(loc)
        try:
            return await nc.jetstream(timeout=loc.timeout_s).stream_info(
                loc.stream, subjects_filter=f"{loc.stream}.>")
        finally:
            await nc.close()

    try:
        before = run_private(prepare)
        conn = WireConnection(loc.server, loc.server_address, loc.timeout_s)
        try:
            added, duplicates = publish(conn)
        finally:
            conn.close()
        info = run_private(stream_now)
    except SourceError as exc:
        raise PublishError(str(exc)) from None
    counts = info.state.subjects or {}
    for subject, n in added.items():
        if counts.get(subject, 0) < before.get(subject, 0) + n:
            raise PublishError(f"{subject} holds {counts.get(subject, 0)} messages, "
                               f"expected at least {before.get(subject, 0) + n}")
    return {"stream": loc.stream, "server": loc.server_address,
            "stream_created": info.created.isoformat() if info.created else None,
            "partitions": partitions, "partitioner": partitioner,
            "messages": len(records) - duplicates, "duplicates": duplicates,
            "appended": bool(before), "recording": digest,
            "subjects": {loc.subject(t, p): added.get(loc.subject(t, p), 0)
                         for t, n in sorted(partitions.items()) for p in range(n)},
            "seconds": round(time.perf_counter() - t0, 3)}


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
