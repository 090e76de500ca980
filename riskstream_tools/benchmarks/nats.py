"""Benchmark: reading a recording from NATS JetStream against reading it from the file log.

Both sources are opened and drained in replay order (the worker's `merged`), on the same bulk
workload; publishing is timed on its own. The ratio is NATS read time over file-log read time:
the price of the network source for the same records, in the same order."""

from __future__ import annotations

import os
import time
import uuid

NATS_URL_ENV = "RISKSTREAM_NATS_SERVER"
DEFAULT_SERVER = "nats://127.0.0.1:4222"
TOPICS = ["payments", "risk_signals"]


def _drain(source) -> tuple[int, int]:
    n = 0
    last = 0
    for raw in source.merged({}):
        n += 1
        last = raw.arrival_us
    return n, last


def run_bench(workdir: str, n: int) -> dict:
    from streaming.contracts import CONTRACTS
    from streaming.sources.filelog import FileLog
    from streaming.sources.nats import NatsSource
    from streaming.sources.nats_publish import PublishError, delete_stream, publish_file_log

    from ..workloads.join_seed import generate_bulk

    server = os.environ.get(NATS_URL_ENV, DEFAULT_SERVER)
    root = os.path.join(workdir, f"nats-bench-{n}")
    generate_bulk(11, root, n)
    arrival = {t: CONTRACTS[t].arrival_time_field for t in TOPICS}
    location = f"{server}?stream=riskstream_bench_{uuid.uuid4().hex[:8]}"
    try:
        published = publish_file_log(root, location)
    except PublishError as exc:
        return {"n": n, "skipped": str(exc)}
    try:
        t0 = time.perf_counter()
        nats_count, nats_last = _drain(NatsSource(location, TOPICS, arrival))
        nats_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        file_count, file_last = _drain(FileLog(root, TOPICS, arrival))
        file_s = time.perf_counter() - t0
    finally:
        delete_stream(location)
    if (nats_count, nats_last) != (file_count, file_last):
        raise AssertionError(f"sources disagree: NATS {nats_count} records ending at "
                             f"{nats_last}, file log {file_count} ending at {file_last}")
    return {"n": n, "records": file_count,
            "publish_s": published["seconds"],
            "publish_records_per_s": round(file_count / published["seconds"]),
            "nats_read_s": round(nats_s, 3), "filelog_read_s": round(file_s, 3),
            "nats_records_per_s": round(file_count / nats_s),
            "filelog_records_per_s": round(file_count / file_s),
            "ratio_nats_over_filelog": round(nats_s / file_s, 2)}
