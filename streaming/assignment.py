"""Scale-out by partition: which partitions a worker owns, and where its rows live.

`--worker I/N` owns partition p of every keyed topic of its pipeline when p % N == I; the
pipeline's keyed topics must be co-partitioned by its key (same partition count, same hash of
the key; `riskstream nats publish --partitions P --pipeline NAME` writes such a stream).
Reference topics that are not keyed by the pipeline's key (the ledger's merchant categories)
are read whole by every worker: each worker needs all of them to decide its own keys.

Each worker keeps its own journal, checkpoints, metrics and runs under the key
`<pipeline>@I/N` (the plain pipeline name when N is 1, which is what a single worker has always
used); facts, the current view, archive, quarantine and the replay queue keep the pipeline name,
so every reader sees the union of the workers' disjoint keys."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Topics every worker of a pipeline reads in full (reference data, not keyed by the pipeline's
# key).
BROADCAST_TOPICS: dict[str, frozenset[str]] = {"ledger": frozenset({"merchant_categories"})}

_ASSIGNMENT_RE = re.compile(r"^(\d+)/(\d+)$")


class AssignmentError(RuntimeError):
    """The assignment cannot be served: malformed, changed since the store's checkpoints, or
    held by another live worker."""

    exit_code = 6


@dataclass(frozen=True)
class Assignment:
    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str | None) -> Assignment:
        if text is None or text == "":
            return cls()
        m = _ASSIGNMENT_RE.match(text.strip())
        if not m:
            raise AssignmentError(f"--worker must be I/N (e.g. 0/2), got {text!r}")
        i, n = int(m.group(1)), int(m.group(2))
        if n < 1 or not 0 <= i < n:
            raise AssignmentError(f"--worker {text}: need N >= 1 and 0 <= I < N")
        return cls(i, n)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def store_key(self, pipeline: str) -> str:
        """The journal/checkpoint/metrics key of this worker."""
        return pipeline if self.count == 1 else f"{pipeline}@{self}"

    def owns(self, pipeline: str, topic: str, partition: int) -> bool:
        if self.count == 1 or topic in BROADCAST_TOPICS.get(pipeline, ()):
            return True
        return partition % self.count == self.index

    def owned(self, pipeline: str, partition_counts: dict[str, int]) -> set[tuple[str, int]]:
        return {(t, p) for t, n in partition_counts.items() for p in range(n)
                if self.owns(pipeline, t, p)}


def parse_store_key(key: str) -> tuple[str, Assignment]:
    """`join@1/2` -> ("join", 1/2); `join` -> ("join", 0/1)."""
    name, sep, rest = key.partition("@")
    return name, (Assignment.parse(rest) if sep else Assignment())


def check_assignment_history(keys: list[str], pipeline: str, mine: Assignment) -> None:
    """Refuse when the store holds journal rows of this pipeline written under another worker
    count: the keys were split differently, so this worker's state would miss or repeat some.
    `keys` are the distinct journal keys of the store."""
    others = sorted({k for k in keys
                     if parse_store_key(k)[0] == pipeline
                     and parse_store_key(k)[1].count != mine.count})
    if others:
        raise AssignmentError(
            f"the store holds {pipeline} state written by {', '.join(others)}; this worker is "
            f"{mine.store_key(pipeline)}. Changing the number of workers needs the re-keying "
            f"procedure in docs/deployment.md; refusing to start (nothing read or written)")
