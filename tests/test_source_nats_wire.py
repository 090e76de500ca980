"""The snapshot reader's own NATS protocol (`streaming.sources.nats_wire`): frames parsed
however the bytes are split, statuses and refusals, deliveries' reply subjects read as the
client library reads them; and against real servers: a subject read in several pulls equals
what was published, a short subject is a stall with the counts, the consumer is deleted, the
URL's credentials are sent as the client library sends them, the server's PINGs are answered,
and several subjects read over several connections at once equal what one connection reads,
with a reader's failure stopping the others."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.msg import Msg

from riskstream_tools.ports import free_port
from streaming.sources import nats_wire
from streaming.sources.nats_wire import (ServerRefused, WireConnection, WireReader, status_of,
                                         delivery_of, fetch_subjects, reading_shares)
from streaming.sources.records import SourceError
from tests.conftest import IN_CI, hand_written, need_service

NATS_HOST, NATS_PORT = "127.0.0.1", 4222
SERVER_BINARY = "/usr/sbin/nats-server"

# A delivery's reply subject, in both of the server's forms (the second with a domain and an
# account hash, and a token at the end, which may be absent).
V1 = "$JS.ACK.orders.cons-1.3.1042.17.1764998400123456789.55"
V2 = "$JS.ACK.hub.ACCHASH.orders.cons-1.3.1042.17.1764998400123456789.55.tok9"


@pytest.mark.parametrize("reply", [V1, V2, V2.rsplit(".", 1)[0]])
def test_delivery_is_read_as_the_clients_metadata_reads_it(reply):
    meta = Msg(None, subject="orders.payments.p0", reply=reply).metadata  # type: ignore[arg-type]
    seq, pending, stamp = delivery_of(reply)
    assert (seq, pending) == (meta.sequence.stream, meta.num_pending) == (1042, 55)
    # The exact nanoseconds; the client's datetime keeps them to the microsecond, rounded.
    assert stamp == 1764998400123456789
    assert abs(stamp / 1000 - meta.timestamp.timestamp() * 1e6) <= 1


@pytest.mark.parametrize("reply", ["", "_INBOX.abc.1", "$JS.ACK.s.c.1.x.2.3.4",
                                   "$JS.ACK.too.short", "$JS.API.s.c.1.2.3.4.5"])
def test_a_reply_that_is_not_a_jetstream_delivery_is_refused(reply):
    with pytest.raises(SourceError, match="not a JetStream acknowledgement subject"):
        delivery_of(reply)


def _msg(subject: bytes, sid: bytes, reply: bytes, data: bytes) -> bytes:
    return b"MSG %s %s %s%d\r\n%s\r\n" % (subject, sid, reply + b" " if reply else b"",
                                          len(data), data)


def _hmsg(subject: bytes, sid: bytes, reply: bytes, headers: bytes, data: bytes) -> bytes:
    return b"HMSG %s %s %s%d %d\r\n%s%s\r\n" % (
        subject, sid, reply + b" " if reply else b"", len(headers), len(headers) + len(data),
        headers, data)


# What a server may send a reader: its greeting, a reply without headers, a delivery with
# headers, a PING, an empty payload, a status ending a pull request, a PONG and +OK.
WANT = [(b"_INBOX.a.r.1", b"1", b"", b"", b'{"name":"c"}'),
        (b"s.payments.p0", b"2", b"$JS.ACK.s.c.1.7.1.1764998400000000000.3",
         b"NATS/1.0\r\nNats-Msg-Id: r/p0/0\r\n\r\n", b'{"id":"a\r\nMSG x 1 2"}'),
        (b"s.payments.p0", b"2", b"$JS.ACK.s.c.1.9.2.1764998400000000001.2", b"", b""),
        (b"_INBOX.a.m", b"2", b"", b"NATS/1.0 408 Request Timeout\r\n"
                                   b"Nats-Pending-Messages: 2\r\n\r\n", b"")]
TRANSCRIPT = (b'INFO {"server_id":"X","headers":true,"max_payload":1048576}\r\n'
              + _msg(*WANT[0][:3], WANT[0][4]) + _hmsg(*WANT[1]) + b"PING\r\n"
              + _msg(*WANT[2][:3], WANT[2][4]) + _hmsg(*WANT[3]) + b"PONG\r\n+OK\r\n")


def _read_in_pieces(data: bytes, size: int) -> tuple[list[tuple], WireReader]:
    reader = WireReader()
    got = []
    for at in range(0, len(data), size):
        reader.feed(data[at:at + size])
        got += [(f.subject, f.sid, f.reply, f.headers, f.data) for f in reader.frames()]
    return got, reader


def test_frames_are_the_same_however_the_bytes_are_split():
    assert len(TRANSCRIPT.split(b"\r\n")) > 10
    for size in [len(TRANSCRIPT), *range(1, 40)]:
        got, reader = _read_in_pieces(TRANSCRIPT, size)
        assert got == WANT, size
        assert (reader.pings, reader.pongs) == (1, 1), size
        assert reader.pos == len(reader.data)  # nothing left over


def test_a_status_is_told_from_a_messages_own_headers():
    assert status_of(b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 2\r\n\r\n") == \
        (408, "Request Timeout")
    assert status_of(b"NATS/1.0 503\r\n\r\n") == (503, "")
    assert status_of(b"NATS/1.0\r\nNats-Msg-Id: r/p0/0\r\n\r\n") is None
    assert status_of(b"") is None


def test_a_refusal_and_an_unknown_line_are_errors_with_what_the_server_said():
    reader = WireReader()
    reader.feed(b"PING\r\n-ERR 'Authorization Violation'\r\n")
    with pytest.raises(ServerRefused, match="the NATS server refused: Authorization Violation"):
        list(reader.frames())
    assert reader.pings == 1
    reader = WireReader()
    reader.feed(b"HELLO there\r\n")
    with pytest.raises(SourceError, match="unexpected line from the NATS server: b'HELLO"):
        list(reader.frames())


# Frames a snapshot's reader may meet, for the C fast path against the general reader: plain
# deliveries in both reply forms, with and without headers, and every case the fast path must
# leave to the general reader (odd numbers, out-of-order sequences, statuses, the other
# subscription, control lines, a frame whose size is wrong, blanks other than a space).
def _delivery(seq: str, form: int, headed: bool, data: bytes, sid: bytes = b"2") -> bytes:
    reply = (b"$JS.ACK.s.c.1.%s.4.1764998400000000000.9" if form == 1 else
             b"$JS.ACK.dom.ACC.s.c.1.%s.4.1764998400000000000.9.tk" if form == 2 else
             b"$JS.ACK.dom.ACC.s.c.1.%s.4.1764998400000000000.9") % seq.encode()
    if headed:
        return _hmsg(b"s.a", sid, reply, b"NATS/1.0\r\nNats-Msg-Id: m\r\n\r\n", data)
    return _msg(b"s.a", sid, reply, data)


@st.composite
def _transcripts(draw) -> bytes:
    seq = 0
    out = []
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["plain"] * 8 + ["odd-number", "back", "status", "other-sid",
                                                     "ping", "pong", "ok", "bad-reply",
                                                     "tab", "vtab", "bad-size", "empty"]))
        data = draw(st.binary(max_size=30))
        seq += draw(st.integers(1, 3))
        form, headed = draw(st.integers(1, 3)), draw(st.booleans())
        if kind == "plain":
            out.append(_delivery(str(seq), form, headed, data))
        elif kind == "odd-number":
            spelling = draw(st.sampled_from(["+%d", "0%d", "%d_0", "%d" + "0" * 19, " %d"]))
            out.append(_delivery(spelling % seq, form, headed, data))
        elif kind == "back":
            out.append(_delivery(str(max(seq - 5, 0)), form, headed, data))
        elif kind == "status":
            out.append(_hmsg(b"_INBOX.a.m", b"2", b"", draw(st.sampled_from(
                [b"NATS/1.0 408 Request Timeout\r\n\r\n", b"NATS/1.0 409 Leadership Change\r\n\r\n",
                 b"NATS/1.0 40x\r\n\r\n"])), b""))
        elif kind == "other-sid":
            out.append(_delivery(str(seq), form, headed, data, sid=b"1"))
        elif kind == "bad-reply":
            out.append(_msg(b"s.a", b"2", draw(st.sampled_from(
                [b"_INBOX.x.1", b"$JS.ACK.s.c.1.x.2.3.4", b"$JS.ACK.a.b"])), data))
        elif kind == "tab":
            out.append(_delivery(str(seq), form, headed, data).replace(b" ", b"\t", 2))
        elif kind == "vtab":
            out.append(_delivery(str(seq), form, headed, data).replace(b" ", b"\x0b", 1))
        elif kind == "bad-size":
            frame = _delivery(str(seq), form, False, data)
            out.append(frame.replace(b" %d\r\n" % len(data), b" %d\r\n" % (len(data) + 1), 1))
        elif kind == "empty":
            out.append(_delivery(str(seq), form, headed, b""))
        else:
            out.append({"ping": b"PING\r\n", "pong": b"PONG\r\n", "ok": b"+OK\r\n"}[kind])
    return b"".join(out)


def _take_all(transcript: bytes, cuts: list[int], want: int) -> tuple:
    """What a reader takes from the transcript fed in pieces, as `_pull` drives it: the
    deliveries, the status that ended the read, where it stopped, or the error."""
    reader = WireReader()
    lines: list[bytes] = []
    seqs: list[int] = []
    bounds = sorted({0, len(transcript), *(c % (len(transcript) + 1) for c in cuts)})
    ended = None
    try:
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            reader.feed(transcript[lo:hi])
            taken, ended = reader.take_deliveries("s.a", want - len(lines), lines, seqs)
            if ended is not None or len(lines) == want:
                break
    except SourceError as exc:
        return lines, seqs, "raised", str(exc)
    return lines, seqs, ended, reader.data[reader.pos:]


@pytest.fixture(scope="module")
def c_deliveries():
    return hand_written("streaming._wire").deliveries


@settings(max_examples=400, deadline=None)
@given(transcript=_transcripts(), cuts=st.lists(st.integers(0, 10_000), max_size=6),
       want=st.integers(1, 30))
def test_the_c_fast_path_takes_what_the_general_reader_takes(c_deliveries, transcript, cuts,
                                                             want):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(nats_wire, "DELIVERIES", nats_wire.py_deliveries)
        general = _take_all(transcript, cuts, want)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(nats_wire, "DELIVERIES", c_deliveries)
        fast = _take_all(transcript, cuts, want)
    assert fast == general


def test_the_c_fast_path_takes_plain_deliveries_and_stops_at_anything_else(c_deliveries):
    frames = [_delivery("5", 1, True, b"one"), _delivery("7", 2, False, b"two"),
              _delivery("8", 3, True, b""), _delivery("+9", 1, False, b"odd"),
              _delivery("10", 1, False, b"after")]
    data = b"".join(frames)
    lines: list[bytes] = []
    seqs: list[int] = [4]
    pos = c_deliveries(data, 0, b"2", 100, lines, seqs)
    assert (lines, seqs) == ([b"one", b"two", b""], [4, 5, 7, 8])
    assert data[pos:] == b"".join(frames[3:])  # "+9" is the general reader's to judge
    # A limit, an incomplete frame, another subscription, a sequence not above the last.
    lines, seqs = [], []
    assert c_deliveries(data, 0, b"2", 1, lines, seqs) == len(frames[0])
    assert c_deliveries(data[:-1], len(b"".join(frames[:4])), b"2", 9, [], []) == \
        len(b"".join(frames[:4]))
    assert c_deliveries(data, 0, b"1", 9, [], []) == 0
    assert c_deliveries(data, 0, b"2", 9, [], [5]) == 0


# ----------------------------------------------------------------------- against a server
async def _make_stream(url: str, name: str, messages: list[tuple[str, bytes]]) -> list[int]:
    import nats as nats_client
    from nats.js.api import StreamConfig
    nc = await nats_client.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        seqs = []
        for subject, data in messages:
            ack = await js.publish(f"{name}.{subject}", data,
                                   headers={"Nats-Msg-Id": f"{subject}/{len(seqs)}"})
            seqs.append(ack.seq)
        return seqs
    finally:
        await nc.close()


async def _consumers(url: str, name: str) -> int:
    import nats as nats_client
    nc = await nats_client.connect(url)
    try:
        return (await nc.jetstream().stream_info(name)).state.consumer_count
    finally:
        await nc.close()


async def _delete(url: str, name: str) -> None:
    import nats as nats_client
    nc = await nats_client.connect(url)
    try:
        await nc.jetstream().delete_stream(name)
    finally:
        await nc.close()


@pytest.fixture
def stream():
    """A stream of 23 messages on `<name>.a` and 5 on `<name>.b`, interleaved, deleted
    afterwards: (name, the messages of `.a`, their stream sequences)."""
    need_service("NATS", NATS_HOST, NATS_PORT)
    url = f"nats://{NATS_HOST}:{NATS_PORT}"
    name = f"rs_wire_{uuid.uuid4().hex[:12]}"
    messages = [("a" if k % 6 else "b", b'{"k":%d,"pad":"%s"}' % (k, b"x" * k))
                for k in range(28)]
    seqs = asyncio.run(_make_stream(url, name, messages))
    a = [(data, seq) for (subject, data), seq in zip(messages, seqs, strict=True) if subject == "a"]
    assert len(a) == 23
    yield name, [d for d, _ in a], [s for _, s in a]
    asyncio.run(_delete(url, name))


def test_a_subject_is_read_in_several_pulls_in_stream_order(stream, monkeypatch):
    name, lines, seqs = stream
    monkeypatch.setattr(nats_wire, "PULL_BATCH", 4)  # 23 messages: six pulls
    conn = WireConnection(f"nats://{NATS_HOST}:{NATS_PORT}", f"{NATS_HOST}:{NATS_PORT}", 5.0)
    try:
        got_lines, got_seqs = conn.fetch_subject(name, f"{name}.a", 23)
        assert got_lines == lines and got_seqs == seqs
        # A snapshot of the first ten only: the rest is not read.
        assert conn.fetch_subject(name, f"{name}.a", 10) == (lines[:10], seqs[:10])
        assert conn.fetch_subject(name, f"{name}.b", 0) == ([], [])
    finally:
        conn.close()
    # Each read's consumer was deleted once read.
    assert asyncio.run(_consumers(f"nats://{NATS_HOST}:{NATS_PORT}", name)) == 0


def test_a_pull_asks_for_a_bounded_number_of_bytes_whatever_the_messages_size():
    assert nats_wire.pull_size(20_000, 250) == nats_wire.PULL_BATCH
    assert nats_wire.pull_size(100, 250) == 100
    # The server's 1 MiB bound before any message is seen: 8 of them, about PULL_BYTES.
    assert nats_wire.pull_size(20_000, 1 << 20) == 8
    assert nats_wire.pull_size(20_000, 100 << 20) == 1  # at least one
    assert nats_wire.pull_size(20_000, 0) == nats_wire.PULL_BATCH


def test_open_requests_give_each_delivery_and_status_to_the_oldest():
    requests = nats_wire.OpenRequests()
    requests.asked(3)
    requests.asked(2)
    assert len(requests) == 2 and requests.outstanding == 5 and requests.room() == 3
    assert requests.received(2) is False  # the oldest still waits for one
    assert requests.room() == 1 and requests.outstanding == 3
    assert requests.received(1) is True  # filled: the next is the oldest now
    assert len(requests) == 1 and requests.room() == 2 and requests.outstanding == 2
    assert requests.received(1) is False
    # Its status comes: it ended having brought one, and the one it did not bring is no
    # longer outstanding (the reader asks for it again).
    assert requests.ended() == 1
    assert len(requests) == 0 and requests.outstanding == 0
    requests.asked(4)
    assert requests.ended() == 0  # expired with nothing: a stall, for a snapshot's read


def test_large_messages_are_pulled_a_few_at_a_time(monkeypatch):
    # 40 messages of 300 KB: every request but the first two asks for what 1 MB holds (3),
    # so no more than two such requests' bytes are ever on their way.
    need_service("NATS", NATS_HOST, NATS_PORT)
    url = f"nats://{NATS_HOST}:{NATS_PORT}"
    name = f"rs_wire_{uuid.uuid4().hex[:12]}"
    payloads = [bytes([65 + k % 26]) * 300_000 for k in range(40)]
    seqs = asyncio.run(_make_stream(url, name, [("a", p) for p in payloads]))
    monkeypatch.setattr(nats_wire, "PULL_BYTES", 1 << 20)
    asked: list[int] = []
    publish = WireConnection._publish

    def spy(self, subject, reply, body):
        if ".MSG.NEXT." in subject:
            asked.append(orjson.loads(body)["batch"])
        publish(self, subject, reply, body)

    monkeypatch.setattr(WireConnection, "_publish", spy)
    conn = WireConnection(url, f"{NATS_HOST}:{NATS_PORT}", 5.0)
    try:
        assert conn.fetch_subject(name, f"{name}.a", 40) == (payloads, seqs)
    finally:
        conn.close()
        asyncio.run(_delete(url, name))
    assert asked[:2] == [1, 1]  # 1 MB by the server's 1 MB bound, before any was seen
    assert set(asked[2:-1]) == {3} and sum(asked) == 40


def test_a_subject_holding_fewer_messages_than_asked_is_a_stall_with_the_counts(stream):
    name, lines, _ = stream
    conn = WireConnection(f"nats://{NATS_HOST}:{NATS_PORT}", f"{NATS_HOST}:{NATS_PORT}", 0.5)
    try:
        t0 = time.monotonic()
        with pytest.raises(SourceError, match=rf"{name}\.a: received 23 of 26 messages, then "
                                              r"nothing for 0\.5s"):
            conn.fetch_subject(name, f"{name}.a", 26)
        assert time.monotonic() - t0 < 5
    finally:
        conn.close()
    assert asyncio.run(_consumers(f"nats://{NATS_HOST}:{NATS_PORT}", name)) == 0


def test_a_stream_that_does_not_exist_is_refused_with_the_servers_reason():
    need_service("NATS", NATS_HOST, NATS_PORT)
    conn = WireConnection(f"nats://{NATS_HOST}:{NATS_PORT}", f"{NATS_HOST}:{NATS_PORT}", 2.0)
    try:
        with pytest.raises(SourceError, match=r"stream not found \(code 10059\) creating a "
                                              r"consumer of nope_x\.a"):
            conn.fetch_subject("nope_x", "nope_x.a", 3)
    finally:
        conn.close()


# ----------------------------------------------------------- several subjects at once
def test_subjects_are_shared_among_readers_by_their_messages():
    wanted = [("s.a", 10), ("s.b", 0), ("s.c", 7), ("s.d", 4), ("s.e", 4), ("s.f", 1)]
    # The largest first, each to the share with the fewest so far; the empty one left out.
    assert reading_shares(wanted, 2) == [[("s.a", 10), ("s.e", 4)],
                                         [("s.c", 7), ("s.d", 4), ("s.f", 1)]]
    assert reading_shares(wanted, 1) == [[("s.a", 10), ("s.c", 7), ("s.d", 4), ("s.e", 4),
                                          ("s.f", 1)]]
    # More readers than subjects: one subject each.
    assert reading_shares(wanted, 9) == [[("s.a", 10)], [("s.c", 7)], [("s.d", 4)],
                                         [("s.e", 4)], [("s.f", 1)]]
    assert reading_shares([("s.b", 0)], 2) == []
    # Every subject with messages is in exactly one share, for any number of readers.
    for readers in range(1, 8):
        shares = reading_shares(wanted, readers)
        assert sorted(job for share in shares for job in share) == sorted(
            job for job in wanted if job[1])


@pytest.fixture
def subjects():
    """A stream of six subjects of 2 to 60 messages, interleaved, deleted afterwards:
    (name, each subject's messages and their stream sequences)."""
    need_service("NATS", NATS_HOST, NATS_PORT)
    url = f"nats://{NATS_HOST}:{NATS_PORT}"
    name = f"rs_wire_{uuid.uuid4().hex[:12]}"
    sizes = {"p0": 60, "p1": 2, "p2": 31, "p3": 17, "p4": 44, "p5": 9}
    order = [subject for k in range(60) for subject, n in sizes.items() if k < n]
    messages = [(subject, b'{"k":%d,"s":"%s"}' % (k, subject.encode()))
                for k, subject in enumerate(order)]
    seqs = asyncio.run(_make_stream(url, name, messages))
    held: dict[str, tuple[list[bytes], list[int]]] = {}
    for (subject, data), seq in zip(messages, seqs, strict=True):
        lines, subject_seqs = held.setdefault(f"{name}.{subject}", ([], []))
        lines.append(data)
        subject_seqs.append(seq)
    yield name, held
    asyncio.run(_delete(url, name))


@pytest.mark.parametrize("readers", [1, 2, 3, 8])
def test_subjects_read_at_once_equal_what_each_holds(subjects, readers, monkeypatch):
    name, held = subjects
    monkeypatch.setattr(nats_wire, "PULL_BATCH", 8)  # several pulls per subject
    url, address = f"nats://{NATS_HOST}:{NATS_PORT}", f"{NATS_HOST}:{NATS_PORT}"
    wanted = [(subject, len(lines)) for subject, (lines, _) in held.items()]
    wanted.append((f"{name}.empty", 0))
    got = fetch_subjects(url, address, 5.0, name, wanted, readers)
    assert got == held  # every message and its sequence; the empty subject not asked for
    # A snapshot of fewer than a subject holds reads only those.
    first = fetch_subjects(url, address, 5.0, name, [(f"{name}.p0", 25), (f"{name}.p4", 3)],
                           readers)
    assert first == {f"{name}.p0": (held[f"{name}.p0"][0][:25], held[f"{name}.p0"][1][:25]),
                     f"{name}.p4": (held[f"{name}.p4"][0][:3], held[f"{name}.p4"][1][:3])}
    assert asyncio.run(_consumers(url, name)) == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("nats-reader-")]


def test_a_readers_failure_is_raised_and_stops_the_others_at_once(subjects, monkeypatch):
    # One subject fails at once; the other reader is waiting on a subject that would stall for
    # the whole 5 s timeout. The failure is raised, and the waiting reader's connection is
    # ended under it rather than left to its timeout.
    name, held = subjects
    url, address = f"nats://{NATS_HOST}:{NATS_PORT}", f"{NATS_HOST}:{NATS_PORT}"
    fetch = WireConnection.fetch_subject
    waiting = threading.Event()

    def failing(self, stream, subject, count):
        if subject.endswith(".p1"):
            assert waiting.wait(5)
            time.sleep(0.2)  # the other reader is in its read by now
            raise SourceError(f"{subject}: refused for the test")
        waiting.set()
        return fetch(self, stream, subject, count)

    monkeypatch.setattr(WireConnection, "fetch_subject", failing)
    t0 = time.monotonic()
    with pytest.raises(SourceError, match=rf"{name}\.p1: refused for the test"):
        fetch_subjects(url, address, 5.0, name, [(f"{name}.p0", 61), (f"{name}.p1", 2)], 2)
    assert time.monotonic() - t0 < 3
    assert not [t for t in threading.enumerate() if t.name.startswith("nats-reader-")]


def test_a_connection_ended_from_another_thread_ends_its_read(subjects):
    name, _ = subjects
    conn = WireConnection(f"nats://{NATS_HOST}:{NATS_PORT}", f"{NATS_HOST}:{NATS_PORT}", 5.0)
    timer = threading.Timer(0.3, conn.abort)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(SourceError, match="closed the connection reading"):
            conn.fetch_subject(name, f"{name}.p1", 5)  # holds 2: would stall for 5 s
        assert time.monotonic() - t0 < 3
    finally:
        timer.join()
        conn.close()
    conn.abort()  # closed already: nothing to end


def test_a_missing_stream_is_refused_whatever_the_readers():
    need_service("NATS", NATS_HOST, NATS_PORT)
    for readers in (1, 2):
        with pytest.raises(SourceError, match=r"stream not found \(code 10059\)"):
            fetch_subjects(f"nats://{NATS_HOST}:{NATS_PORT}", f"{NATS_HOST}:{NATS_PORT}", 2.0,
                           "nope_x", [("nope_x.a", 3), ("nope_x.b", 5)], readers)


# ------------------------------------------------------------- servers of the test's own
@pytest.fixture
def private_server(tmp_path: Path):
    """Start a NATS server of the test's own (JetStream on, in tmp_path) with extra options;
    stopped afterwards. Yields a function: options -> port."""
    binary = shutil.which("nats-server") or (SERVER_BINARY if os.path.exists(SERVER_BINARY)
                                             else None)
    if binary is None:
        msg = "the nats-server binary is not installed"
        if IN_CI:
            pytest.fail(f"{msg} (required in CI)")
        print(f"SKIP: {msg}")
        pytest.skip(msg)
    procs: list[subprocess.Popen] = []

    def start(*options: str) -> int:
        port = free_port()
        store = tmp_path / f"js{len(procs)}"
        procs.append(subprocess.Popen(
            [binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store), *options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                return port
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the private NATS server did not start")

    yield start
    for p in procs:
        p.terminate()
        p.wait(10)


def _account_info(conn: WireConnection) -> dict:
    return conn.request("$JS.API.INFO", b"", "asking for the account's JetStream usage")


@pytest.mark.parametrize("options,good,bad", [
    (("--user", "reader", "--pass", "s3cret"), "reader:s3cret", "reader:wrong"),
    (("--auth", "t0ken"), "t0ken", "other"),
])
def test_a_user_and_password_or_a_token_in_the_url_are_sent_and_checked(private_server, options,
                                                                        good, bad):
    port = private_server(*options)
    address = f"127.0.0.1:{port}"
    conn = WireConnection(f"nats://{good}@{address}", address, 2.0)
    try:
        assert "streams" in _account_info(conn)
    finally:
        conn.close()
    with pytest.raises(SourceError, match=rf"cannot connect to NATS at 127\.0\.0\.1:{port}: "
                                          r"the NATS server refused: Authorization Violation"):
        WireConnection(f"nats://{bad}@{address}", address, 2.0)


def test_the_servers_pings_are_answered(private_server, tmp_path, monkeypatch):
    # Every 100 ms the server may PING a connection; it closes one that leaves five PINGs
    # unanswered ("Stale Connection"). The reader answers before it next sends or reads.
    conf = tmp_path / "ping.conf"
    conf.write_text('ping_interval: "100ms"\nping_max: 5\n')
    port = private_server("-c", str(conf))
    address = f"127.0.0.1:{port}"
    # The PINGs answered: those owed at each send (a PING parsed in one read is answered at
    # the next send or read, wherever the socket's reads happen to split the server's bytes).
    answered: list[int] = []
    send = WireConnection._send

    def counting(self, data):
        answered.append(self.reader.pings)
        send(self, data)

    monkeypatch.setattr(WireConnection, "_send", counting)
    conn = WireConnection(f"nats://{address}", address, 2.0)
    try:
        for _ in range(8):  # 2 s idle in all
            time.sleep(0.25)
            assert "streams" in _account_info(conn)
        assert sum(answered) + conn.reader.pings >= 1
    finally:
        conn.close()
    # Without the answers the server gives up on the connection: a reader that never counts
    # a PING never answers one.
    monkeypatch.setattr(WireReader, "pings", property(lambda self: 0, lambda self, v: None),
                        raising=False)
    conn = WireConnection(f"nats://{address}", address, 2.0)
    try:
        with pytest.raises(SourceError, match="Stale Connection|closed the connection"):
            for _ in range(8):
                time.sleep(0.25)
                _account_info(conn)
    finally:
        conn.close()
