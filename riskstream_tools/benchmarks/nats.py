"""Scenario `nats-replay`: reading a recording from NATS JetStream against reading it from the
file log.

Both sources are opened and drained in replay order (the worker's `merged`), on the same bulk
workload; publishing is timed on its own. The file-log read is the reference: `ratio` is
file-log seconds over NATS seconds (the network source's speed as a fraction of the file's), and
`reference_equal` says both gave the same number of records ending at the same arrival time."""

from __future__ import annotations

import os
import time
import uuid

from .scenarios import _peak_rss_mib, result_fields

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


def recording(workdir: str, n: int) -> str:
    """The bulk recording the scenario publishes, written once per size. The bench's parent
    process writes it (`PREPARE`, catalog.run_extra) before the scenario's child starts: made
    in the child, a 1,000,000-event recording was the child's peak memory (4,324 MiB, where
    the reading peaked at 363 MiB), not what the scenario reads."""
    from ..workloads.join_seed import generate_bulk

    root = os.path.join(workdir, "inputs", f"nats_{n}")
    done = os.path.join(root, ".complete")
    if not os.path.exists(done):
        generate_bulk(11, root, n)
        open(done, "w").close()
    return root


def nats_replay(workdir: str, n: int) -> dict:
    from streaming.contracts import CONTRACTS
    from streaming.sources.filelog import FileLog
    from streaming.sources.nats import NatsSource
    from streaming.sources.nats_publish import delete_stream, publish_file_log

    server = os.environ.get(NATS_URL_ENV, DEFAULT_SERVER)
    root = recording(workdir, n)  # already written when the bench's parent prepared it
    arrival = {t: CONTRACTS[t].arrival_time_field for t in TOPICS}
    location = f"{server}?stream=riskstream_bench_{uuid.uuid4().hex[:8]}"
    try:
        published = publish_file_log(root, location)
        t0 = time.perf_counter()
        nats_count, nats_last = _drain(NatsSource(location, TOPICS, arrival))
        nats_s = time.perf_counter() - t0
        peak = _peak_rss_mib()
        t0 = time.perf_counter()
        file_count, file_last = _drain(FileLog(root, TOPICS, arrival))
        file_s = time.perf_counter() - t0
    finally:
        delete_stream(location)
    return {**result_fields("nats-replay", n, nats_s, file_s, peak, counted=file_count),
            "reference_equal": (nats_count, nats_last) == (file_count, file_last) > (0, 0),
            "records": nats_count, "reference_records": file_count,
            "publish_s": round(published["seconds"], 3),
            "publish_records_per_s": round(file_count / published["seconds"])}


SCENARIOS = {"nats-replay": nats_replay}
# What the bench's parent process writes before a scenario's child starts (its input).
PREPARE = {"nats-replay": recording}
SERVICES = (("NATS", "127.0.0.1", 4222),)
