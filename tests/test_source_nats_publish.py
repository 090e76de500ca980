"""The publisher's acknowledgements (`streaming.sources.nats_publish`): every message of a
window is acknowledged by the server before the next window goes out, read in publish order,
and a message the stream refuses, or one no stream takes, fails the publish naming its
position. The replies are read off one subscription (`AckWindow`), not one future each; the
messages go out over the wire connection (`nats_wire.WireConnection.publish_window`)."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

from streaming.sources import nats_publish
from streaming.sources.nats_publish import AckWindow, PublishError, describe_stream
from streaming.sources.records import SourceError
from tests.conftest import need_service
from tests.followutil import throwaway_stream
from tests.joinutil import pay, sig, write_log

TOPICS = ["payments", "risk_signals"]


def _reply(window: AckWindow, k: int, data: bytes, status: str | None = None) -> None:
    window.on_reply(window.reply_subject(k), data, status)


def test_replies_in_any_order_are_read_in_publish_order():
    w = AckWindow("_INBOX.test.")
    w.expect(3)
    for k, seq in ((2, 13), (0, 11), (1, 12)):
        assert not w.complete
        _reply(w, k, b'{"stream":"s","seq":%d}' % seq)
    assert w.complete and w.received == 3
    assert [w.ack(k, f"m{k}") for k in range(3)] == [(11, False), (12, False), (13, False)]


def test_a_duplicate_is_acknowledged_as_one():
    w = AckWindow("_INBOX.dup.")
    w.expect(1)
    _reply(w, 0, b'{"stream":"s","seq":4,"duplicate":true}')
    assert w.ack(0, "m0") == (4, True)


def test_a_reply_outside_the_window_is_ignored():
    w = AckWindow("_INBOX.out.")
    w.expect(1)
    _reply(w, 5, b'{"stream":"s","seq":9}')
    w.on_reply("_INBOX.out.x", b"", None)
    w.on_reply("_INBOX.other.0", b'{"stream":"s","seq":7}', None)
    assert not w.complete
    _reply(w, 0, b'{"stream":"s","seq":1}')
    _reply(w, 0, b'{"stream":"s","seq":3}')  # a second reply for 0 changes nothing
    assert w.complete and w.ack(0, "m0")[0] == 1


@pytest.mark.parametrize("data,status,says", [
    (b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}',
     None, "the stream refused it: maximum messages exceeded"),
    (b"", "503", "no stream stored it (status 503, no responders)"),
    (b"not json", None, "not an acknowledgement"),
    (b'{"stream":"s"}', None, "the stream refused it"),
])
def test_a_refused_message_names_what_and_why(data, status, says):
    w = AckWindow("_INBOX.err.")
    w.expect(1)
    _reply(w, 0, data, status)
    with pytest.raises(PublishError) as err:
        w.ack(0, "payments/p1 offset 7")
    assert "payments/p1 offset 7" in str(err.value) and says in str(err.value)


@pytest.mark.nats
def test_missing_acknowledgements_fail_after_the_timeout():
    # A subscriber that never replies stands where a stream would acknowledge: the server has
    # a responder, so it sends no "no responders" status either.
    need_service("NATS", "127.0.0.1", 4222)
    import nats as nats_client

    from streaming.sources.nats import run_private
    from streaming.sources.nats_wire import WireConnection
    subject = f"rs_silent_{uuid.uuid4().hex[:12]}"
    listening = threading.Event()
    done = threading.Event()

    async def silent() -> None:
        nc = await nats_client.connect("nats://127.0.0.1:4222")
        await nc.subscribe(subject)
        await nc.flush()
        listening.set()
        while not done.is_set():
            await asyncio.sleep(0.05)
        await nc.close()

    thread = threading.Thread(target=run_private, args=(silent,), daemon=True)
    thread.start()
    assert listening.wait(10)
    conn = WireConnection("nats://127.0.0.1:4222", "127.0.0.1:4222", 0.2)
    try:
        with pytest.raises(SourceError, match="the server acknowledged 0 of 2 messages"):
            conn.publish_window([(subject, "m/0", b"{}"), (subject, "m/1", b"{}")],
                                AckWindow(conn.acknowledgements))
    finally:
        conn.close()
        done.set()
        thread.join(10)


@pytest.mark.nats
def test_a_message_larger_than_the_server_takes_is_refused_before_it_is_sent():
    need_service("NATS", "127.0.0.1", 4222)
    from streaming.sources.nats_wire import WireConnection
    conn = WireConnection("nats://127.0.0.1:4222", "127.0.0.1:4222", 2.0)
    try:
        big = b"x" * conn.max_payload
        with pytest.raises(SourceError, match=r"message r/payments/p0/7 is \d+ bytes with its "
                                              r"headers; the server takes at most \d+"):
            conn.publish_window([("s.payments.p0", "r/payments/p0/7", big)],
                                AckWindow(conn.acknowledgements))
    finally:
        conn.close()


@pytest.fixture
def url():
    yield from throwaway_stream("pub")


def _recording(tmp_path) -> str:
    return write_log(tmp_path / "rec", {
        ("payments", 0): [pay(f"a{i}", "m1", i) for i in range(7)],
        ("payments", 1): [pay(f"b{i}", "m2", i) for i in range(5)],
        ("risk_signals", 0): [sig(f"s{i}", "m1", i) for i in range(6)]})


@pytest.mark.nats
def test_windows_smaller_than_the_recording_store_every_message_once(tmp_path, url,
                                                                     monkeypatch):
    monkeypatch.setattr(nats_publish, "PUBLISH_WINDOW", 4)
    root = _recording(tmp_path)
    first = nats_publish.publish_file_log(root, url)
    assert (first["messages"], first["duplicates"]) == (18, 0)
    stream = first["stream"]
    assert first["subjects"] == {f"{stream}.payments.p0": 7, f"{stream}.payments.p1": 5,
                                 f"{stream}.risk_signals.p0": 6}
    info = describe_stream(url)
    assert (info["messages"], info["first_seq"], info["last_seq"]) == (18, 1, 18)
    # Again: every message acknowledged as a duplicate of its message ID, nothing stored.
    again = nats_publish.publish_file_log(root, url)
    assert (again["messages"], again["duplicates"]) == (0, 18)
    assert describe_stream(url)["last_seq"] == 18


@pytest.mark.nats
def test_a_message_the_stream_refuses_fails_the_publish(tmp_path, url):
    from nats.js.api import DiscardPolicy, StreamConfig

    from streaming.sources.filelog import FileLog
    from streaming.sources.nats import NatsLocation, connect, encode_layout, run_private
    root = _recording(tmp_path)
    loc = NatsLocation.parse(url)
    layout = encode_layout(FileLog(root, TOPICS).partition_counts, "recorded")

    async def small_stream() -> None:
        nc = await connect(loc)
        try:
            await nc.jetstream().add_stream(StreamConfig(
                name=loc.stream, subjects=[f"{loc.stream}.>"], description=layout,
                max_msgs=5, discard=DiscardPolicy.NEW))
        finally:
            await nc.close()

    run_private(small_stream)
    with pytest.raises(PublishError) as err:
        nats_publish.publish_file_log(root, url)
    assert "offset" in str(err.value) and "maximum messages" in str(err.value)
    assert describe_stream(url)["messages"] == 5
