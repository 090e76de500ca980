"""Store failures said in one line.

A database error raised through SQLAlchemy carries the statement and its parameters (payload
rows) in its text. What an operator needs is the cause: the store is read-only, the disk is
full, the server cannot be reached. `describe_store_error` names it from the driver's error
(SQLite result codes, PostgreSQL SQLSTATEs) and the driver's first message line, with every
location in it redacted; nothing of the statement or its rows."""

from __future__ import annotations

from sqlalchemy.exc import StatementError

from ..redaction import redact_text
from .sqlite_driver import error_types

STORE_FAILURE_EXIT = 7

# (kind, what to do) by cause.
READ_ONLY = ("read-only", "the store refuses writes; open it read-write or point --store at "
                          "a writable store")
DISK_FULL = ("disk full", "free space (or raise the quota) where the store lives, then rerun")
UNREACHABLE = ("unreachable", "check that the database server is up and the URL is right")
OTHER = ("failed", "see the database's own log for the cause")

# SQLite extended result codes (low byte = primary code).
_SQLITE_READONLY = 8
_SQLITE_FULL = 13
_SQLITE_IOERR = 10
_SQLITE_CANTOPEN = 14
_SQLITE_PERM = 3
# PostgreSQL SQLSTATEs.
_PG_READ_ONLY = {"25006"}  # read_only_sql_transaction
_PG_DISK_FULL = {"53100", "53000"}  # disk_full, insufficient_resources
_PG_CONNECT = {"08000", "08001", "08003", "08004", "08006", "57P01", "57P02", "57P03"}


def _cause(orig: BaseException | None) -> tuple[str, str]:
    if isinstance(orig, error_types()):
        code = getattr(orig, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        text = str(orig).lower()
        if primary in (_SQLITE_READONLY, _SQLITE_PERM) or "readonly" in text:
            return READ_ONLY
        if primary == _SQLITE_FULL or "disk is full" in text:
            return DISK_FULL
        if primary == _SQLITE_CANTOPEN or "unable to open" in text:
            return UNREACHABLE
        if primary == _SQLITE_IOERR:
            return ("I/O error", "the store file could not be written (disk full or a file "
                                 "size limit?); free space and rerun")
        return OTHER
    state = getattr(orig, "sqlstate", None)
    if state in _PG_READ_ONLY:
        return READ_ONLY
    if state in _PG_DISK_FULL:
        return DISK_FULL
    if state in _PG_CONNECT or (state is None and "connect" in str(orig).lower()):
        return UNREACHABLE
    return OTHER


class StoreErrorElsewhere(Exception):
    """A store error raised in another process (the writer process), carried across as the
    one line `describe_store_error` made of it there: the driver's error object itself does
    not travel."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


def describe_store_error(exc: BaseException) -> str:
    """One line: what the store did, why, and what to do. No statement, no parameters."""
    if isinstance(exc, StoreErrorElsewhere):
        return exc.description
    orig = getattr(exc, "orig", None) or exc
    kind, todo = _cause(orig)
    detail = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    return redact_text(f"store {kind}: {detail} ({todo}); the batch in hand was not committed, "
                       f"nothing partial was written")


def is_store_error(exc: BaseException) -> bool:
    return isinstance(exc, (StatementError, *error_types(), StoreErrorElsewhere)) or \
        type(exc).__module__.startswith("psycopg")
