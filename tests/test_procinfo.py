"""What /proc says about a process: peak memory, CPU seconds and bytes written, and None for a
process that is not there."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from streaming.procinfo import cpu_seconds, vm_hwm_mib, written_mib


def test_cpu_seconds_grow_with_work():
    before = cpu_seconds("self")
    assert before is not None
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    after = cpu_seconds("self")
    assert after is not None and after - before >= 0.2


def test_written_mib_counts_the_pages_a_process_writes(tmp_path):
    before = written_mib("self")
    assert before is not None
    with open(tmp_path / "four-mib", "wb") as fh:
        fh.write(os.urandom(4 << 20))
        fh.flush()
        os.fsync(fh.fileno())
    after = written_mib("self")
    assert after is not None and after - before >= 4


def test_a_process_that_has_ended_has_nothing_to_say():
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    pid = int(proc.stdout)
    assert cpu_seconds(pid) is None
    assert written_mib(pid) is None
    assert vm_hwm_mib(pid) is None
