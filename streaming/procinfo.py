"""What the operating system says about a process."""

from __future__ import annotations


def vm_hwm_mib(pid: int | str) -> float | None:
    """The peak resident memory (MiB) of process `pid` ("self": this one): Linux's VmHWM, the
    high-water mark of the program's own address space. None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
