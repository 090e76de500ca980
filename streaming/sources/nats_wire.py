"""A snapshot's messages pulled from JetStream over the NATS client protocol itself.

Why not the client library: reading a snapshot through it took about 10 µs a message (a
1,000,000-message snapshot opened in 11.3-11.7 s), most of it the client's own Python: a
regular expression per frame, a header dict and a `Msg` per message, a queue hop to the
callback, the ordered consumer's metadata. The source needs three things of each message: its
bytes, its stream sequence and that it came in order (docs/performance.md, forty-fifth
round). This module speaks just enough of the
protocol for that, on one blocking socket:

- connect: the server's `INFO`, our `CONNECT` (headers on, no echo, the URL's credentials as
  the client library sends them: user and password, or a lone user as a token) and a
  `PING`/`PONG`, so a refusal (`-ERR`) is seen at once;
- subscriptions on a private inbox: API replies, a snapshot's deliveries, publish
  acknowledgements, and a live tail's deliveries and request statuses (`nats_tail`); a
  delivery names its message's own subject, so the subscription tells them apart;
- per subject: an ephemeral pull consumer (deliver all, no acks, filtered to the subject),
  batches pulled `PULL_DEPTH` requests at a time (up to `PULL_BATCH` messages and about
  `PULL_BYTES` each, each request expiring after the location's timeout), and the consumer
  deleted at the end;
- several subjects at once: `fetch_subjects` shares them among a few connections, each read
  by its own thread (the server serves each connection on its own, and a reader waiting on
  its socket leaves the interpreter to the others);
- frames parsed from a buffer of whole socket reads: `MSG`/`HMSG` (a status in an `HMSG`'s
  headers ends a pull request), `PING` (answered), `-ERR` (fatal), `INFO`/`+OK`/`PONG`.

The server sends a pull request's messages in stream order; a subject's first `count`
messages are exactly the snapshot's, since the source refuses streams that lost messages.
A stall (nothing for the timeout) and every refusal are `SourceError`s naming the subject."""

from __future__ import annotations

import os
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Final, Protocol
from urllib.parse import urlsplit

import orjson

from .. import native
from .records import SourceError

# Messages asked for per pull request at most, and requests open at once: the server fills the
# next while the reader takes the last. A request also asks for no more than PULL_BYTES by the
# largest message seen so far (by the server's `max_payload` before any), so what is in flight
# stays far below the 64 MB a server lets a reader fall behind before it drops the connection
# as a slow consumer, whatever the messages' size (`pull_size`).
PULL_BATCH = 8192
PULL_DEPTH = 2
PULL_BYTES = 8 << 20
# Bytes asked of the socket per read.
_READ = 1 << 20
_CRLF = b"\r\n"
# How much longer than a pull request's expiry a read waits for the server's word on it.
STATUS_GRACE_S: Final = 1.0
# A wait of 0 would make the socket non-blocking, a different error path: waits are at least this.
_SHORTEST_WAIT_S = 0.001
# The connection's subscription IDs, as the frames carry them: API replies, a snapshot's
# deliveries, publish acknowledgements, and a live tail's deliveries and the statuses of its
# pull requests (`nats_tail`).
_REPLIES_SID, _DELIVERIES_SID, _ACKS_SID, TAIL_SID = b"1", b"2", b"3", b"4"
# A consumer left behind by a process that died mid-read goes after this long without reads.
_INACTIVE_NS = 60 * 1_000_000_000
# Statuses that end a pull request without a fault: expired (408), or nothing to wait for
# (404, a request that does not wait).
REQUEST_ENDED: Final = (404, 408)


def delivery_of(reply: str) -> tuple[int, int, int]:
    """(stream sequence, messages pending, JetStream timestamp in ns) of a message a
    JetStream consumer delivered, read from its reply subject: `$JS.ACK.<stream>.<consumer>.
    <delivered>.<stream seq>.<consumer seq>.<ns>.<pending>`, or the form with a domain and an
    account hash after `$JS.ACK.` (and a token at the end).

    The client's `Msg.metadata` reads the same tokens into a dataclass with a datetime: 13% of
    a following worker's delivery thread's samples (a fifth of its busy time), a thread the
    worker's own competes with for the interpreter (docs/performance.md, forty-fourth round)."""
    tokens = reply.split(".") if reply else []
    n = len(tokens)
    if n >= 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        try:
            if n == 9:
                return int(tokens[5]), int(tokens[8]), int(tokens[7])
            if n >= 11:
                return int(tokens[7]), int(tokens[10]), int(tokens[9])
        except ValueError:
            pass
    raise SourceError(f"a delivered message's reply subject {reply[:200]!r} is not a "
                      "JetStream acknowledgement subject")


def status_of(headers: bytes) -> tuple[int, str] | None:
    """(code, description) of a status message's headers (`NATS/1.0 408 Request Timeout`);
    None for a message's own headers (`NATS/1.0` alone on the first line)."""
    if headers[8:9] != b" ":  # asked of every message: the cheap test first
        return None
    first = headers.split(_CRLF, 1)[0]
    try:
        return int(first[9:12]), first[13:].decode("utf-8", "replace").strip()
    except ValueError:
        return None


class ServerRefused(SourceError):
    """The server's `-ERR`: its reason (it closes the connection after most of them)."""

    def __str__(self) -> str:
        return f"the NATS server refused: {self.args[0]}"


class Frame:
    """A message frame: its subject, the subscription it came through (`sid`), its reply
    subject (b"" for none), headers (b"" for `MSG`) and payload. A JetStream delivery names
    the message's own subject, not the inbox it was sent to: deliveries are told apart by
    their subscription."""

    __slots__ = ("subject", "sid", "reply", "headers", "data")

    def __init__(self, subject: bytes, sid: bytes, reply: bytes, headers: bytes, data: bytes):
        self.subject, self.sid, self.reply = subject, sid, reply
        self.headers, self.data = headers, data


class WireReader:
    """Frames from the bytes a NATS server sends, fed in pieces as they are read (any split,
    even inside a control line or a payload). Control frames the reader answers or ignores;
    `frames` yields message frames only and says when it needs more bytes."""

    def __init__(self) -> None:
        self.data = b""
        self.pos = 0
        self.pings = 0  # server PINGs seen: each owes a PONG (the connection sends it)
        self.pongs = 0

    def feed(self, chunk: bytes) -> None:
        self.data = self.data[self.pos:] + chunk if self.pos < len(self.data) else chunk
        self.pos = 0

    def frames(self) -> Iterator[Frame]:
        """Message frames in the buffer, in order; stops at the first incomplete frame. A
        message frame that breaks the protocol's grammar is a SourceError."""
        while True:
            data, pos = self.data, self.pos
            end = data.find(_CRLF, pos)
            if end < 0:
                return
            line = data[pos:end]
            parts = line.split() if line.startswith((b"MSG", b"HMSG")) else None
            if parts and parts[0] in (b"MSG", b"HMSG"):
                frame = self._message(parts, end + 2)
                if frame is None:
                    return  # the payload is not all here yet
                yield frame
                continue
            self.pos = end + 2
            if line == b"PING":
                self.pings += 1
            elif line == b"PONG":
                self.pongs += 1
            elif line.startswith(b"-ERR"):
                raise ServerRefused(line[5:].decode("utf-8", "replace").strip().strip("'"))
            elif line.startswith((b"INFO", b"+OK")) or not line:
                pass
            else:
                raise SourceError(f"unexpected line from the NATS server: {line[:200]!r}")

    def _message(self, parts: list[bytes], start: int) -> Frame | None:
        """The message frame whose control line's arguments are `parts` and whose payload
        starts at `start` (the position moved past it); None while it is not all here."""
        data = self.data
        headed = parts[0] == b"HMSG"
        # subject sid [reply] [header size] size
        if len(parts) not in ((5, 6) if headed else (4, 5)):
            raise SourceError(f"a malformed message frame from the NATS server: "
                              f"{b' '.join(parts)[:200]!r}")
        try:
            size = int(parts[-1])
            hsize = int(parts[-2]) if headed else 0
        except ValueError:
            size = hsize = -1
        if size < 0 or not 0 <= hsize <= size:
            raise SourceError(f"a message frame with impossible sizes from the NATS server: "
                              f"{b' '.join(parts)[:200]!r}")
        stop = start + size
        if stop + 2 > len(data):
            return None
        if data[stop:stop + 2] != _CRLF:
            raise SourceError(f"a message from the NATS server does not end where its size "
                              f"says: {b' '.join(parts)[:200]!r}")
        self.pos = stop + 2
        reply = parts[3] if len(parts) == (6 if headed else 5) else b""
        return Frame(parts[1], parts[2], reply, data[start:start + hsize],
                     data[start + hsize:stop])

    def take_deliveries(self, subject: str, want: int, lines: list[bytes], seqs: list[int]
                        ) -> tuple[int, int | None]:
        """Move up to `want` deliveries of the delivery subscription from the buffer into
        `lines` (payloads) and `seqs` (stream sequences, each above the one before). (How many
        were taken, the status that ended the pull request or None.) Returns early when the
        buffer holds no complete frame. Frames of the other subscription are passed over.

        Runs of plain deliveries go through `DELIVERIES` (C, where the compiled core is in use)
        and the rest through `frames`, which decides every case by the full rules."""
        taken = 0
        fast = DELIVERIES
        while taken < want:
            before = len(lines)
            self.pos = fast(self.data, self.pos, _DELIVERIES_SID, want - taken, lines, seqs)
            taken += len(lines) - before
            if taken == want:
                break
            frame = next(self.frames(), None)
            if frame is None:
                break
            if frame.sid != _DELIVERIES_SID:
                continue  # a late reply to an earlier API request
            status = status_of(frame.headers) if frame.headers else None
            if status is not None:
                if status[0] in REQUEST_ENDED:
                    return taken, status[0]  # the request expired: ask again, or stall
                raise SourceError(f"{subject}: the server ended the read with status "
                                  f"{status[0]} {status[1]}")
            seq = delivery_of(frame.reply.decode("ascii", "replace"))[0]
            last = seqs[-1] if seqs else 0
            if seq <= last:
                raise SourceError(f"{subject}: stream sequence {seq} after {last}")
            lines.append(frame.data)
            seqs.append(seq)
            taken += 1
        return taken, None


def py_deliveries(data: bytes, pos: int, sid: bytes, limit: int, lines: list[bytes],
                  seqs: list[int]) -> int:
    """The C fast path's twin (`streaming/_wire.c`): it may take any prefix of plain
    deliveries, and taking none is one. Without the compiled core every frame goes through
    `WireReader.frames`."""
    return pos


# Decided once, when the package's build is (streaming.native.select runs before this import).
DELIVERIES: Final[Callable[[bytes, int, bytes, int, list[bytes], list[int]], int]] = (
    native.hand_written("streaming._wire", "deliveries") or py_deliveries)


class Acknowledgements(Protocol):
    """What `WireConnection.publish_window` fills: the replies of one window of messages
    (`nats_publish.AckWindow`, which also judges them)."""

    def reply_subject(self, k: int) -> str: ...

    def expect(self, n: int) -> None: ...

    def on_reply(self, subject: str, data: bytes, status: str | None) -> None: ...

    @property
    def received(self) -> int: ...

    @property
    def complete(self) -> bool: ...


def pull_size(wanted: int, largest: int) -> int:
    """Messages to ask for in one pull request: at most `wanted`, PULL_BATCH and PULL_BYTES
    worth of messages of `largest` bytes, and at least one."""
    return max(1, min(wanted, PULL_BATCH, PULL_BYTES // max(largest, 1)))


class OpenRequests:
    """A snapshot read's open pull requests, oldest first, each delivery and each status counted
    against the oldest. The server does not fill them in that order (it hands a consumer's
    waiting requests one message each in turn), so the count per request is not the server's;
    the count of messages still outstanding is, as long as no request expires, and a snapshot
    asks only for messages the stream already holds, which come at once. Should one expire, the
    read stops hearing from the server and its timeout ends it as a stall, never a quiet one.
    The live tail, whose requests expire all the time, keeps one request open per subject and
    names each (`nats_tail`)."""

    __slots__ = ("_open", "outstanding")

    def __init__(self) -> None:
        self._open: deque[list[int]] = deque()  # [asked, received] of each
        self.outstanding = 0  # messages asked for that open requests may still bring

    def __len__(self) -> int:
        return len(self._open)

    def asked(self, n: int) -> None:
        self._open.append([n, 0])
        self.outstanding += n

    def room(self) -> int:
        """Messages the oldest request may still bring."""
        oldest = self._open[0]
        return oldest[0] - oldest[1]

    def received(self, n: int) -> bool:
        """`n` messages came for the oldest request: whether that filled it (it is then no
        longer open)."""
        oldest = self._open[0]
        oldest[1] += n
        self.outstanding -= n
        if oldest[1] == oldest[0]:
            self._open.popleft()
            return True
        return False

    def ended(self) -> int:
        """The oldest request ended before it was filled (its status came): how many messages
        it brought. What it did not bring is no longer outstanding."""
        asked, received = self._open.popleft()
        self.outstanding -= asked - received
        return received


def reading_shares(wanted: list[tuple[str, int]], readers: int) -> list[list[tuple[str, int]]]:
    """`wanted` (subject, messages) shared among at most `readers` connections so each reads
    about as many messages: the largest subject first, each to the share with the fewest so
    far (the first of equals). Subjects with no messages are left out; each share keeps the
    subjects in the order it was given them."""
    jobs = [(subject, n) for subject, n in wanted if n > 0]
    shares: list[list[tuple[str, int]]] = [[] for _ in range(min(max(readers, 1), len(jobs)))]
    totals = [0] * len(shares)
    for subject, n in sorted(jobs, key=lambda job: -job[1]):
        i = totals.index(min(totals))
        shares[i].append((subject, n))
        totals[i] += n
    return shares


class _Readers:
    """What the readers of `fetch_subjects` share: the subjects read so far, the first error
    and the connections open, so that error stops every other reader at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.error: BaseException | None = None
        self.open: list[WireConnection] = []
        self.read: dict[str, tuple[list[bytes], list[int]]] = {}

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            if self.error is not None:
                return  # another reader's failure ended this one: the first error stands
            self.error = exc
            for conn in self.open:
                conn.abort()

    def run(self, server: str, address: str, timeout_s: float, stream: str,
            share: list[tuple[str, int]]) -> None:
        try:
            conn = WireConnection(server, address, timeout_s)
        except BaseException as exc:
            self.fail(exc)
            return
        try:
            with self.lock:
                if self.error is not None:
                    return
                self.open.append(conn)
            for subject, count in share:
                self.read[subject] = conn.fetch_subject(stream, subject, count)
        except BaseException as exc:
            self.fail(exc)
        finally:
            with self.lock:
                if conn in self.open:
                    self.open.remove(conn)
            conn.close()


def fetch_subjects(server: str, address: str, timeout_s: float, stream: str,
                   wanted: list[tuple[str, int]], readers: int
                   ) -> dict[str, tuple[list[bytes], list[int]]]:
    """Each (subject, count) of `wanted` read as `WireConnection.fetch_subject` reads it,
    over up to `readers` connections at once (`reading_shares`), each in its own thread; one
    reader reads in the calling thread. A subject with no messages is not asked for and is
    absent from the result. The first failure of any reader is raised, after it has closed
    the others' connections: their reads end there, and what they say then is not reported.
    Which of two failing subjects is named first depends on which failed first."""
    shares = reading_shares(wanted, readers)
    state = _Readers()
    if len(shares) == 1:
        state.run(server, address, timeout_s, stream, shares[0])
    elif shares:
        threads = [threading.Thread(target=state.run, daemon=True, name=f"nats-reader-{i}",
                                    args=(server, address, timeout_s, stream, share))
                   for i, share in enumerate(shares)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        except BaseException as exc:  # interrupted while waiting: stop the readers too
            state.fail(exc)
            raise
    if state.error is not None:
        raise state.error
    return state.read


class WireConnection:
    """One blocking connection to a NATS server (see the module's docstring)."""

    def __init__(self, server: str, address: str, timeout_s: float,
                 name: str = "riskstream-snapshot"):
        self.address = address
        self.timeout_s = timeout_s
        url = urlsplit(server)
        try:
            self.sock = socket.create_connection((url.hostname, url.port or 4222), timeout_s)
        except OSError as exc:
            raise SourceError(f"cannot connect to NATS at {address}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A pull request expires after the timeout and the server then says so (status 408):
        # reads wait a little longer, so a stall is reported as the server saw it.
        self.sock.settimeout(timeout_s + STATUS_GRACE_S)
        self.reader = WireReader()
        self.inbox = f"_INBOX.rs{os.urandom(8).hex()}"
        self.deliveries = f"{self.inbox}.m"
        self.acknowledgements = f"{self.inbox}.a."  # publish_window's replies: this + k
        # A tail's pull requests' replies: this + "<k>.<serial>" (`nats_tail`).
        self.tail_replies = f"{self.inbox}.t."
        self._requests = 0
        try:
            info = self._info()
            if info.get("tls_required"):
                raise SourceError(f"the NATS server at {address} requires TLS, which a "
                                  f"nats:// location does not use")
            options: dict = {"verbose": False, "pedantic": False, "lang": "python",
                             "version": "riskstream", "protocol": 1, "headers": True,
                             "no_responders": True, "echo": False, "name": name}
            if url.username is not None and url.password is not None:
                options["user"], options["pass"] = url.username, url.password
            elif url.username is not None:
                options["auth_token"] = url.username
            self._send(b"CONNECT " + orjson.dumps(options) + b"\r\nPING\r\n")
            while self.reader.pongs == 0:
                self._read("waiting for the server to accept the connection")
                try:
                    for frame in self.reader.frames():
                        raise SourceError(f"unexpected message on {frame.subject!r} while "
                                          f"connecting")
                except ServerRefused as exc:
                    raise SourceError(f"cannot connect to NATS at {address}: {exc}") from None
            self.max_payload = int(info.get("max_payload") or 1 << 20)
            # API replies, deliveries and publish acknowledgements, each through its own.
            self._send(b"SUB %s.r.* %s\r\nSUB %s %s\r\nSUB %s* %s\r\nSUB %s> %s\r\n" % (
                self.inbox.encode(), _REPLIES_SID, self.deliveries.encode(), _DELIVERIES_SID,
                self.acknowledgements.encode(), _ACKS_SID, self.tail_replies.encode(),
                TAIL_SID))
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def abort(self) -> None:
        """End the connection from another thread: a read waiting on it returns at once (as
        the server closing it), where `close` would leave that read waiting."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed

    def _info(self) -> dict:
        """The server's greeting (`INFO {...}`)."""
        r = self.reader
        while r.data.find(_CRLF, r.pos) < 0:
            self._read("waiting for the server's INFO")
        end = r.data.find(_CRLF, r.pos)
        line = r.data[r.pos:end]
        r.pos = end + 2
        if not line.startswith(b"INFO "):
            raise SourceError(f"cannot connect to NATS at {self.address}: not a NATS server "
                              f"(it said {line[:80]!r})")
        info = orjson.loads(line[5:])
        return info if isinstance(info, dict) else {}

    def _send(self, data: bytes) -> None:
        """Send `data`, after a PONG for each PING the server sent (counted as frames were
        parsed): the server closes a connection that leaves its PINGs unanswered."""
        r = self.reader
        if r.pings:
            data = b"PONG\r\n" * r.pings + data
            r.pings = 0
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise SourceError(f"NATS at {self.address}: {exc}") from None

    def _read(self, doing: str, wait_s: float | None = None) -> bool:
        """Read what the socket has, waiting up to `wait_s` (False if nothing came by then) or,
        without it, the timeout and its grace (a SourceError if nothing came). First the
        server's PINGs are answered, as `_send` does."""
        r = self.reader
        if r.pings:
            self._send(b"")
        if wait_s is not None:
            self.sock.settimeout(max(wait_s, _SHORTEST_WAIT_S))
        try:
            chunk = self.sock.recv(_READ)
        except TimeoutError:
            if wait_s is not None:
                return False
            raise SourceError(f"NATS at {self.address}: nothing for "
                              f"{self.timeout_s + STATUS_GRACE_S}s "
                              f"{doing}") from None
        except OSError as exc:
            raise SourceError(f"NATS at {self.address}: {exc} {doing}") from None
        finally:
            if wait_s is not None:
                self.sock.settimeout(self.timeout_s + STATUS_GRACE_S)
        if not chunk:
            raise SourceError(f"NATS at {self.address} closed the connection {doing}")
        r.feed(chunk)
        return True

    def receive(self, wait_s: float, doing: str) -> bool:
        """Wait up to `wait_s` for the server's next bytes and add them to `reader`: whether
        any came. A connection that ends is a SourceError."""
        return self._read(doing, wait_s)

    def _publish(self, subject: str, reply: str, body: bytes) -> None:
        self._send(f"PUB {subject} {reply} {len(body)}\r\n".encode() + body + _CRLF)

    def request(self, subject: str, body: bytes, doing: str) -> dict:
        """A JetStream API request's JSON reply. Frames of other subscriptions met meanwhile
        (deliveries of a pull that ended) are passed over."""
        self._requests += 1
        reply = f"{self.inbox}.r.{self._requests}"
        want = reply.encode()
        self._publish(subject, reply, body)
        while True:
            for frame in self.reader.frames():
                if frame.sid != _REPLIES_SID or frame.subject != want:
                    continue  # a delivery of an ended pull, or a reply nobody waits for
                status = status_of(frame.headers) if frame.headers else None
                if status is not None:
                    if status[0] == 503:
                        raise SourceError(f"NATS at {self.address}: no JetStream responds "
                                          f"{doing} (is JetStream enabled?)")
                    raise SourceError(f"NATS at {self.address}: status {status[0]} "
                                      f"{status[1]} {doing}")
                answer = orjson.loads(frame.data)
                error = answer.get("error") if isinstance(answer, dict) else None
                if error:
                    raise SourceError(f"NATS at {self.address}: {error.get('description')} "
                                      f"(code {error.get('err_code', error.get('code'))}) "
                                      f"{doing}")
                return answer
            self._read(doing)

    def publish_window(self, messages: list[tuple[str, str, bytes]],
                       acks: Acknowledgements) -> None:
        """Publish each (subject, message ID, payload), with the ID as its `Nats-Msg-Id`
        header and its acknowledgement asked at `acks.reply_subject(k)`, in one write; then
        read until `acks` (a `nats_publish.AckWindow` on `self.acknowledgements`) holds every
        reply. A SourceError with the counts when none comes for the timeout, and one naming
        the message ID of a message larger than the server takes (it would close the
        connection)."""
        acks.expect(len(messages))
        out = []
        for k, (subject, msg_id, data) in enumerate(messages):
            headers = b"NATS/1.0\r\nNats-Msg-Id: %s\r\n\r\n" % msg_id.encode()
            if len(headers) + len(data) > self.max_payload:
                raise SourceError(f"message {msg_id} is {len(headers) + len(data)} bytes with "
                                  f"its headers; the server takes at most {self.max_payload}")
            out.append(b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
                subject.encode(), acks.reply_subject(k).encode(), len(headers),
                len(headers) + len(data), headers, data))
        self._send(b"".join(out))
        while not acks.complete:
            for frame in self.reader.frames():
                if frame.sid != _ACKS_SID:
                    continue
                status = status_of(frame.headers) if frame.headers else None
                acks.on_reply(frame.subject.decode("ascii", "replace"), frame.data,
                              None if status is None else str(status[0]))
            if not acks.complete:
                self._read(f"waiting for acknowledgements: the server acknowledged "
                           f"{acks.received} of {len(messages)} messages")

    def fetch_subject(self, stream: str, subject: str, count: int
                      ) -> tuple[list[bytes], list[int]]:
        """The first `count` messages of `subject` and their stream sequences, in stream order,
        through an ephemeral pull consumer deleted afterwards."""
        lines: list[bytes] = []
        seqs: list[int] = []
        if count == 0:
            return lines, seqs
        name = self.create_consumer(stream, subject)
        try:
            self._pull(stream, name, subject, count, lines, seqs)
        finally:
            try:
                self.request(f"$JS.API.CONSUMER.DELETE.{stream}.{name}", b"",
                             f"deleting the consumer of {subject}")
            except SourceError:
                pass  # inactive, the server removes it after _INACTIVE_NS
        return lines, seqs

    def create_consumer(self, stream: str, subject: str, start_seq: int = 0) -> str:
        """An ephemeral pull consumer of `subject` (no acks, in memory, removed by the server
        after `_INACTIVE_NS` without reads), from the stream's first message or from stream
        sequence `start_seq`: its name."""
        policy: dict = ({"deliver_policy": "by_start_sequence", "opt_start_seq": start_seq}
                        if start_seq > 0 else {"deliver_policy": "all"})
        config = {"stream_name": stream,
                  "config": {**policy, "ack_policy": "none", "replay_policy": "instant",
                             "filter_subject": subject, "inactive_threshold": _INACTIVE_NS,
                             "mem_storage": True, "num_replicas": 1}}
        created = self.request(f"$JS.API.CONSUMER.CREATE.{stream}", orjson.dumps(config),
                               f"creating a consumer of {subject}")
        name = created.get("name")
        if not isinstance(name, str) or not name:
            raise SourceError(f"NATS at {self.address}: no consumer name in the reply "
                              f"creating a consumer of {subject}")
        return name

    def pull(self, stream: str, consumer: str, reply: str, batch: int, expires_s: float
             ) -> None:
        """Ask `consumer` for up to `batch` messages, sent to `reply` as they come, the
        request expiring after `expires_s` (the server then says so, with status 408)."""
        self._publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", reply,
                      orjson.dumps({"batch": batch, "expires": int(expires_s * 1_000_000_000)}))

    def _pull(self, stream: str, consumer: str, subject: str, count: int, lines: list[bytes],
              seqs: list[int]) -> None:
        """Pull `count` messages, `PULL_DEPTH` requests open at a time so the server always has
        one to fill while the last batch is read, counted by `OpenRequests`."""
        requests = OpenRequests()
        largest = 0  # the largest payload seen (none yet: the server's bound stands for it)

        def ask() -> None:
            wanted = count - len(lines) - requests.outstanding
            if wanted > 0:
                n = pull_size(wanted, largest or self.max_payload)
                self.pull(stream, consumer, self.deliveries, n, self.timeout_s)
                requests.asked(n)

        for _ in range(PULL_DEPTH):
            ask()
        while len(lines) < count:
            taken, ended = self.reader.take_deliveries(subject, requests.room(), lines, seqs)
            if taken:
                largest = max(largest, *map(len, lines[-taken:]))
            if requests.received(taken):
                ask()
            elif ended is not None:
                if requests.ended() == 0:
                    raise SourceError(f"{subject}: received {len(lines)} of {count} messages, "
                                      f"then nothing for {self.timeout_s}s")
                ask()  # what it did not bring is asked for again
            elif len(lines) < count:
                self._read(f"reading {subject}: received {len(lines)} of {count} messages")
