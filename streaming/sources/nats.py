"""NATS JetStream source: one stream, one subject per topic-partition.

Layout: location `nats://HOST:PORT?stream=NAME` (stream defaults to `riskstream`); subjects
`NAME.<topic>.p<N>`; the partition count of every topic is a property of the stream, written
as JSON into the stream's description when the stream is created (see `encode_layout`), so a
partition that never received a message still counts. Offsets are 0-based per subject; the
source maps them to JetStream stream sequences internally.

Reading: a run reads a snapshot. At open the source asks the server how many messages each
subject holds (the client library, on a private event loop), then fetches exactly those with
one ephemeral pull consumer per subject (no acks, deleted afterwards) over connections that
speak the client protocol itself (`nats_wire`; the location's `readers`, two by default, read
subjects at once), and closes every connection. Records
published later are read by the next run, exactly as a file log that grew. Replay order,
arrival times and `caught_up` follow the file log's rules (shared functions), so a recording
replays in the same order from either source.

Positions live only in the store's checkpoints and journal, committed in the same transaction
as the facts; `ack` keeps no broker-side consumer state (see `NatsSource.ack`)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import orjson

from .filelog import (DEFAULT_MAX_ARRIVAL_JUMP_US, TP, PartitionBuffer, SourceError,
                      SourceFault, decode_partitions)
from .nats_wire import fetch_subjects

log = logging.getLogger(__name__)

DEFAULT_STREAM = "riskstream"
DEFAULT_TIMEOUT_S = 5.0
# Connections reading a snapshot's subjects at once: two kept the server busy on both of a
# 2-core machine's cores (docs/performance.md, forty-sixth round).
DEFAULT_READERS = 2
MAX_READERS = 64
LAYOUT_KIND = "riskstream-layout"
LAYOUT_VERSION = 1
# Stream names may not contain '.', '*', '>', path separators or whitespace.
_STREAM_RE = re.compile(r"^[A-Za-z0-9_-]+$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9_-]+$")

T = TypeVar("T")


@dataclass(frozen=True)
class NatsLocation:
    """A parsed `nats://HOST:PORT?stream=NAME[&timeout=SECONDS][&readers=N]` location. The
    port defaults to 4222; timeout (default 5) bounds connecting, each JetStream request and a
    stall while reading a subject; readers (default 2, at most 64) is how many connections
    read a snapshot's subjects at once. Credentials in the URL (`nats://USER:PASSWORD@HOST`)
    are used to connect and never shown: messages and identities name `server_address`
    only."""

    server: str = field(repr=False)  # the connect URL, credentials included
    server_address: str  # host:port
    stream: str = DEFAULT_STREAM
    timeout_s: float = DEFAULT_TIMEOUT_S
    readers: int = DEFAULT_READERS

    @classmethod
    def parse(cls, location: str) -> NatsLocation:
        parts = urlsplit(location)
        if "@" in parts.netloc:
            location = location.replace(parts.netloc, "***@" + parts.netloc.rsplit("@", 1)[1])
        if parts.scheme != "nats" or not parts.hostname:
            raise SourceError(f"not a NATS location: {location!r} "
                              f"(expected nats://HOST:PORT?stream=NAME)")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = set(query) - {"stream", "timeout", "readers"}
        if unknown:
            raise SourceError(f"unknown NATS location parameter(s) {sorted(unknown)} in "
                              f"{location!r}; known: stream, timeout, readers")
        stream = query.get("stream", DEFAULT_STREAM)
        if not _STREAM_RE.match(stream):
            raise SourceError(f"invalid stream name {stream!r}: use letters, digits, '_' and '-'")
        try:
            timeout_s = float(query.get("timeout", DEFAULT_TIMEOUT_S))
        except ValueError as exc:
            raise SourceError(f"invalid NATS location parameter in {location!r}: {exc}") from None
        if timeout_s <= 0:
            raise SourceError(f"timeout must be > 0 in {location!r}")
        readers_text = query.get("readers", str(DEFAULT_READERS))
        if not readers_text.isdigit() or not 1 <= int(readers_text) <= MAX_READERS:
            raise SourceError(f"readers must be a whole number from 1 to {MAX_READERS} in "
                              f"{location!r}, not {readers_text!r}")
        netloc = parts.netloc
        address = netloc.rsplit("@", 1)[-1]
        if parts.port is None:
            netloc, address = f"{netloc}:4222", f"{address}:4222"
        return cls(f"nats://{netloc}", address, stream, timeout_s, int(readers_text))

    def subject(self, topic: str, partition: int) -> str:
        return f"{self.stream}.{topic}.p{partition}"


def encode_layout(partitions: dict[str, int], partitioner: str) -> str:
    """The stream description that declares the partition layout."""
    for topic in partitions:
        if not _TOPIC_RE.match(topic):
            raise SourceError(f"topic {topic!r} cannot be a subject token: use letters, digits, "
                              f"'_' and '-'")
    return orjson.dumps({"kind": LAYOUT_KIND, "version": LAYOUT_VERSION,
                         "partitions": dict(sorted(partitions.items())),
                         "partitioner": partitioner}).decode()


def decode_layout(stream: str, description: str | None) -> dict:
    try:
        layout = orjson.loads(description or "")
    except orjson.JSONDecodeError:
        layout = None
    if not isinstance(layout, dict) or layout.get("kind") != LAYOUT_KIND:
        raise SourceError(f"stream {stream!r} declares no partition layout in its description "
                          f"(streams are created by `riskstream nats publish`, which writes it)")
    if layout.get("version") != LAYOUT_VERSION:
        raise SourceError(f"stream {stream!r} has layout version {layout.get('version')!r}; "
                          f"this code reads version {LAYOUT_VERSION}")
    parts = layout.get("partitions")
    if (not isinstance(parts, dict)
            or not all(isinstance(n, int) and n >= 1 for n in parts.values())):
        raise SourceError(f"stream {stream!r} has an invalid partition layout: {parts!r}")
    return layout


def run_private(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion on a private event loop in its own thread, so the
    synchronous worker can use the asyncio client even when the caller already runs a loop."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as exc:  # re-raised in the calling thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="nats-source", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def connect(loc: NatsLocation):
    import nats
    try:
        return await nats.connect(loc.server, connect_timeout=loc.timeout_s,
                                  allow_reconnect=False, max_reconnect_attempts=0)
    except Exception as exc:  # the client raises several types for the same cause
        raise SourceError(f"cannot connect to NATS at {loc.server_address}: "
                          f"{type(exc).__name__}: {exc}") from None


def removed_messages(state) -> int:
    """Messages the stream no longer holds. A stream that never lost a message keeps
    sequences 1..last_seq; any removal would shift per-subject offsets."""
    return state.last_seq - state.messages


class NatsSource(PartitionBuffer):
    kind = "nats"

    def __init__(self, location: str, topics: list[str],
                 arrival_field: dict[str, str] | None = None,
                 max_arrival_jump_us: int | None = DEFAULT_MAX_ARRIVAL_JUMP_US):
        self.location = NatsLocation.parse(location)
        self.max_arrival_jump_us = max_arrival_jump_us
        self.topics = list(topics)
        self._arrival_field = arrival_field or {}
        self._lines: dict[TP, list[bytes]] = {}
        self._seqs: dict[TP, list[int]] = {}
        self._faults: dict[TP, list[SourceFault | None]] = {}
        self._arrivals: dict[TP, list[int]] = {}
        self._fp_cache: dict[TP, tuple[int, Any]] = {}
        self.partition_counts: dict[str, int] = {}
        self.partitioner = ""
        self.stream_created = ""
        self._fetch(run_private(self._load))
        self._faults, self._arrivals, held = decode_partitions(
            self._lines, self._arrival_field, max_arrival_jump_us, self._hold_trailing())
        for tp in held:
            # Not a record yet: the live tail delivers it again and judges it there.
            self._lines[tp].pop()
            self._seqs[tp].pop()
            self._faults[tp].pop()
            self._arrivals[tp].pop()

    def _hold_trailing(self) -> bool:
        """Whether a partition's last record that nothing confirms is held back (a live
        source, where later records will judge it) rather than judged a jump now."""
        return False

    # -- loading -----------------------------------------------------------------------------
    async def _load(self) -> list[tuple[TP, int]]:
        """The stream's layout and how many messages each subject holds now: the
        snapshot, as (topic-partition, count) in reading order."""
        from nats.js.errors import NotFoundError
        loc = self.location
        nc = await connect(loc)
        log.debug("connected to NATS at %s, stream %s", loc.server_address, loc.stream)
        try:
            js = nc.jetstream(timeout=loc.timeout_s)
            try:
                info = await js.stream_info(loc.stream, subjects_filter=f"{loc.stream}.>")
            except NotFoundError:
                raise SourceError(f"stream {loc.stream!r} does not exist at "
                                  f"{loc.server_address} (create it with `riskstream nats "
                                  f"publish`)") from None
            layout = decode_layout(loc.stream, info.config.description)
            lost = removed_messages(info.state)
            if lost:
                raise SourceError(
                    f"stream {loc.stream!r} no longer holds {lost} of its {info.state.last_seq} "
                    f"messages (first sequence {info.state.first_seq}): per-subject offsets "
                    f"would shift, so the source refuses it")
            self.partitioner = str(layout.get("partitioner", ""))
            self.stream_created = info.created.isoformat() if info.created else ""
            counts = info.state.subjects or {}
            wanted: list[tuple[TP, int]] = []
            for topic in self.topics:
                n = layout["partitions"].get(topic)
                if n is None:
                    raise SourceError(f"topic {topic!r} is not in the layout of stream "
                                      f"{loc.stream!r} (it has {sorted(layout['partitions'])})")
                self.partition_counts[topic] = n
                prefix = f"{loc.stream}.{topic}."
                outside = sorted(s for s in counts if s.startswith(prefix)
                                 and s not in {loc.subject(topic, p) for p in range(n)})
                if outside:
                    raise SourceError(f"stream {loc.stream!r} holds messages on {outside}, "
                                      f"outside its declared {n} partition(s) of {topic!r}")
                wanted += [((topic, p), counts.get(loc.subject(topic, p), 0)) for p in range(n)]
            return wanted
        finally:
            await nc.close()

    def owns(self, tp: TP) -> bool:
        """Whether this source reads `tp` (a following worker reads only its own)."""
        return True

    def _fetch(self, wanted: list[tuple[TP, int]]) -> None:
        """Read the snapshot: each subject's first `count` messages, in stream order, over
        connections of the client protocol's own (`nats_wire`: the client library's
        per-message work was most of a snapshot's reading), the location's `readers` at
        once."""
        loc = self.location
        subjects = {tp: loc.subject(*tp) for tp, _ in wanted}
        read = fetch_subjects(loc.server, loc.server_address, loc.timeout_s, loc.stream,
                              [(subjects[tp], count) for tp, count in wanted
                               if self.owns(tp)], loc.readers)
        for tp, _ in wanted:
            self._lines[tp], self._seqs[tp] = read.get(subjects[tp], ([], []))

    def stream_sequence(self, tp: TP, offset: int) -> int:
        """The JetStream stream sequence of the subject's message at `offset`."""
        return self._seqs[tp][offset]

    def fingerprint(self, tp: TP, upto: int) -> str:
        """sha256 of the subject's first `upto` payloads, each followed by a newline: the same
        value the file log computes for the same lines, so a recording keeps its fingerprints
        when it is published (and `riskstream nats publish` can be verified against it)."""
        lines = self._lines[tp]
        if upto > len(lines):
            return "beyond-end"
        done, h = self._fp_cache.get(tp, (0, None))
        if h is None or upto < done:
            done, h = 0, hashlib.sha256()
        else:
            h = h.copy()
        for line in lines[done:upto]:
            h.update(line)
            h.update(b"\n")
        self._fp_cache[tp] = (upto, h)
        return h.hexdigest()

    def identity(self) -> dict:
        return {"kind": self.kind, "server": self.location.server_address,
                "stream": self.location.stream, "stream_created": self.stream_created,
                "partitions": dict(self.partition_counts), "hash": self.partitioner,
                "layout_version": LAYOUT_VERSION}

    def restore_refusal(self, saved: dict) -> str | None:
        """Why a checkpoint written against `saved` (a source identity) must not be restored
        here, or None. Partition counts are compared by the worker; a stream is one log only
        while it is the same stream object: another name, a recreated stream (another creation
        time) or another key->partition function is another log. The server address may change
        (clusters move); a checkpoint of another source kind is judged by its fingerprints."""
        if saved.get("kind") != self.kind:
            return None
        mine = self.identity()
        for key, what in (("stream", "stream name"), ("stream_created", "stream creation time"),
                          ("hash", "partitioner")):
            if saved.get(key) != mine[key]:
                return (f"the checkpoint was taken on NATS {what} {saved.get(key)!r}, the source "
                        f"is {mine[key]!r} (stream {self.location.stream!r} at "
                        f"{self.location.server_address}): another stream")
        return None

    def ack(self, ranges: dict[TP, tuple[int, int]]) -> None:
        """No broker-side acknowledgement. Consumed positions are committed in the store, in the
        same transaction as the batch's facts, and a restore resumes from the latest checkpoint
        and replays the journal from there, which can lie before the last committed batch. A
        durable consumer's ack floor would be a second, non-atomic copy of the position that
        restore could never use, and an acknowledgement-driven retention (work queue, interest)
        would delete the messages a restore must replay. The stream therefore keeps limits
        retention and the source reads it by sequence."""
        return None
