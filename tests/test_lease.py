"""The worker lease and serialized schema creation, on SQLite and PostgreSQL: a second holder
of one assignment is refused while the first lives and admitted once it released or died;
other assignments are independent; first starts on an empty PostgreSQL database do not race on
CREATE TABLE."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from streaming.assignment import Assignment, AssignmentError, check_assignment_history
from streaming.store.lease import Lease, LeaseHeld
from streaming.store.ops import Store

HOLD = """
import sys, time
from streaming.store.ops import Store
from streaming.store.lease import Lease
lease = Lease(Store(sys.argv[1]).engine, sys.argv[2]).acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_one_holder_per_key_released_on_exit_and_on_death(store_url):
    store = Store(store_url)
    try:
        first = Lease(store.engine, "join@0/2").acquire()
        with pytest.raises(LeaseHeld, match="assignment join@0/2 is held by a live worker"):
            Lease(store.engine, "join@0/2").acquire()
        other = Lease(store.engine, "join@1/2").acquire()  # another assignment: independent
        first.release()
        again = Lease(store.engine, "join@0/2").acquire()
        again.release()
        other.release()
        # A holder that dies without releasing (SIGKILL) frees the key with its session.
        proc = subprocess.Popen([sys.executable, "-c", HOLD, store_url, "ledger@0/1"],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "held"
            with pytest.raises(LeaseHeld):
                Lease(store.engine, "ledger@0/1").acquire()
        finally:
            proc.kill()
            proc.wait()
        taken = _acquire_once_the_session_ends(store, "ledger@0/1")
        rows = store.rows(__import__("sqlalchemy").text(
            "SELECT lease_key, pid, released_at FROM worker_leases ORDER BY lease_key"))
        assert [(r["lease_key"], r["released_at"] is None) for r in rows] == \
            [("join@0/2", False), ("join@1/2", False), ("ledger@0/1", True)]
        taken.release()
    finally:
        store.dispose()


def _acquire_once_the_session_ends(store: Store, key: str, within_s: float = 10.0) -> Lease:
    """The lease of a holder that was killed. PostgreSQL ends the dead client's session (and
    its advisory lock) when its backend sees the connection closed, moments after the process
    is gone rather than at the same instant; SQLite's flock goes with the process."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return Lease(store.engine, key).acquire()
        except LeaseHeld:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


CREATE = """
import sys
from streaming.store.ops import Store
Store(sys.argv[1]).dispose()
print("ok")
"""


def test_first_starts_on_an_empty_postgres_do_not_race(pg_url):
    procs = [subprocess.Popen([sys.executable, "-c", CREATE, pg_url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [err[-500:] for _, err in results]


def test_assignments_parse_own_and_refuse_a_changed_count():
    a = Assignment.parse("1/3")
    assert (a.index, a.count, a.store_key("join")) == (1, 3, "join@1/3")
    assert Assignment.parse(None).store_key("join") == "join"
    assert sorted(a.owned("join", {"payments": 6, "risk_signals": 6})) == \
        [("payments", 1), ("payments", 4), ("risk_signals", 1), ("risk_signals", 4)]
    # Reference topics are read whole by every worker.
    assert ("merchant_categories", 0) in a.owned("ledger", {"payments": 6,
                                                            "merchant_categories": 1})
    for bad in ("3/3", "1/0", "x", "1/2/3"):
        with pytest.raises(AssignmentError):
            Assignment.parse(bad)
    check_assignment_history(["join@0/3", "join@2/3", "ledger"], "join", a)
    with pytest.raises(AssignmentError, match="re-keying"):
        check_assignment_history(["join@0/2", "ledger"], "join", a)
    with pytest.raises(AssignmentError):
        check_assignment_history(["join"], "join", a)


def test_a_store_named_by_a_uri_filename_is_leased_as_its_file(tmp_path):
    from streaming.store.lease import sqlite_file
    path = tmp_path / "ops.sqlite"
    assert sqlite_file(str(path)) == str(path)
    assert sqlite_file(f"file:{path}") == str(path)
    assert sqlite_file(f"file://{path}") == str(path)
    assert sqlite_file("file:/tmp/a%20b.sqlite") == "/tmp/a b.sqlite"
    plain, uri = Store(f"sqlite:///{path}"), Store(f"sqlite:///file:{path}?uri=true")
    try:
        held = Lease(plain.engine, "join").acquire()
        with pytest.raises(LeaseHeld):  # the same lock file, however the store is named
            Lease(uri.engine, "join").acquire()
        held.release()
        Lease(uri.engine, "join").acquire().release()
    finally:
        plain.dispose()
        uri.dispose()


def test_a_lease_whose_lock_file_cannot_be_made_is_refused_in_one_line(tmp_path):
    from sqlalchemy import create_engine

    from streaming.store.lease import LeaseUnavailable
    (tmp_path / "not-a-dir").write_text("")
    engine = create_engine(f"sqlite:///{tmp_path}/not-a-dir/ops.sqlite")
    with pytest.raises(LeaseUnavailable, match="cannot take the lease on join: its lock file "
                                               ".*ops.sqlite.lease-join can be neither created"):
        Lease(engine, "join").acquire()
    assert LeaseUnavailable.exit_code == 7
