"""NATS JetStream source against a real server: the seed recording published to a stream
replays exactly like the file log (same order, offsets, fingerprints), the join over NATS gives
the file-log run's facts, pairs, outcomes, queue and quarantine, a crash resumes over NATS, and
a restore against another stream is refused without touching the store."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from streaming.cli.join import outcome_rows, pair_rows
from streaming.cli.main import cli
from streaming.sources.filelog import FileLog
from streaming.store import schema as S
from streaming.store.ops import Store
from tests.conftest import need_service

pytestmark = pytest.mark.nats

NATS_HOST, NATS_PORT = "127.0.0.1", 4222
TOPICS = ["payments", "risk_signals"]
# Small batches and checkpoints so the seed (470 records) spans several of each.
RUN_ARGS = ["--batch-size", "100", "--checkpoint-every", "200", "--quiet"]


@pytest.fixture
def stream_url():
    """A uniquely named stream for one test, deleted afterwards."""
    need_service("NATS", NATS_HOST, NATS_PORT)
    from streaming.sources.nats_publish import delete_stream
    url = f"nats://{NATS_HOST}:{NATS_PORT}?stream=rs_test_{uuid.uuid4().hex[:12]}"
    yield url
    delete_stream(url)


def invoke(*args: str, code: int = 0):
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


def run_subprocess(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streaming.cli.main", *args],
                          capture_output=True, text=True, timeout=120)


def results(url: str) -> dict:
    """Everything a run leaves that must not depend on the source kind or on crashes."""
    store = Store(url)
    a, q, z = S.archive.c, S.replay_queue.c, S.quarantine.c
    out = {
        "pairs": pair_rows(store, include_retired=True),
        "outcomes": outcome_rows(store),
        "facts": sorted((f["fact_key"], f["kind"], f["logical_key"], f["status"],
                         f["payload_hash"], f["predecessor_key"]) for f in store.facts("join")),
        "queue": [tuple(r.values()) for r in store.rows(
            select(q.queue_date, q.topic, q.partition, q.offset, q.event_id, q.revision,
                   q.reason, q.watermark_at_arrival_us, q.status, q.detail)
            .order_by(q.topic, q.partition, q.offset))],
        "quarantine": [tuple(r.values()) for r in store.rows(
            select(z.topic, z.partition, z.offset, z.reason, z.raw)
            .order_by(z.topic, z.partition, z.offset))],
        "archive": [tuple(r.values()) for r in store.rows(
            select(a.topic, a.partition, a.offset, a.event_id, a.revision, a.disposition)
            .order_by(a.topic, a.partition, a.offset))],
    }
    store.dispose()
    return out


@pytest.fixture(scope="module")
def file_log_results(seed_dir, tmp_path_factory):
    """The uninterrupted file-log run: the oracle every NATS run is compared with."""
    url = f"sqlite:///{tmp_path_factory.mktemp('filelog')}/ops.sqlite"
    invoke("join", "run", "--source", seed_dir[0], "--store", url, "--end-of-stream", *RUN_ARGS)
    res = results(url)
    # The oracle itself covers the cases the comparison is meant to carry.
    assert len(res["pairs"]) > 100
    assert any(p["status"] == "retired" for p in res["pairs"])
    assert {o["status"] for o in res["outcomes"]} >= {"final"}
    assert res["queue"] and res["quarantine"]
    return res


def test_source_replays_the_recording_like_the_file_log(seed_dir, stream_url):
    from streaming.sources.nats import NatsSource
    from streaming.sources.nats_publish import publish_file_log
    summary = publish_file_log(seed_dir[0], stream_url)
    log = FileLog(seed_dir[0], TOPICS)
    src = NatsSource(stream_url, TOPICS)

    assert summary["messages"] == log.total_records() == src.total_records() == 470
    assert src.partition_counts == log.partition_counts == {"payments": 2, "risk_signals": 3}
    assert [(tp, src.end_offset(tp)) for tp in src.tps()] == \
        [(tp, log.end_offset(tp)) for tp in log.tps()]
    want = [(r.topic, r.partition, r.offset, r.line, r.arrival_us) for r in log.merged({})]
    assert [(r.topic, r.partition, r.offset, r.line, r.arrival_us)
            for r in src.merged({})] == want
    # Offsets are per subject; stream sequences are the publish order, 1..470, each used once.
    seqs = [src.stream_sequence(tp, o) for tp in src.tps() for o in range(src.end_offset(tp))]
    assert sorted(seqs) == list(range(1, 471))
    order = [src.stream_sequence((t, p), o) for t, p, o, _, _ in want]
    assert order == list(range(1, 471))
    # Resuming mid-partition, reading at an offset, fingerprints and caught-up all agree.
    mid = {("payments", 0): 50, ("risk_signals", 1): 30}
    assert [(r.topic, r.partition, r.offset) for r in src.merged(mid)] == \
        [(r.topic, r.partition, r.offset) for r in log.merged(mid)]
    for tp in log.tps():
        for upto in (0, 5, log.end_offset(tp)):
            assert src.fingerprint(tp, upto) == log.fingerprint(tp, upto)
        assert src.read_at(tp, 3).line == log.read_at(tp, 3).line
        clock = log.read_at(tp, 3).arrival_us
        assert src.caught_up(tp, 3, clock) is log.caught_up(tp, 3, clock) is False
        assert src.caught_up(tp, log.end_offset(tp), clock) is True
    assert src.fingerprint(("payments", 0), 10_000) == "beyond-end"
    # One connection or five read the same snapshot as the default two.
    for readers in (1, 5):
        other = NatsSource(f"{stream_url}&readers={readers}", TOPICS)
        assert [(r.topic, r.partition, r.offset, r.line, r.arrival_us)
                for r in other.merged({})] == want
        assert [other.stream_sequence(tp, o) for tp in other.tps()
                for o in range(other.end_offset(tp))] == seqs
        assert other.identity() == src.identity()  # how it is read is not which log it is
    ident = src.identity()
    assert ident["kind"] == "nats" and ident["stream"] == stream_url.rsplit("=", 1)[1]
    assert ident["stream_created"] == summary["stream_created"]
    assert ident["partitions"] == {"payments": 2, "risk_signals": 3}
    assert ident["hash"] == "recorded"


def test_join_over_nats_equals_the_file_log_run(seed_dir, stream_url, tmp_path,
                                                file_log_results):
    invoke("nats", "publish", "--source", seed_dir[0], "--url", stream_url, "--quiet")
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    invoke("join", "run", "--source", stream_url, "--store", url, "--end-of-stream", *RUN_ARGS)
    got = results(url)
    for part in ("pairs", "outcomes", "facts", "queue", "quarantine", "archive"):
        assert got[part] == file_log_results[part], part
    ck = Store(url).latest_checkpoint("join")
    assert ck is not None


def test_crash_after_sink_write_then_resume_over_nats(seed_dir, stream_url, tmp_path,
                                                      file_log_results):
    invoke("nats", "publish", "--source", seed_dir[0], "--url", stream_url, "--quiet")
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    crashed = run_subprocess("join", "run", "--source", stream_url, "--store", url,
                             "--end-of-stream", "--crash-at", "after-sink-write:1", *RUN_ARGS)
    assert crashed.returncode == 137, crashed.stderr
    assert "crash injected at after-sink-write:1" in crashed.stderr
    store = Store(url)
    assert store.last_journal_seq("join") == 1  # the first batch committed, no checkpoint yet
    assert store.latest_checkpoint("join") is None
    store.dispose()
    resumed = run_subprocess("join", "run", "--source", stream_url, "--store", url,
                             "--end-of-stream", *RUN_ARGS)
    assert resumed.returncode == 0, resumed.stderr
    assert "1 replayed from the journal" in resumed.stdout
    got = results(url)
    for part in ("pairs", "outcomes", "facts", "queue", "quarantine", "archive"):
        assert got[part] == file_log_results[part], part


def _first_run_then_republish(seed_dir, stream_url, tmp_path, recording: str) -> tuple[str, dict]:
    invoke("nats", "publish", "--source", seed_dir[0], "--url", stream_url, "--quiet")
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    invoke("join", "run", "--source", stream_url, "--store", url, *RUN_ARGS)
    store = Store(url)
    before = store.table_counts()
    store.dispose()
    assert before["checkpoints"] >= 1 and before["facts"] > 0
    invoke("nats", "publish", "--source", recording, "--url", stream_url, "--recreate",
           "--quiet")
    return url, before


def test_restore_refused_on_a_stream_with_another_partition_count(seed_dir, stream_url,
                                                                  tmp_path):
    repartitioned = str(tmp_path / "repartitioned")
    shutil.copytree(seed_dir[0], repartitioned)
    open(os.path.join(repartitioned, "risk_signals", "p3.jsonl"), "wb").close()
    url, before = _first_run_then_republish(seed_dir, stream_url, tmp_path, repartitioned)
    res = invoke("join", "run", "--source", stream_url, "--store", url, *RUN_ARGS, code=4)
    assert "'risk_signals': 4" in res.output and "'risk_signals': 3" in res.output
    assert "repartitioned; restore refused" in res.output
    store = Store(url)
    assert store.table_counts() == before  # nothing read, nothing written
    store.dispose()


def test_restore_refused_on_a_recreated_stream_with_the_same_layout(seed_dir, stream_url,
                                                                    tmp_path):
    url, before = _first_run_then_republish(seed_dir, stream_url, tmp_path, seed_dir[0])
    res = invoke("join", "run", "--source", stream_url, "--store", url, *RUN_ARGS, code=4)
    assert "stream creation time" in res.output and "restore refused" in res.output
    store = Store(url)
    assert store.table_counts() == before
    store.dispose()


def test_file_log_checkpoint_resumes_over_nats_when_fingerprints_match(seed_dir, stream_url,
                                                                       tmp_path,
                                                                       file_log_results):
    """Moving a recording to JetStream mid-run: the consumed prefix is proven identical by the
    fingerprints, so the run continues over NATS and ends with the file-log run's results."""
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    crashed = run_subprocess("join", "run", "--source", seed_dir[0], "--store", url,
                             "--crash-at", "after-sink-write:3", *RUN_ARGS)
    assert crashed.returncode == 137, crashed.stderr
    assert Store(url).latest_checkpoint("join")["journal_seq"] == 2
    invoke("nats", "publish", "--source", seed_dir[0], "--url", stream_url, "--quiet")
    res = invoke("join", "run", "--source", stream_url, "--store", url, "--end-of-stream",
                 *RUN_ARGS)
    assert "restored from checkpoint" in res.output
    got = results(url)
    for part in ("pairs", "outcomes", "facts", "queue", "quarantine", "archive"):
        assert got[part] == file_log_results[part], part


def test_a_location_is_parsed_with_its_defaults_and_bounds():
    from streaming.sources.filelog import SourceError
    from streaming.sources.nats import DEFAULT_READERS, NatsLocation
    loc = NatsLocation.parse("nats://alice:s3cret@broker")
    assert (loc.server, loc.server_address, loc.stream, loc.timeout_s, loc.readers) == \
        ("nats://alice:s3cret@broker:4222", "broker:4222", "riskstream", 5.0, DEFAULT_READERS)
    assert "s3cret" not in repr(loc)
    loc = NatsLocation.parse("nats://broker:4333?stream=pay-1&timeout=0.5&readers=64")
    assert (loc.server_address, loc.stream, loc.timeout_s, loc.readers) == \
        ("broker:4333", "pay-1", 0.5, 64)
    for query, reason in (("readers=0", "readers must be a whole number from 1 to 64"),
                          ("readers=65", "readers must be a whole number from 1 to 64"),
                          ("readers=two", "not 'two'"), ("readers=-1", "not '-1'"),
                          ("timeout=0", "timeout must be > 0"),
                          ("stream=a.b", "invalid stream name"),
                          ("colour=blue", "known: stream, timeout, readers")):
        with pytest.raises(SourceError, match=reason):
            NatsLocation.parse(f"nats://u:pw@broker?{query}")
    with pytest.raises(SourceError) as refused:
        NatsLocation.parse("nats://u:pw@broker?readers=0")
    assert "pw" not in str(refused.value)  # the refusal names no password


def test_missing_stream_and_bad_location_exit_with_a_reason(stream_url, tmp_path):
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    res = invoke("join", "run", "--source", stream_url, "--store", url, "--quiet", code=5)
    assert "does not exist" in res.output
    res = invoke("join", "run", "--source", stream_url + "&colour=blue", "--store", url,
                 "--quiet", code=5)
    assert "unknown NATS location parameter" in res.output
    assert Store(url).table_counts()["runs"] == 0


def test_streams_the_source_cannot_read_safely_are_refused_with_the_reason(stream_url):
    import asyncio

    import nats as nats_client
    from nats.js.api import StreamConfig

    from streaming.sources.filelog import SourceError
    from streaming.sources.nats import NatsSource, encode_layout
    name = stream_url.rsplit("=", 1)[1]

    async def setup(step: str) -> None:
        nc = await nats_client.connect(f"nats://{NATS_HOST}:{NATS_PORT}")
        js = nc.jetstream()
        if step == "create":
            await js.add_stream(StreamConfig(
                name=name, subjects=[f"{name}.>"],
                description=encode_layout({"payments": 1, "risk_signals": 1}, "recorded")))
            for subject in ("payments.p0", "risk_signals.p0", "payments.p1"):
                await js.publish(f"{name}.{subject}", b'{"arrival_time": null}')
        elif step == "delete-stray":
            await js.delete_msg(name, 3)
        elif step == "drop-layout":
            await js.update_stream(StreamConfig(name=name, subjects=[f"{name}.>"],
                                                description="payments and signals"))
        await nc.close()

    asyncio.run(setup("create"))
    with pytest.raises(SourceError, match="topic 'receipts' is not in the layout"):
        NatsSource(stream_url, ["risk_signals", "receipts"])
    with pytest.raises(SourceError, match=r"holds messages on \['.*\.payments\.p1'\], outside "
                                          r"its declared 1 partition\(s\) of 'payments'"):
        NatsSource(stream_url, TOPICS)
    asyncio.run(setup("delete-stray"))
    with pytest.raises(SourceError, match="no longer holds 1 of its 3 messages"):
        NatsSource(stream_url, TOPICS)
    asyncio.run(setup("drop-layout"))
    with pytest.raises(SourceError, match="declares no partition layout"):
        NatsSource(stream_url, TOPICS)
