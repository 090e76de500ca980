"""Writes a generated scenario as a file log: records collected per topic-partition, then each
partition written in arrival order (ties keep insertion order)."""

from __future__ import annotations

import os
from datetime import datetime

import orjson


class Recording:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], list[tuple[datetime, int, bytes]]] = {}
        self.n = 0

    def add(self, topic: str, part: int, arrival: datetime, obj: dict | bytes) -> None:
        """Add a record; raw bytes are written as they are (for malformed-line cases)."""
        line = obj if isinstance(obj, bytes) else orjson.dumps(obj)
        self.rows.setdefault((topic, part), []).append((arrival, self.n, line))
        self.n += 1

    def write(self, out: str, partitions: dict[str, int]) -> None:
        for topic, n in partitions.items():
            os.makedirs(os.path.join(out, topic), exist_ok=True)
            for p in range(n):
                rows = sorted(self.rows.get((topic, p), []), key=lambda r: (r[0], r[1]))
                with open(os.path.join(out, topic, f"p{p}.jsonl"), "wb") as fh:
                    for _, _, line in rows:
                        fh.write(line + b"\n")
