"""The worker configurations behind the join's evidence packet, each on its own fresh SQLite
store: in-process runs through `Worker`, and CLI runs in a subprocess where a crash must end the
process (an injected crash is `os._exit`)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from streaming.host.crash import CRASH_POINTS
from streaming.host.loop import RunResult, Worker
from streaming.host.settings import RunSettings
from streaming.pipelines.join import SPEC
from streaming.store.ops import Store
from streaming.timeutil import US_PER_MIN

REPAIR_MODES = ("dagster", "none")


@dataclass(frozen=True)
class EvidenceSettings:
    """How the packet runs the worker. Small batches on purpose: the worker writes one metrics
    snapshot per committed batch, so the batch size is the resolution of every trace."""

    batch_size: int = 5
    checkpoint_every: int = 25
    idle_after_us: int = 60 * US_PER_MIN
    ttl_us: int = 5 * US_PER_MIN
    crash_point: str = "after-sink-write"
    # dagster: the repair job itself, in process, dbt gates included (about 40 s on a 2-core
    # machine); none: no rebuild, the section says so. There is deliberately no shortcut that
    # publishes without the job's blocking checks: the gates have one implementation.
    repair: str = "dagster"
    subprocess_timeout_s: int = 300

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.checkpoint_every < 1:
            raise ValueError("batch_size and checkpoint_every must be >= 1")
        if self.crash_point not in CRASH_POINTS:
            raise ValueError(f"crash_point must be one of {CRASH_POINTS}")
        if self.repair not in REPAIR_MODES:
            raise ValueError(f"repair must be one of {REPAIR_MODES}")


def store_path(store_dir: str, name: str) -> str:
    return os.path.abspath(os.path.join(store_dir, f"{name}.sqlite"))


def store_url(store_dir: str, name: str) -> str:
    return f"sqlite:///{store_path(store_dir, name)}"


def fresh_store_url(store_dir: str, name: str) -> str:
    """A SQLite store that starts empty: a leftover from an earlier packet would resume from
    its checkpoint instead of running the configuration from the start."""
    os.makedirs(store_dir, exist_ok=True)
    path = store_path(store_dir, name)
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass
    return store_url(store_dir, name)


def run_worker(source: str, store: Store, settings: EvidenceSettings, *,
               end_of_stream: bool = True, idle_after_us: int | None = None,
               ttl_us: int | None = None) -> RunResult:
    run = RunSettings(source=source, store_url=store.url, batch_size=settings.batch_size,
                      checkpoint_every=settings.checkpoint_every, end_of_stream=end_of_stream,
                      idle_after_us=idle_after_us, ttl_us=ttl_us)
    return Worker(SPEC, run, store=store).run()


def cli_run_args(source: str, store_url: str, settings: EvidenceSettings) -> list[str]:
    return [sys.executable, "-m", "streaming.cli.main", "join", "run", "--source", source,
            "--store", store_url, "--batch-size", str(settings.batch_size),
            "--checkpoint-every", str(settings.checkpoint_every), "--end-of-stream", "--quiet"]


def run_cli(args: list[str], timeout_s: int) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)


def checkpoint_batches(journal: list[dict], checkpoint_every: int) -> list[int]:
    """The batch sequence numbers after which an uninterrupted run writes a checkpoint (the
    worker checkpoints once the records since the last one reach `checkpoint_every`)."""
    out, since = [], 0
    for entry in journal:
        since += entry["records"]
        if since >= checkpoint_every:
            out.append(entry["seq"])
            since = 0
    return out
