"""One live worker per assignment.

PostgreSQL: the lease is a session advisory lock held on a connection of its own for the
worker's lifetime. The server releases it when the session ends, so a worker that dies (even by
SIGKILL) frees its assignment as soon as its connection is gone, and the next start takes it
over; a second live worker is refused at once (`pg_try_advisory_lock`). SQLite: an exclusive
`flock` on a file beside the database, released by the kernel when the process exits.

The `worker_leases` row names the current holder (host:pid, acquired/released at); it is a
description, not the lock. Schema migrations are serialized in `versions.py`."""

from __future__ import annotations

from typing import Any

import os
import socket
import zlib
from urllib.parse import unquote

from sqlalchemy import text
from sqlalchemy.engine import Engine

from . import schema as S
from .bootstrap import LOCK_NAMESPACE

def _int4(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def lease_lock_id(key: str) -> int:
    return _int4(zlib.crc32(f"lease:{key}".encode()))


class LeaseHeld(RuntimeError):
    exit_code = 6


class LeaseUnavailable(RuntimeError):
    """The lease's lock file beside a SQLite database can be neither created nor opened (a
    directory the process may not write to): the store cannot be used (exit 7)."""
    exit_code = 7


def sqlite_file(database: str) -> str:
    """The file of a SQLite database named plainly or as a URI filename (`file:PATH`,
    `file:///PATH`; SQLAlchemy keeps the URI's query apart from `database`)."""
    if not database.startswith("file:"):
        return database
    path = database[len("file:"):].split("?", 1)[0]
    if path.startswith("//"):  # file://[host]/path: only a local, empty host is allowed
        path = path[2:]
    return unquote(path)


class Lease:
    """Hold the lease on `key` until `release()` (or process death)."""

    def __init__(self, engine: Engine, key: str):
        self.engine = engine
        self.key = key
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self._conn: Any = None
        self._fh: Any = None

    def acquire(self) -> Lease:
        from .ops import now_iso, upsert
        if self.engine.dialect.name == "postgresql":
            conn = self.engine.connect()
            got = conn.execute(text("SELECT pg_try_advisory_lock(CAST(:ns AS integer), "
                                    "CAST(:id AS integer))"),
                               {"ns": LOCK_NAMESPACE, "id": lease_lock_id(self.key)}).scalar()
            conn.commit()
            if not got:
                conn.close()
                raise LeaseHeld(self._held_message())
            self._conn = conn
        else:
            self._flock()
        with self.engine.begin() as c:
            upsert(c, S.metadata.tables["worker_leases"],
                   [{"lease_key": self.key, "holder": self.holder, "pid": os.getpid(),
                     "acquired_at": now_iso(), "released_at": None}], ["lease_key"])
        return self

    def _flock(self) -> None:
        import fcntl
        url = self.engine.url
        db = sqlite_file(url.database or "")
        if not db or db == ":memory:" or url.query.get("mode") == "memory":
            return  # a private in-memory store cannot be shared
        safe = self.key.replace("/", "-").replace("@", "_")
        path = f"{os.path.abspath(db)}.lease-{safe}"
        try:
            fh = open(path, "a+")
        except OSError:
            try:  # a read-only directory where an earlier run left the file: lock it as is
                fh = open(path)
            except OSError as exc:
                raise LeaseUnavailable(
                    f"cannot take the lease on {self.key}: its lock file {path} can be "
                    f"neither created nor opened ({exc.strerror}); make the store's "
                    f"directory writable") from None
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise LeaseHeld(self._held_message()) from None
        self._fh = fh

    def _held_message(self) -> str:
        who = "another process"
        try:
            with self.engine.connect() as c:
                row = c.execute(text("SELECT holder, acquired_at FROM worker_leases "
                                     "WHERE lease_key = :k"), {"k": self.key}).first()
            if row:
                who = f"{row[0]} (since {row[1]})"
        except Exception:  # the description is a courtesy; the lock decided
            pass
        return (f"assignment {self.key} is held by a live worker, {who}; one worker per "
                f"assignment: refusing to start (nothing read or written)")

    def alive(self) -> bool:
        """Whether the lock is still ours (PostgreSQL: the session survived)."""
        if self._conn is None:
            return True
        try:
            self._conn.execute(text("SELECT 1")).scalar()
            self._conn.commit()
            return True
        except Exception:
            return False

    def reacquire(self) -> None:
        """After the store came back: the old session is gone, take the lock again (refused
        when another worker took the assignment meanwhile)."""
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None
            self.acquire()

    def release(self) -> None:
        from .ops import now_iso
        try:
            with self.engine.begin() as c:
                c.execute(text("UPDATE worker_leases SET released_at = :t WHERE lease_key = :k "
                               "AND holder = :h"),
                          {"t": now_iso(), "k": self.key, "h": self.holder})
        except Exception:  # the lock below is what matters
            pass
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT pg_advisory_unlock(CAST(:ns AS integer), "
                                        "CAST(:id AS integer))"),
                                   {"ns": LOCK_NAMESPACE, "id": lease_lock_id(self.key)})
                self._conn.close()
            except Exception:
                pass
            self._conn = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None
