"""What a run is given: its settings, the pipeline it hosts, and the protocols the host drives
(`Operator`, a pure state machine; `Source`, a partitioned log with positions)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..assignment import Assignment
from ..contracts import Contract
from ..operators.base import Emit
from ..redaction import redact_url
from ..sources.filelog import DEFAULT_MAX_ARRIVAL_JUMP_US, RawRecord
from ..store.ops import Store
from .throttle import ThrottleSettings

TP = tuple[str, int]


class Operator(Protocol):
    """A pure state machine the host feeds. Optional extras the host looks up by name:
    `snapshot_parts()` (operators.changes), which lets a checkpoint hold the operator's large
    maps as their changes since the checkpoint before it; and `clocked`, false when `on_clock`
    decides nothing (the host then skips calling it after every record; absent means true)."""

    pipeline: str
    state_schema: str

    def on_record(self, rec, out: Emit) -> None: ...
    def on_watermark(self, topic: str, wm: int, out: Emit) -> None: ...
    def on_clock(self, clock_us: int, out: Emit) -> None: ...
    def on_end_of_stream(self, out: Emit) -> None: ...
    def snapshot(self) -> dict: ...
    def restore(self, snap: dict) -> None: ...
    def state_metrics(self) -> dict: ...


class Source(Protocol):
    """A partitioned log read by position: the file log and NATS JetStream. Optional extras the
    host looks up by name: `restore_refusal(saved)` (a source that knows its own identity judges
    a checkpoint's) and `next_arrival(tp, offset)` (the arrival time at a position)."""

    partition_counts: dict[str, int]

    def tps(self) -> list[TP]: ...
    def owns(self, tp: TP) -> bool: ...
    def end_offset(self, tp: TP) -> int: ...
    def total_records(self) -> int: ...
    def read_at(self, tp: TP, offset: int) -> RawRecord: ...
    def caught_up(self, tp: TP, offset: int, clock_us: int) -> bool: ...
    def merged(self, positions: dict[TP, int]) -> Iterator[RawRecord]: ...
    def fingerprint(self, tp: TP, upto: int) -> str: ...
    def identity(self) -> dict: ...
    def ack(self, ranges: dict[str, tuple[int, int]]) -> None: ...


@dataclass
class RunSettings:
    source: str
    store_url: str
    checkpoint_every: int = 10000
    batch_size: int = 5000
    crash_at: tuple[str, int] | None = None
    idle_after_us: int | None = None
    end_of_stream: bool = False
    ttl_us: int | None = None
    extra: dict = field(default_factory=dict)
    # Opt-in pressure test: commit through a sink throttled in worker-clock time.
    throttle: ThrottleSettings | None = None
    # A record arriving more than this past its partition's latest arrival, that neither the
    # partition's later records nor the other partitions follow, is quarantined as
    # `arrival_time_jump` (docs/sources.md); None turns the check off.
    max_arrival_jump_us: int | None = DEFAULT_MAX_ARRIVAL_JUMP_US
    # Overlapped commits: while one batch's transaction commits in a writer process, the
    # worker reads, decodes and runs the operator for the next (at most one batch in flight;
    # the host loop settles it before every step whose order matters, so the store, the
    # checkpoints and the acks see the serial order). On by default for bounded runs: the
    # database work gets a core of its own (docs/performance.md, sixth round). Follow mode,
    # journal replay, throttled runs and an in-memory store always commit serially.
    overlap_commits: bool = True
    # With overlapped commits, how many batches may be handed to the writer behind a
    # checkpoint it is still compressing and writing, instead of the worker waiting for it
    # (`Worker._queues_behind`; 0 waits, as before the thirty-fourth round). A 1,000,000-
    # payment ledger's larger checkpoints take the writer several batches' time. A queued
    # batch's handover (its packed rows, in a memory file) waits for the writer; the worker
    # keeps only its journal number, ranges and record count.
    batches_behind_checkpoint: int = 4
    # Delta checkpoints (operators that name their large maps, host.checkpoints): a full
    # checkpoint once the last full one and the deltas since add up to more than 1 + this
    # many times the state as it stands (its size estimated: `CheckpointChain.wants_full`),
    # so restore reads at most about 1 + this many states; 0 writes every checkpoint full.
    full_checkpoint_after: float = 1.0
    # Scale-out by partition (`--worker I/N`, streaming/assignment.py): the partitions of the
    # keyed topics this worker owns, and the key its journal, checkpoints, metrics and runs
    # are kept under. One worker (0/1) owns them all under the pipeline's own name.
    assignment: Assignment = field(default_factory=Assignment)

    def describe(self) -> dict:
        return {"source": redact_url(self.source), "store": redact_url(self.store_url),
                "checkpoint_every": self.checkpoint_every, "batch_size": self.batch_size,
                "crash_at": f"{self.crash_at[0]}:{self.crash_at[1]}" if self.crash_at else None,
                "idle_after_us": self.idle_after_us, "end_of_stream": self.end_of_stream,
                "ttl_us": self.ttl_us, "max_arrival_jump_us": self.max_arrival_jump_us,
                "overlap_commits": self.overlap_commits,
                "batches_behind_checkpoint": self.batches_behind_checkpoint,
                "full_checkpoint_after": self.full_checkpoint_after,
                "worker": str(self.assignment),
                **({"throttle": self.throttle.describe()} if self.throttle else {}),
                **self.extra}


@dataclass
class PipelineSpec:
    name: str
    contracts: dict[str, Contract]
    lateness_us: dict[str, int]
    make_operator: Callable[[RunSettings], Operator]
    # The callbacks below take the pipeline's own operator class (hence Any, not Operator).
    # Called after restore/creation with the store, so the operator can reload host facts
    # (pending queue entries, published generations).
    prepare: Callable[[Any, Store], None] | None = None
    reference_versions: Callable[[Any], dict] | None = None
    # Optional: pipeline-specific health/freshness wording added to every metrics snapshot,
    # called with (operator, snapshot) after the generic fields are filled in.
    health: Callable[[Any, dict], dict] | None = None

    @property
    def topics(self) -> list[str]:
        return list(self.contracts)
