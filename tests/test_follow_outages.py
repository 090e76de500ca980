"""Follow mode survives its database going away: a private PostgreSQL (never the shared one)
is stopped for 10 s while a paced producer publishes; the worker retries with backoff, resumes,
reports the outage in its metrics and the sink holds every record exactly once. An outage
longer than --outage-limit ends the worker with exit 7 and one line of reason, nothing
half-written, and the next start resumes."""

from __future__ import annotations

import os
import threading
import time

import pytest

from streaming.store.ops import Store
from tests.conftest import need_service
from tests.followutil import (NATS_HOST, NATS_PORT, consumed, publish,
                              throwaway_stream,
                              recording_positions, split_recording, start_follow, stop,
                              wait_consumed)
from riskstream_tools.benchmarks.private_pg import PrivatePostgres
from riskstream_tools.ports import free_port
from tests.test_follow import RUN, assert_exactly_once

pytestmark = [pytest.mark.nats, pytest.mark.slow]


@pytest.fixture
def private_pg():
    pg = PrivatePostgres()
    pg.start()
    yield pg
    pg.destroy()


@pytest.fixture
def stream_url():
    yield from throwaway_stream("outage")


def bulk(tmp_path, events: int) -> str:
    from riskstream_tools.workloads.join_seed import generate_bulk
    rec = str(tmp_path / "bulk")
    generate_bulk(3, rec, events, merchants=40)
    split_recording(rec, str(tmp_path / "empty"), str(tmp_path / "unused"), 0.0)
    return rec


def test_postgres_restart_mid_run_is_survived(private_pg, stream_url, tmp_path):
    # 14 s of publishing at 150/s: the outage starts after 200 records and the server is back
    # about 13 s in, so records keep coming before, during and after it.
    rec = bulk(tmp_path, 2100)
    total = len(recording_positions(rec))
    publish(str(tmp_path / "empty"), stream_url)  # the layout, no messages
    producer = threading.Thread(target=publish, args=(rec, stream_url, "--rate", "150"))
    proc = start_follow("join", stream_url, private_pg.url, *RUN)
    producer.start()
    try:
        wait_consumed(private_pg.url, "join", 200, [proc])
        back = private_pg.restart_after(10.0)
        before = consumed(private_pg.url, "join")
        wait_consumed(private_pg.url, "join", before + 1, [proc], timeout=30)
        recovery_s = time.monotonic() - back
        producer.join(timeout=60)
        wait_consumed(private_pg.url, "join", total, [proc])
    finally:
        code, out, err, _ = stop(proc)
    assert code == 0, out + err
    print(f"recovery after a 10 s PostgreSQL restart: first commit {recovery_s:.2f}s after "
          f"the server was back")
    assert recovery_s < 10.0
    assert_exactly_once(private_pg.url, "join", rec)
    store = Store(private_pg.url)
    try:
        outage = store.last_metrics("join")["follow"]["store"]
        assert outage["outages"] >= 1 and outage["outage_seconds"] >= 5.0, outage
    finally:
        store.dispose()


def test_outage_past_the_limit_exits_7_then_resumes(private_pg, stream_url, tmp_path):
    # The server stops after 100 of 800 records: the rest are read by the next start.
    rec = bulk(tmp_path, 800)
    total = len(recording_positions(rec))
    publish(str(tmp_path / "empty"), stream_url)
    producer = threading.Thread(target=publish, args=(rec, stream_url, "--rate", "200"))
    proc = start_follow("join", stream_url, private_pg.url, *RUN, "--outage-limit", "2")
    producer.start()
    try:
        wait_consumed(private_pg.url, "join", 100, [proc])
        private_pg.stop()
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 7, out + err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: store unavailable for"), err
        private_pg.start()
        proc = start_follow("join", stream_url, private_pg.url, *RUN)
        producer.join(timeout=60)
        wait_consumed(private_pg.url, "join", total, [proc])
    finally:
        if proc.poll() is None:
            code, out, err, _ = stop(proc)
            assert code == 0, out + err
        producer.join(timeout=60)
    assert_exactly_once(private_pg.url, "join", rec)


class PrivateNats:
    """A JetStream server of this test's own (file storage in a temp dir) on a free port, so
    it can be stopped and started again without touching the shared one."""

    def __init__(self, root: str) -> None:
        # Below the ephemeral range: still free when the server starts again (ports.py).
        self.port = free_port()
        self.root = root
        self.proc = None

    def start(self) -> None:
        import shutil
        import subprocess
        binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        self.proc = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(self.port), "-js",
                                      "-sd", self.root], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        from tests.conftest import _port_open
        deadline = time.monotonic() + 10
        while not _port_open("127.0.0.1", self.port):
            assert time.monotonic() < deadline, "private nats-server did not start"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


def test_broker_restart_mid_run_is_survived(tmp_path):
    import shutil
    if not (shutil.which("nats-server") or os.path.exists("/usr/sbin/nats-server")):
        need_service("NATS", NATS_HOST, NATS_PORT)  # fails in CI, skips elsewhere
        pytest.skip("nats-server binary not installed")
    server = PrivateNats(str(tmp_path / "js"))
    server.start()
    url = f"nats://127.0.0.1:{server.port}?stream=rs_broker_outage"
    store_url = f"sqlite:///{tmp_path}/ops.sqlite"
    rec = bulk(tmp_path, 2000)
    total = len(recording_positions(rec))
    publish(str(tmp_path / "empty"), url)
    first, _ = split_recording(rec, str(tmp_path / "a"), str(tmp_path / "b"), 0.5)
    proc = start_follow("join", url, store_url, *RUN)
    try:
        publish(str(tmp_path / "a"), url, "--rate", "1000")
        wait_consumed(store_url, "join", first, [proc])
        server.stop()
        time.sleep(5.0)
        server.start()
        publish(str(tmp_path / "b"), url, "--rate", "1000")
        wait_consumed(store_url, "join", total, [proc], timeout=60)
    finally:
        code, out, err, _ = stop(proc)
        server.stop()
    assert code == 0, out + err
    assert_exactly_once(store_url, "join", rec)
    store = Store(store_url)
    try:
        broker = store.last_metrics("join")["follow"]["broker"]
        assert broker["outages"] >= 1 and broker["outage_seconds"] >= 4.0, broker
    finally:
        store.dispose()
