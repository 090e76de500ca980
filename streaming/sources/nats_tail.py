"""The live tail of a followed JetStream stream, over the client protocol itself (`nats_wire`).

Why not the client library: its ordered consumers delivered each message through a regular
expression, a header dict, a `Msg` and a queue hop on an event loop in a thread of the
worker's own: a third of a following worker's busy samples, in the thread that competes with
the worker's for the interpreter (docs/performance.md, forty-sixth round).

One connection and one thread. Per owned subject: an ephemeral pull consumer from the stream
sequence after the last message the source holds, and one pull request open at a time, each
expiring after the location's timeout and asked again. A request's messages come as they are
published, so a live message waits for nothing; a request that expires says so (status 408),
so an idle connection still hears from the server at least once a timeout, and nothing heard
for longer (the timeout and a grace) means the connection is gone.

Deliveries name their message's own subject (which subject, so which partition, they are).
Each request is named by its reply subject (`<inbox>.t.<k>.<serial>`), so its status names it
too. One request at a time, because the server hands a consumer's waiting requests one message
each in turn: with two open, no count could say which of them a delivery filled. And a request
is taken as ended at its expiry (and a short grace), whether or not its status comes: a server
that has a message to deliver as a request expires drops the request without a word (NATS
2.9's `nextWaiting`). Asked again only on a status, that subject's tail stopped for good while
the other subjects' statuses kept the connection alive (docs/performance.md, fifty-third
round). A status for a request already taken as ended, by its count or its expiry, changes
nothing.

A lost connection, a refusal or an unexpected status ends the connection: the tail reports the
broker down (`BrokerHealth`), and tries again every `RECONNECT_WAIT_S` with a new connection
and new consumers, each from the sequence after the last message it delivered, so nothing is
delivered twice or skipped. Consumers left behind on a server that stayed up are removed by it
after a minute without reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from .filelog import TP, SourceError
from .nats_wire import (PULL_BATCH, REQUEST_ENDED, STATUS_GRACE_S, TAIL_SID, WireConnection,
                        delivery_of, pull_size, status_of)

RECONNECT_WAIT_S: Final = 0.25
_IDLE_HEARTBEAT: Final = 100
# How long after its expiry a request whose status has not come is taken as ended. Taken too
# early, the server still holds it for a moment: its deliveries count against the next request,
# which is then asked again sooner, never later.
EXPIRY_GRACE_S: Final = 0.05

# (partition, stream sequence, messages the server holds beyond it, JetStream timestamp in
# ns, payload): one delivery, handed over in the tail's thread.
Deliver = Callable[[TP, int, int, int, bytes], None]


@dataclass
class BrokerHealth:
    """Connection events seen by the tail, in wall time (for metrics and the outage bound)."""

    connected: bool = True
    disconnected_since: float | None = None
    outages: int = 0
    outage_seconds: float = 0.0
    last_error: str | None = None

    def down(self) -> None:
        if self.connected:
            self.connected = False
            self.disconnected_since = time.monotonic()
            self.outages += 1

    def up(self) -> None:
        if not self.connected and self.disconnected_since is not None:
            self.outage_seconds += time.monotonic() - self.disconnected_since
        self.connected = True
        self.disconnected_since = None

    def down_for(self) -> float:
        if self.connected or self.disconnected_since is None:
            return 0.0
        return time.monotonic() - self.disconnected_since

    def as_dict(self) -> dict:
        return {"connected": self.connected, "outages": self.outages,
                "outage_seconds": round(self.outage_seconds + self.down_for(), 3),
                "last_error": self.last_error}


class _Followed:
    """One followed subject: its consumer on the current connection and its open request."""

    __slots__ = ("tp", "subject", "k", "next_seq", "consumer", "serial", "room", "ends_at",
                 "largest")

    def __init__(self, tp: TP, subject: str, k: int, next_seq: int) -> None:
        self.tp = tp
        self.subject = subject
        self.k = k
        self.next_seq = next_seq  # the stream sequence after the last one delivered
        self.consumer = ""
        self.serial = 0  # the open request's name (its reply subject's last token)
        self.room = 0  # messages the open request may still bring
        self.ends_at = 0.0  # when the open request is taken as ended (monotonic)
        self.largest = 0


class LiveTail:
    """Follows `starts` (partition -> (subject, stream sequence to start from)) of `stream`,
    handing each delivery to `deliver` in order, then calling `delivered` once per read that
    delivered any. The first connection is made in the constructor (a SourceError if it
    cannot be); the thread starts with `start`."""

    def __init__(self, server: str, address: str, timeout_s: float, stream: str,
                 starts: dict[TP, tuple[str, int]], deliver: Deliver,
                 delivered: Callable[[], None], health: BrokerHealth) -> None:
        self.server, self.address, self.timeout_s, self.stream = (server, address, timeout_s,
                                                                  stream)
        self._followed = [_Followed(tp, subject, k, start)
                          for k, (tp, (subject, start)) in enumerate(starts.items())]
        self._by_subject = {f.subject.encode(): f for f in self._followed}
        self._deliver = deliver
        self._delivered = delivered
        self.health = health
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # the connection, as `close` may end it from outside
        self._conn: WireConnection | None = None
        self._thread: threading.Thread | None = None
        self._heard = 0.0  # when the connection last brought anything (monotonic)
        self._connect()

    # -- the thread ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nats-tail", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop following: the thread's read ends at once, and the thread with it."""
        self._stopping.set()
        with self._lock:
            if self._conn is not None:
                self._conn.abort()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 5)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if self._conn is None and self._connect():
                    self.health.up()
                self._pump()
            except Exception as exc:
                # Whatever ends a read (a lost connection, a refusal, a status, or a reply that is
                # not JSON, say) is handled the same way, never by the thread ending quietly: the
                # worker would wait on a tail that no longer delivers, its broker reported up.
                # Down, the worker's outage limit ends the run (exit 8, its line naming this
                # error) unless a reconnect cures it first.
                if self._stopping.is_set():
                    return
                self.health.down()
                self.health.last_error = (str(exc) if isinstance(exc, (SourceError, OSError))
                                          else f"{type(exc).__name__}: {exc}")
                self._drop()
                self._stopping.wait(RECONNECT_WAIT_S)

    def _connect(self) -> bool:
        """A new connection with a new consumer per subject, each from the sequence after the
        last delivered, and its first requests: False if `close` came first (the connection is
        then closed again)."""
        conn = WireConnection(self.server, self.address, self.timeout_s, "riskstream-follow")
        try:
            for f in self._followed:
                f.consumer = conn.create_consumer(self.stream, f.subject, f.next_seq)
            for f in self._followed:
                self._ask(conn, f)
        except BaseException:
            conn.close()
            raise
        with self._lock:
            if self._stopping.is_set():
                conn.close()
                return False
            self._conn = conn
        self._heard = time.monotonic()
        return True

    def _drop(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _ask(self, conn: WireConnection, f: _Followed) -> None:
        """Ask for the subject's next request: the one before has ended (filled, its status
        come, or past its expiry)."""
        n = pull_size(PULL_BATCH, f.largest or conn.max_payload)
        f.serial += 1
        conn.pull(self.stream, f.consumer, f"{conn.tail_replies}{f.k}.{f.serial}", n,
                  self.timeout_s)
        f.room = n
        f.ends_at = time.monotonic() + self.timeout_s + EXPIRY_GRACE_S

    def _pump(self) -> None:
        """One read of the connection, and what it brought: deliveries handed on, ended
        requests asked again (those past their expiry too). A status other than an ended
        request is a SourceError, and so is nothing heard for the timeout and its grace."""
        conn = self._conn
        if conn is None:
            return
        now = time.monotonic()
        for followed in self._followed:
            if now >= followed.ends_at:
                self._ask(conn, followed)  # its status did not come: the server dropped it
        silent_until = self._heard + self.timeout_s + STATUS_GRACE_S
        wake = min([followed.ends_at for followed in self._followed], default=silent_until)
        if not conn.receive(min(wake, silent_until) - now, "following the stream"):
            if time.monotonic() >= silent_until:
                raise SourceError(f"NATS at {conn.address}: nothing for "
                                  f"{self.timeout_s + STATUS_GRACE_S}s following the stream, "
                                  f"not even the expiry of a pull request")
            return
        self._heard = time.monotonic()
        any_delivered = False
        for frame in conn.reader.frames():
            if frame.sid != TAIL_SID:
                continue  # a late reply to an API request
            status = status_of(frame.headers) if frame.headers else None
            if status is not None:
                self._ended(conn, frame.subject, status)
                continue
            f = self._by_subject.get(frame.subject)
            if f is None:
                raise SourceError(f"a delivery on {frame.subject!r}, which no request of this "
                                  f"tail asked for")
            seq, pending, stamp = delivery_of(frame.reply.decode("ascii", "replace"))
            if seq < f.next_seq:
                raise SourceError(f"{f.subject}: stream sequence {seq} after {f.next_seq - 1}")
            f.next_seq = seq + 1
            size = len(frame.data)
            if size > f.largest:
                f.largest = size
            f.room -= 1
            if f.room <= 0:
                self._ask(conn, f)  # filled
            self._deliver(f.tp, seq, pending, stamp, frame.data)
            any_delivered = True
        if any_delivered:
            self._delivered()

    def _ended(self, conn: WireConnection, reply: bytes, status: tuple[int, str]) -> None:
        code, text = status
        if code == _IDLE_HEARTBEAT:
            return
        prefix = conn.tail_replies.encode()
        k_text, _, serial_text = (reply[len(prefix):] if reply.startswith(prefix)
                                  else b"").partition(b".")
        f = (self._followed[int(k_text)] if k_text.isdigit() and int(k_text) < len(
            self._followed) and serial_text.isdigit() else None)
        if f is None:
            raise SourceError(f"status {code} {text} on {reply!r}, which no request of this "
                              f"tail was sent to")
        if code not in REQUEST_ENDED:
            raise SourceError(f"{f.subject}: the server ended a pull request with status "
                              f"{code} {text}")
        if int(serial_text) == f.serial:
            self._ask(conn, f)
