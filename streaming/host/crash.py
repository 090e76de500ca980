"""Crash injection for recovery tests: the process ends at once at a named point."""

from __future__ import annotations

import os
import sys

CRASH_POINTS = ("after-candidate", "after-sink-write", "before-ack", "during-checkpoint")
CRASH_EXIT_CODE = 137


def parse_crash_at(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    point, _, k = value.partition(":")
    if point not in CRASH_POINTS or not k.isdigit() or int(k) < 1:
        raise ValueError(f"--crash-at must be one of {', '.join(CRASH_POINTS)} followed by :K "
                         f"(K >= 1), got {value!r}")
    return point, int(k)


class CrashInjector:
    """Ends the process at once (no cleanup, exit 137) at the K-th occurrence of a point."""

    def __init__(self, spec: tuple[str, int] | None):
        self.spec = spec
        self.counts = {p: 0 for p in CRASH_POINTS}

    def fires_next(self, point: str) -> bool:
        """Whether the next occurrence of `point` ends the process."""
        return bool(self.spec and self.spec[0] == point
                    and self.counts[point] + 1 == self.spec[1])

    def hit(self, point: str) -> None:
        self.counts[point] += 1
        if self.spec and self.spec[0] == point and self.counts[point] == self.spec[1]:
            sys.stdout.flush()
            sys.stderr.write(f"crash injected at {point}:{self.spec[1]}\n")
            sys.stderr.flush()
            os._exit(CRASH_EXIT_CODE)
