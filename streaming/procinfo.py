"""What the operating system says about a process."""

from __future__ import annotations

import os


def _proc_field(pid: int | str, file: str, name: str) -> int | None:
    """The number after `name:` in /proc/PID/`file` (a file of `name: value` lines); None
    where /proc does not say."""
    prefix = name + ":"
    try:
        with open(f"/proc/{pid}/{file}") as fh:
            for line in fh:
                if line.startswith(prefix):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def vm_hwm_mib(pid: int | str) -> float | None:
    """The peak resident memory (MiB) of process `pid` ("self": this one): Linux's VmHWM, the
    high-water mark of the program's own address space. None where /proc does not say."""
    kib = _proc_field(pid, "status", "VmHWM")
    return None if kib is None else kib / 1024


def cpu_seconds(pid: int | str) -> float | None:
    """The CPU seconds (user + system) process `pid` has used so far, from /proc/PID/stat;
    None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
        # The command name (field 2) is in parentheses and may hold spaces: count from after
        # its closing one. utime and stime are fields 14 and 15, in clock ticks.
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def written_mib(pid: int | str) -> float | None:
    """What process `pid` has caused to be written to storage so far (MiB): /proc/PID/io's
    `write_bytes`, which counts a file's pages as the process dirties them, whether the kernel
    has flushed them yet or not. None where /proc does not say."""
    written = _proc_field(pid, "io", "write_bytes")
    return None if written is None else written / (1 << 20)
