"""Follow mode against the real NATS JetStream and PostgreSQL services: each pipeline picks up
messages published after it started; SIGTERM commits the batch in hand, checkpoints and exits
0 within 5 s, and a restart neither loses nor repeats a row; two workers (0/2, 1/2) on one
PostgreSQL store give the same sink as one worker; a second worker with the same assignment is
refused, a dead holder's assignment is taken over, and a changed worker count is refused."""

from __future__ import annotations

import collections
import threading
import time

import pytest

from streaming.store.ops import Store
from tests.conftest import need_service
from tests.followutil import (NATS_HOST, NATS_PORT, assert_kept_per_worker, assert_same_sink,
                              cli, consumed, new_stream_url, pipeline_args, publish,
                              recording_positions, sink_positions, split_recording,
                              start_follow, stop, wait_consumed, wait_lease, within_lateness)

RUN = ["--batch-size", "50", "--checkpoint-every", "200", "--max-batch-delay", "100"]

pytestmark = pytest.mark.nats


@pytest.fixture
def stream():
    need_service("NATS", NATS_HOST, NATS_PORT)
    from streaming.sources.nats_publish import delete_stream
    urls: list[str] = []

    def make(tag: str = "follow") -> str:
        urls.append(new_stream_url(tag))
        return urls[-1]

    yield make
    for url in urls:
        delete_stream(url)


def generate(pipeline: str, out: str) -> None:
    cli(pipeline, "generate", "--seed", "11", "--out", out)


def assert_exactly_once(store_url: str, pipeline: str, recording: str) -> None:
    """Every position of the recording is in the sink exactly once, accounting closes and no
    fact was rejected (a repeated batch with other content would be)."""
    got = sink_positions(store_url, pipeline)
    counts = collections.Counter(got)
    assert [p for p, n in counts.items() if n > 1] == []
    assert set(counts) == recording_positions(recording)
    store = Store(store_url)
    try:
        assert all(row["closes"] for row in store.accounting(pipeline))
        assert store.sink_exception_rows(pipeline) == []
    finally:
        store.dispose()


@pytest.mark.parametrize("pipeline", ["join", "ledger", "receipts"])
def test_follow_picks_up_messages_published_after_start(pipeline, stream, pg_url, tmp_path):
    need_service("PostgreSQL", "127.0.0.1", 5432)
    rec = tmp_path / "rec"
    generate(pipeline, str(rec))
    first, second = split_recording(str(rec), str(tmp_path / "a"), str(tmp_path / "b"), 0.5)
    url = stream()
    publish(str(tmp_path / "a"), url)
    proc = start_follow(pipeline, url, pg_url, *RUN, *pipeline_args(pipeline, tmp_path))
    try:
        wait_consumed(pg_url, pipeline, first, [proc])
        assert consumed(pg_url, pipeline) == first
        publish(str(tmp_path / "b"), url, "--rate", "2000")
        wait_consumed(pg_url, pipeline, first + second, [proc])
    finally:
        code, out, err, seconds = stop(proc)
    assert code == 0, out + err
    assert seconds < 5.0
    assert f"stopped after {first + second} records" in out
    assert_exactly_once(pg_url, pipeline, str(rec))
    store = Store(pg_url)
    try:
        ck = store.latest_checkpoint(pipeline)
        assert ck is not None and ck["journal_seq"] == store.last_journal_seq(pipeline)
        snap = store.last_metrics(pipeline)
        assert snap["follow"]["records_total"] == first + second
        assert snap["follow"]["e2e_latency_ms"]["samples"] > 0
        assert set(snap["follow"]["lag"]) == {f"{t}:{p}" for t, p, _ in
                                              recording_positions(str(rec))}
    finally:
        store.dispose()


def test_sigterm_mid_stream_then_restart_neither_loses_nor_repeats(stream, sqlite_url,
                                                                     tmp_path):
    rec = tmp_path / "rec"
    generate("join", str(rec))
    total = len(recording_positions(str(rec)))
    url = stream()
    # An empty stream with the recording's layout, then a paced publish while the worker runs.
    first, _ = split_recording(str(rec), str(tmp_path / "a"), str(tmp_path / "b"), 0.0)
    publish(str(tmp_path / "a"), url)
    publisher = threading.Thread(target=publish, args=(str(rec), url, "--rate", "300"))
    proc = start_follow("join", url, sqlite_url, *RUN)
    publisher.start()
    try:
        wait_consumed(sqlite_url, "join", 100, [proc])
    finally:
        code, out, err, seconds = stop(proc)
    assert code == 0, out + err
    assert seconds < 5.0
    stopped_at = consumed(sqlite_url, "join")
    assert stopped_at < total  # stopped mid-stream
    store = Store(sqlite_url)
    assert store.latest_checkpoint("join")["journal_seq"] == store.last_journal_seq("join")
    store.dispose()
    proc = start_follow("join", url, sqlite_url, *RUN)
    try:
        publisher.join(timeout=30)
        wait_consumed(sqlite_url, "join", total, [proc])
    finally:
        code, out, err, _ = stop(proc)
    assert code == 0, out + err
    assert "0 replayed from the journal" in out  # the stop's checkpoint covered everything
    assert consumed(sqlite_url, "join") == total
    assert_exactly_once(sqlite_url, "join", str(rec))


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (/proc/<pid>/stat)."""
    import os
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_without_lingering_batches_close_as_delivered_and_give_the_same_sink(
        stream, pg_url, sqlite_url, tmp_path):
    # --max-batch-delay 0: each batch is what was delivered by the time the worker took it.
    # The sink must be the one a lingering worker gives, every record once, and an idle worker
    # must wait for records rather than poll for them in a loop.
    need_service("PostgreSQL", "127.0.0.1", 5432)
    rec = tmp_path / "rec"
    within_lateness("join", str(rec))
    total = len(recording_positions(str(rec)))
    first, second = split_recording(str(rec), str(tmp_path / "a"), str(tmp_path / "b"), 0.5)
    url = stream()
    publish(str(tmp_path / "a"), url)
    eager = start_follow("join", url, pg_url, "--batch-size", "2000", "--checkpoint-every",
                         "100000", "--max-batch-delay", "0")
    try:
        wait_consumed(pg_url, "join", first, [eager])
        publish(str(tmp_path / "b"), url, "--rate", "500")
        wait_consumed(pg_url, "join", total, [eager])
        idle_from = _cpu_seconds(eager.pid)
        time.sleep(2.0)
        idle_cpu = _cpu_seconds(eager.pid) - idle_from
    finally:
        code, out, err, _ = stop(eager)
    assert code == 0, out + err
    assert idle_cpu < 0.5, f"an idle worker used {idle_cpu:.2f} s of CPU in 2 s"
    store = Store(pg_url)
    try:
        closed_by = store.last_metrics("join")["follow"]["batches_closed_by"]
    finally:
        store.dispose()
    # The live half came at 500 records/s, in windows of 25: many batches, none waiting to
    # fill 2,000 (a lingering worker's would each wait out its delay).
    assert closed_by["delay"] >= 2, closed_by
    assert_exactly_once(pg_url, "join", str(rec))
    lingering = start_follow("join", url, sqlite_url, *RUN)
    try:
        wait_consumed(sqlite_url, "join", total, [lingering])
    finally:
        assert stop(lingering)[0] == 0
    for store_url in (pg_url, sqlite_url):
        cli("join", "run", "--source", url, "--store", store_url, "--follow", "--end-of-stream",
            "--quiet")
    assert_same_sink(pg_url, sqlite_url, "join")


@pytest.mark.parametrize("pipeline", ["join", "ledger", "receipts"])
def test_two_workers_give_the_sink_of_one(pipeline, stream, pg_url, sqlite_url, tmp_path):
    need_service("PostgreSQL", "127.0.0.1", 5432)
    rec = tmp_path / "rec"
    within_lateness(pipeline, str(rec))
    total = len(recording_positions(str(rec)))
    url = stream()
    publish(str(rec), url, "--pipeline", pipeline, "--partitions", "4")
    extra = pipeline_args(pipeline, tmp_path)
    one = start_follow(pipeline, url, sqlite_url, *RUN, *extra)
    try:
        wait_consumed(sqlite_url, pipeline, total, [one])
    finally:
        assert stop(one)[0] == 0
    two = [start_follow(pipeline, url, pg_url, *RUN, *extra, "--worker", f"{i}/2")
           for i in range(2)]
    try:
        # Broadcast topics (the ledger's categories) are read by both workers.
        wait_consumed(pg_url, pipeline, total, two)
        if pipeline == "ledger":
            from streaming.assignment import BROADCAST_TOPICS
            shared = sum(1 for t, _, _ in recording_positions(str(rec))
                         if t in BROADCAST_TOPICS["ledger"])
            wait_consumed(pg_url, pipeline, total + shared, two)
    finally:
        codes = [stop(p)[0] for p in two]
    assert codes == [0, 0]
    # Watermarks differ per worker (each covers its own partitions), so which decisions are
    # final yet differs while following; ending the stream finalizes every decision.
    for store_url, workers in ((sqlite_url, [[]]), (pg_url, [["--worker", "0/2"],
                                                          ["--worker", "1/2"]])):
        for w in workers:
            cli(pipeline, "run", "--source", url, "--store", store_url, "--follow",
                "--end-of-stream", "--quiet", *extra, *w)
    assert_same_sink(pg_url, sqlite_url, pipeline)
    store = Store(pg_url)
    try:
        # Each worker journals and checkpoints under its own key; readers see the union.
        assert_kept_per_worker(store, pipeline, 2)
    finally:
        store.dispose()


def test_one_live_worker_per_assignment(stream, pg_url, tmp_path):
    need_service("PostgreSQL", "127.0.0.1", 5432)
    rec = tmp_path / "rec"
    generate("join", str(rec))
    url = stream()
    publish(str(rec), url)
    holder = start_follow("join", url, pg_url, *RUN, "--worker", "0/2")
    try:
        wait_consumed(pg_url, "join", 1, [holder])
        second = cli("join", "run", "--source", url, "--store", pg_url, "--follow", "--quiet",
                     "--worker", "0/2", check=False)
        assert second.returncode == 6, second.stdout + second.stderr
        assert "assignment join@0/2 is held by a live worker" in second.stderr
    finally:
        holder.kill()  # a dead holder: its session ends and the lock with it
        holder.wait()
    taker = start_follow("join", url, pg_url, *RUN, "--worker", "0/2")
    try:
        wait_lease(pg_url, "join@0/2", taker.pid)
    finally:
        code, out, err, _ = stop(taker)
    assert code == 0, out + err
    changed = cli("join", "run", "--source", url, "--store", pg_url, "--follow", "--quiet",
                  "--worker", "0/3", check=False)
    assert changed.returncode == 6
    assert "re-keying" in changed.stderr


def test_follow_flags_are_refused_where_they_cannot_apply(tmp_path):
    rec = tmp_path / "rec"
    generate("join", str(rec))
    store = f"sqlite:///{tmp_path}/ops.sqlite"
    res = cli("join", "run", "--source", str(rec), "--store", store, "--follow", check=False)
    assert res.returncode == 2 and "--follow needs a nats:// source" in res.stderr
    res = cli("join", "run", "--source", "nats://127.0.0.1:1?stream=x", "--store", store,
              "--worker", "0/2", check=False)
    assert res.returncode == 2 and "--worker on a NATS stream needs --follow" in res.stderr
    res = cli("join", "run", "--source", "nats://127.0.0.1:1?stream=x", "--store", store,
              "--follow", "--worker", "2/2", check=False)
    assert res.returncode == 2 and "0 <= I < N" in res.stderr
    for bad in ("-1", "nan", "inf"):
        res = cli("join", "run", "--source", "nats://127.0.0.1:1?stream=x", "--store", store,
                  "--follow", "--max-batch-delay", bad, check=False)
        assert res.returncode == 2, res.stderr
        assert "--max-batch-delay must be 0 or more milliseconds" in res.stderr
