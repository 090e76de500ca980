"""Helpers for follow-mode tests: split recordings, publish, start and stop follow workers as
processes, wait for what they consumed, read the sink."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

from sqlalchemy import func, select

from streaming.store import schema as S
from streaming.store.ops import Store, current_with_payload

NATS_HOST, NATS_PORT = "127.0.0.1", 4222
ENV = {"RISKSTREAM_REPAIR_KEY": "follow-test-key"}


def new_stream_url(tag: str = "follow") -> str:
    return f"nats://{NATS_HOST}:{NATS_PORT}?stream=rs_{tag}_{uuid.uuid4().hex[:10]}"


def throwaway_stream(tag: str) -> Iterator[str]:
    """A fresh JetStream stream URL for one test, deleted afterwards (a fixture body: `yield
    from throwaway_stream(tag)`); NATS must be up (fails in CI, skips elsewhere)."""
    from streaming.sources.nats_publish import delete_stream
    from tests.conftest import need_service
    need_service("NATS", NATS_HOST, NATS_PORT)
    url = new_stream_url(tag)
    yield url
    delete_stream(url)


def split_recording(src: str, first: str, second: str, fraction: float) -> tuple[int, int]:
    """Cut every partition of a file-log recording at `fraction` of its lines: the prefix goes
    to `first`, the rest to `second`, so publishing first then second gives each subject the
    recording's own order and offsets. Returns the line counts of the two parts."""
    counts = [0, 0]
    for topic in sorted(os.listdir(src)):
        tdir = os.path.join(src, topic)
        if not os.path.isdir(tdir):
            continue
        for name in sorted(os.listdir(tdir)):
            if not name.endswith(".jsonl"):
                continue
            with open(os.path.join(tdir, name), "rb") as fh:
                lines = [ln for ln in fh.read().splitlines() if ln.strip()]
            cut = int(len(lines) * fraction)
            for i, (root, part) in enumerate(((first, lines[:cut]), (second, lines[cut:]))):
                os.makedirs(os.path.join(root, topic), exist_ok=True)
                with open(os.path.join(root, topic, name), "wb") as out:
                    out.write(b"".join(ln + b"\n" for ln in part))
                counts[i] += len(part)
    return counts[0], counts[1]


def rekeyed_recording(src: str, dst: str, pipeline: str, partitions: int) -> None:
    """The recording as a file log co-partitioned by the pipeline's key (what `--worker I/N`
    needs): each keyed topic's records in `partitions` partitions by the publisher's routing
    (`nats publish --pipeline --partitions`), in the recording's arrival order; reference
    topics as recorded."""
    import orjson

    from streaming.sources.filelog import FileLog
    from streaming.sources.nats_publish import PARTITION_KEYS, partition_of
    topics = sorted(t for t in os.listdir(src) if os.path.isdir(os.path.join(src, t)))
    log = FileLog(src, topics)
    keys = PARTITION_KEYS[pipeline]
    out: dict[tuple[str, int], list[bytes]] = {}
    for raw in log.merged({tp: 0 for tp in log.tps()}):
        field = keys.get(raw.topic)
        if field is None:
            part = raw.partition
        else:
            key = orjson.loads(raw.line).get(field)
            part = partition_of(key.encode() if isinstance(key, str) else raw.line, partitions)
        out.setdefault((raw.topic, part), []).append(raw.line)
    log.close()
    for topic in topics:
        n = partitions if topic in keys else log.partition_counts[topic]
        os.makedirs(os.path.join(dst, topic), exist_ok=True)
        for p in range(n):
            with open(os.path.join(dst, topic, f"p{p}.jsonl"), "wb") as fh:
                fh.write(b"".join(line + b"\n" for line in out.get((topic, p), [])))


def recording_positions(root: str) -> set[tuple[str, int, int]]:
    out = set()
    for topic in sorted(os.listdir(root)):
        tdir = os.path.join(root, topic)
        if not os.path.isdir(tdir):
            continue
        for name in os.listdir(tdir):
            if name.startswith("p") and name.endswith(".jsonl"):
                with open(os.path.join(tdir, name), "rb") as fh:
                    n = len([ln for ln in fh.read().splitlines() if ln.strip()])
                out.update((topic, int(name[1:-6]), o) for o in range(n))
    return out


def cli(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args],
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **ENV})
    if check:
        assert res.returncode == 0, res.stdout + res.stderr
    return res


def publish(src: str, url: str, *extra: str) -> subprocess.CompletedProcess:
    return cli("nats", "publish", "--source", src, "--url", url, "--quiet", *extra)


def start_follow(pipeline: str, url: str, store_url: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", pipeline, "run", "--source", url,
         "--store", store_url, "--follow", "--quiet", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV})


def stop(proc: subprocess.Popen, timeout: float = 5.0) -> tuple[int, str, str, float]:
    """SIGTERM; returns (exit code, stdout, stderr, seconds until exit)."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=timeout + 10)
    return proc.returncode, out, err, time.monotonic() - t0


def consumed(store_url: str, pipeline: str) -> int:
    """Records consumed by every worker of `pipeline` (journal rows of its keys)."""
    store = Store(store_url)
    try:
        j = S.journal.c
        with store.engine.connect() as conn:
            return int(conn.execute(select(func.coalesce(func.sum(j.records), 0)).where(
                (j.pipeline == pipeline) | j.pipeline.like(f"{pipeline}@%"))).scalar())
    finally:
        store.dispose()


def wait_consumed(store_url: str, pipeline: str, n: int, procs=(), timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    got = -1
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                out, err = p.communicate()
                raise AssertionError(f"worker exited {p.returncode}: {out}{err}")
        got = consumed(store_url, pipeline)
        if got >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"{pipeline}: consumed {got} of {n} records in {timeout}s")


def sink_positions(store_url: str, pipeline: str) -> list[tuple[str, int, int]]:
    """Every (topic, partition, offset) the sink accounts for: archive and quarantine rows."""
    store = Store(store_url)
    try:
        a, q = S.archive.c, S.quarantine.c
        rows = [(r["topic"], r["partition"], r["offset"]) for r in store.rows(
            select(a.topic, a.partition, a.offset).where(a.pipeline == pipeline))]
        rows += [(r["topic"], r["partition"], r["offset"]) for r in store.rows(
            select(q.topic, q.partition, q.offset).where(q.pipeline == pipeline))]
        return rows
    finally:
        store.dispose()


def current_rows(store_url: str, pipeline: str) -> list[tuple]:
    store = Store(store_url)
    try:
        v = S.current_view.c
        return sorted((r["kind"], r["logical_key"], r["fact_key"], r["status"], r["payload"])
                      for r in store.rows(current_with_payload().where(v.pipeline == pipeline)))
    finally:
        store.dispose()


def fact_rows(store_url: str, pipeline: str) -> list[tuple]:
    store = Store(store_url)
    try:
        return sorted((f["fact_key"], f["kind"], f["logical_key"], f["status"],
                       f["payload_hash"]) for f in store.facts(pipeline))
    finally:
        store.dispose()


def wait_lease(store_url: str, key: str, pid: int, timeout: float = 30) -> None:
    """Until the worker with `pid` holds the lease on `key` (its row names it)."""
    from streaming.store.tables_lease import worker_leases
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        store = Store(store_url)
        try:
            rows = store.rows(select(worker_leases).where(worker_leases.c.lease_key == key))
        finally:
            store.dispose()
        if rows and rows[0]["pid"] == pid and rows[0]["released_at"] is None:
            return
        time.sleep(0.2)
    raise AssertionError(f"worker {pid} did not take the lease on {key} in {timeout}s")


def comparable(rows: list[tuple], pipeline: str) -> list[tuple]:
    """Current rows as compared across runs that consumed different interleavings (live
    delivery, another worker count). A receipt decision records the watermark it was scored
    at, which depends on when the other partitions' records were consumed (and, scaled out, on
    the worker's partitions): the one field not decided by the records themselves. Everything
    else must be equal."""
    if pipeline != "receipts":
        return rows
    import orjson
    out = []
    for kind, key, fact_key, status, payload in rows:
        p = orjson.loads(payload)
        p.pop("watermark", None)
        out.append((kind, key, fact_key, status, orjson.dumps(p, option=orjson.OPT_SORT_KEYS)))
    return sorted(out)


def pipeline_args(pipeline: str, tmp_path) -> list[str]:
    return ["--model-dir", str(tmp_path / "models")] if pipeline == "receipts" else []


def within_lateness(pipeline: str, out: str) -> None:
    """Workloads whose records stay within the pipeline's lateness bound."""
    from tests.crashloop import workload
    workload(pipeline, out, 5)


def assert_same_sink(store_url: str, reference_url: str, pipeline: str) -> None:
    """The store holds the reference store's facts and current rows (`comparable`: a receipt
    decision's watermark is its worker's), and some of them."""
    assert comparable(current_rows(store_url, pipeline), pipeline) == \
        comparable(current_rows(reference_url, pipeline), pipeline)
    if pipeline != "receipts":
        assert fact_rows(store_url, pipeline) == fact_rows(reference_url, pipeline)
    else:
        assert [f[:4] for f in fact_rows(store_url, pipeline)] == \
            [f[:4] for f in fact_rows(reference_url, pipeline)]
    assert len(current_rows(store_url, pipeline)) > 0


def assert_kept_per_worker(store: Store, pipeline: str, workers: int) -> None:
    """Each of the pipeline's `workers` checkpointed under its own key (`<pipeline>@I/N`),
    none under the pipeline's name, and accounting closes over the union."""
    for i in range(workers):
        assert store.latest_checkpoint(f"{pipeline}@{i}/{workers}")
    assert store.latest_checkpoint(pipeline) is None
    assert all(row["closes"] for row in store.accounting(pipeline))
