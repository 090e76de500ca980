"""The live tail (`streaming.sources.nats_tail`) against real servers: each subject's messages
delivered once, in order, from where the source's snapshot ended; an idle tail stays connected
while its requests expire; a consumer deleted under it and a server restarted under it are
survived without losing or repeating a message, and reported as outages, as is an error the
tail does not know; closing ends it at once; a stream it cannot follow is refused."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from streaming.sources.nats_tail import BrokerHealth, LiveTail
from streaming.sources.records import SourceError
from tests.conftest import need_service
from tests.test_follow_outages import PrivateNats
from tests.test_source_nats_wire import _delete, _make_stream

pytestmark = pytest.mark.nats

NATS_HOST, NATS_PORT = "127.0.0.1", 4222


class Received:
    """What a tail handed over: deliveries per partition and how many reads delivered any."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, int], list[tuple[int, int, int, bytes]]] = {}
        self.reads = 0
        self.lock = threading.Lock()

    def deliver(self, tp, seq, pending, stamp, data) -> None:
        with self.lock:
            self.items.setdefault(tp, []).append((seq, pending, stamp, data))

    def delivered(self) -> None:
        self.reads += 1

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.items.values())

    def wait_for(self, n: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.count() < n:
            assert time.monotonic() < deadline, f"{self.count()} of {n} delivered"
            time.sleep(0.02)

    def data(self, tp) -> list[bytes]:
        return [item[3] for item in self.items.get(tp, [])]

    def seqs(self, tp) -> list[int]:
        return [item[0] for item in self.items.get(tp, [])]


def _server(port: int = NATS_PORT) -> tuple[str, str]:
    return f"nats://{NATS_HOST}:{port}", f"{NATS_HOST}:{port}"


def _publish(url: str, name: str, messages: list[tuple[str, bytes]]) -> list[int]:
    """Publish to an existing stream: the stream sequences."""
    async def run() -> list[int]:
        import nats as nats_client
        nc = await nats_client.connect(url)
        try:
            js = nc.jetstream()
            return [(await js.publish(f"{name}.{subject}", data)).seq
                    for subject, data in messages]
        finally:
            await nc.close()
    return asyncio.run(run())


def _consumer_names(url: str, name: str) -> list[str]:
    async def run() -> list[str]:
        import nats as nats_client
        nc = await nats_client.connect(url)
        try:
            return [c.name for c in await nc.jetstream().consumers_info(name)]
        finally:
            await nc.close()
    return asyncio.run(run())


def _delete_consumers(url: str, name: str) -> None:
    async def run() -> None:
        import nats as nats_client
        nc = await nats_client.connect(url)
        try:
            js = nc.jetstream()
            for c in await js.consumers_info(name):
                await js.delete_consumer(name, c.name)
        finally:
            await nc.close()
    asyncio.run(run())


A, B = ("t", 0), ("t", 1)


def _tail(url: str, address: str, name: str, starts: dict, got: Received,
          timeout_s: float = 5.0, health: BrokerHealth | None = None) -> LiveTail:
    tail = LiveTail(url, address, timeout_s, name,
                    {tp: (f"{name}.{tp[0]}.p{tp[1]}", start) for tp, start in starts.items()},
                    got.deliver, got.delivered, health or BrokerHealth())
    tail.start()
    return tail


class Stream:
    """A test's stream on the shared server, and the tails it started (closed at its end)."""

    def __init__(self, name: str, seqs: dict) -> None:
        self.url, self.address = _server()
        self.name = name
        self.seqs = seqs  # the stream sequences of each subject's messages
        self.tails: list[LiveTail] = []

    def follow(self, starts: dict, timeout_s: float = 5.0) -> tuple[LiveTail, Received]:
        got = Received()
        self.tails.append(_tail(self.url, self.address, self.name, starts, got, timeout_s))
        return self.tails[-1], got

    def publish(self, messages: list[tuple[str, bytes]]) -> list[int]:
        return _publish(self.url, self.name, messages)


@pytest.fixture
def stream():
    """A stream holding five messages on each of two subjects, interleaved; its tails closed
    and the stream deleted afterwards."""
    need_service("NATS", NATS_HOST, NATS_PORT)
    url, _ = _server()
    name = f"rs_tail_{uuid.uuid4().hex[:12]}"
    messages = [(f"t.p{k % 2}", b'{"k":%d}' % k) for k in range(10)]
    seqs = asyncio.run(_make_stream(url, name, messages))
    made = Stream(name, {A: seqs[0::2], B: seqs[1::2]})
    yield made
    for tail in made.tails:
        tail.close()
    asyncio.run(_delete(url, name))


def test_each_subjects_messages_come_once_in_order_from_its_start(stream):
    # Partition A's snapshot ended at its third message; B's holds nothing yet.
    tail, got = stream.follow({A: stream.seqs[A][2] + 1, B: 1})
    got.wait_for(2 + 5)
    assert got.data(A) == [b'{"k":6}', b'{"k":8}'] and got.seqs(A) == stream.seqs[A][3:]
    assert got.data(B) == [b'{"k":%d}' % k for k in (1, 3, 5, 7, 9)]
    # Live messages, interleaved, as they are published.
    live = [(f"t.p{k % 2}", b'{"k":%d}' % k) for k in range(10, 50)]
    live_seqs = stream.publish(live)
    got.wait_for(7 + 40)
    assert got.data(A)[2:] == [b'{"k":%d}' % k for k in range(10, 50, 2)]
    assert got.seqs(B)[5:] == live_seqs[1::2]
    for tp in (A, B):
        s = got.seqs(tp)
        assert s == sorted(set(s))  # rising, none twice
        # Pending: what the server held beyond each delivery; nothing after the last.
        assert got.items[tp][-1][1] == 0
        assert all(item[2] > 1_700_000_000 * 10**9 for item in got.items[tp])
    assert 1 <= got.reads <= got.count()
    assert tail.health.outages == 0


def test_an_idle_tail_stays_connected_while_its_requests_expire(stream):
    tail, got = stream.follow({A: stream.seqs[A][-1] + 1, B: stream.seqs[B][-1] + 1},
                              timeout_s=0.3)
    time.sleep(2.0)  # about six expiries of each request, and a read timeout's worth
    assert got.count() == 0
    assert tail.health.as_dict()["outages"] == 0, tail.health.as_dict()
    stream.publish([("t.p1", b"late")])
    got.wait_for(1)
    assert got.data(B) == [b"late"]


def test_a_consumer_deleted_under_the_tail_is_made_again_from_where_it_was(stream):
    tail, got = stream.follow({A: 1, B: 1})
    got.wait_for(10)
    _delete_consumers(stream.url, stream.name)
    deadline = time.monotonic() + 10
    while tail.health.outages == 0:
        assert time.monotonic() < deadline, "the deletion was not noticed"
        time.sleep(0.02)
    assert "409" in (tail.health.last_error or ""), tail.health.last_error
    stream.publish([(f"t.p{k % 2}", b'{"k":%d}' % k) for k in range(10, 20)])
    got.wait_for(20)
    time.sleep(0.3)  # nothing more comes
    for tp, first in ((A, 0), (B, 1)):
        assert got.data(tp) == [b'{"k":%d}' % k for k in range(first, 20, 2)]
    assert tail.health.connected
    # The tail's consumers now: one per subject (the deleted ones are gone).
    assert len(_consumer_names(stream.url, stream.name)) == 2


def test_a_request_the_server_drops_without_a_word_is_asked_again_at_its_expiry(
        stream, monkeypatch):
    # A server with a message to deliver as a request expires drops the request without its
    # status (NATS 2.9's `nextWaiting`). Here A's first request never reaches the server: the
    # same for the tail, which hears B's statuses all along, so only the request's own expiry
    # can tell it that A has none open.
    from streaming.sources import nats_wire
    real = nats_wire.WireConnection.pull
    dropped: list[str] = []

    def pull(self, stream_name, consumer, reply, batch, expires_s):
        if ".t.0." in reply and not dropped:
            dropped.append(reply)
            return
        real(self, stream_name, consumer, reply, batch, expires_s)

    monkeypatch.setattr(nats_wire.WireConnection, "pull", pull)
    tail, got = stream.follow({A: 1, B: 1}, timeout_s=0.5)
    got.wait_for(10)
    assert dropped and dropped[0].endswith(".t.0.1")
    assert got.data(A) == [b'{"k":%d}' % k for k in range(0, 10, 2)]
    assert got.data(B) == [b'{"k":%d}' % k for k in range(1, 10, 2)]
    stream.publish([("t.p0", b"live")])
    got.wait_for(11)
    assert got.data(A)[-1] == b"live"
    assert tail.health.outages == 0 and tail.health.connected


def test_only_the_open_requests_status_asks_for_the_next(stream):
    tail, got = stream.follow({A: stream.seqs[A][-1] + 1, B: stream.seqs[B][-1] + 1},
                              timeout_s=30.0)
    time.sleep(0.2)
    conn = tail._conn
    a = tail._followed[0]
    # The test speaks for the server while the tail's thread waits on the idle connection (its
    # requests expire in 30 s).
    serial, ends_at = a.serial, a.ends_at
    # The status of a request already taken as ended (filled by the count, or past its expiry):
    # nothing is asked.
    tail._ended(conn, f"{conn.tail_replies}0.{serial - 1}".encode(), (408, "Request Timeout"))
    assert (a.serial, a.ends_at) == (serial, ends_at)
    # The open request's: the next is asked.
    tail._ended(conn, f"{conn.tail_replies}0.{serial}".encode(), (408, "Request Timeout"))
    assert a.serial == serial + 1 and a.ends_at > ends_at
    with pytest.raises(SourceError, match="which no request of this tail was sent to"):
        tail._ended(conn, f"{conn.tail_replies}7.1".encode(), (408, "Request Timeout"))
    stream.publish([("t.p0", b"live")])
    got.wait_for(1)
    assert got.data(A) == [b"live"]


def test_an_unexpected_error_in_the_tail_is_an_outage_it_recovers_from(stream, monkeypatch):
    # The tail's thread must never end quietly: an error it does not know (here a delivery it
    # cannot read, once) is reported as the broker down and cured by a new connection that
    # reads from the sequence after the last delivered.
    from streaming.sources import nats_tail
    real = nats_tail.delivery_of
    calls = {"n": 0}

    def flaky(reply):
        calls["n"] += 1
        if calls["n"] == 4:
            raise ValueError("unreadable for the test")
        return real(reply)

    monkeypatch.setattr(nats_tail, "delivery_of", flaky)
    tail, got = stream.follow({A: 1, B: 1})
    got.wait_for(10)
    time.sleep(0.3)  # nothing more comes
    assert got.data(A) == [b'{"k":%d}' % k for k in range(0, 10, 2)]
    assert got.data(B) == [b'{"k":%d}' % k for k in range(1, 10, 2)]
    assert tail.health.outages == 1 and tail.health.connected
    assert tail.health.last_error == "ValueError: unreadable for the test"


def test_a_server_restart_is_survived_without_losing_or_repeating_a_message(tmp_path):
    import shutil
    if not (shutil.which("nats-server") or __import__("os").path.exists("/usr/sbin/nats-server")):
        need_service("NATS", NATS_HOST, NATS_PORT)  # fails in CI, skips elsewhere
        pytest.skip("nats-server binary not installed")
    server = PrivateNats(str(tmp_path / "js"))
    server.start()
    url, address = _server(server.port)
    name = "rs_tail_restart"
    try:
        asyncio.run(_make_stream(url, name, [(f"t.p{k % 2}", b"%d" % k) for k in range(6)]))
        got = Received()
        health = BrokerHealth()
        tail = _tail(url, address, name, {A: 1, B: 1}, got, timeout_s=1.0, health=health)
        try:
            got.wait_for(6)
            server.stop()
            deadline = time.monotonic() + 5
            while health.connected:
                assert time.monotonic() < deadline, "the lost connection was not noticed"
                time.sleep(0.02)
            time.sleep(1.0)
            assert health.down_for() >= 0.9
            server.start()
            _publish(url, name, [(f"t.p{k % 2}", b"%d" % k) for k in range(6, 16)])
            got.wait_for(16, timeout=15)
            time.sleep(0.3)
            assert got.data(A) == [b"%d" % k for k in range(0, 16, 2)]
            assert got.data(B) == [b"%d" % k for k in range(1, 16, 2)]
            assert health.connected and health.outages == 1
            assert health.as_dict()["outage_seconds"] >= 0.9
        finally:
            tail.close()
    finally:
        server.stop()


def test_closing_ends_the_tail_at_once(stream):
    tail, _ = stream.follow({A: 1})
    time.sleep(0.2)
    t0 = time.monotonic()
    tail.close()
    assert time.monotonic() - t0 < 1.0
    assert not [t for t in threading.enumerate() if t.name == "nats-tail"]
    tail.close()  # a second close does nothing


def test_a_connection_made_as_the_tail_closes_is_closed_and_not_reported_up(stream):
    # A reconnect that finishes after `close` must not leave a connection open, nor report a
    # broker the tail no longer follows as up.
    tail, got = stream.follow({A: 1})
    got.wait_for(5)
    tail.close()
    tail.health.down()
    assert tail._connect() is False
    assert tail._conn is None and not tail.health.connected


def test_a_stream_it_cannot_follow_is_refused_at_once():
    need_service("NATS", NATS_HOST, NATS_PORT)
    url, address = _server()
    with pytest.raises(SourceError, match=r"stream not found \(code 10059\)"):
        LiveTail(url, address, 2.0, "nope_tail", {A: ("nope_tail.t.p0", 1)},
                 Received().deliver, Received().delivered, BrokerHealth())
