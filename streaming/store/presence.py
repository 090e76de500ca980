"""Opening a store that must already exist.

Every command that reads, judges or repairs works on a store a pipeline has written. Opening
one with `Store(url)` creates the file and the tables, so a mistyped URL would answer with an
empty, healthy-looking store. `open_existing` looks first, without creating or writing
anything, and refuses a missing or uninitialized store with `StoreMissing`."""

from __future__ import annotations

import os

from sqlalchemy import create_engine, inspect
from sqlalchemy.exc import SQLAlchemyError

from .ops import Store, normalize_url
from .sqlite_driver import dbapi

# A store is initialized once its tables exist; `facts` is created with the first of them.
MARKER_TABLE = "facts"


class StoreMissing(RuntimeError):
    """No initialized riskstream store at the URL (nothing was created)."""

    exit_code = 7


def shown_url(url: str) -> str:
    """The URL without its password (the last `@` ends the credentials)."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    netloc_end = rest.find("/")
    netloc = rest if netloc_end < 0 else rest[:netloc_end]
    if "@" not in netloc:
        return url
    tail = rest[len(netloc):]
    return f"{scheme}://***@{netloc.rsplit('@', 1)[1]}{tail}"


def sqlite_path(url: str) -> str | None:
    """The file of a sqlite URL, or None for an in-memory one."""
    path = url.split("///", 1)[1] if "///" in url else ""
    path = path.split("?", 1)[0]
    return None if path in ("", ":memory:") else path


def _sqlite_initialized(path: str) -> bool:
    # Read-only URI: opening it never creates the file or a journal.
    # The process's SQLite library, as the store's own connections use (`sqlite_driver`).
    driver = dbapi()
    con = driver.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True, timeout=30)
    try:
        row = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                          (MARKER_TABLE,)).fetchone()
        return row is not None
    except driver.DatabaseError:
        return False
    finally:
        con.close()


def check_store(url: str) -> None:
    """Raise StoreMissing unless `url` holds an initialized riskstream store."""
    shown = shown_url(url)
    if url.startswith("sqlite"):
        path = sqlite_path(url)
        if path is None:
            raise StoreMissing(f"no riskstream store at {shown}: an in-memory store holds "
                               f"nothing to read")
        if not os.path.isfile(path):
            raise StoreMissing(f"no riskstream store at {shown}: {path} does not exist "
                               f"(nothing was created)")
        if not _sqlite_initialized(path):
            raise StoreMissing(f"no riskstream store at {shown}: {path} holds no riskstream "
                               f"tables (nothing was created)")
        return
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            present = inspect(conn).has_table(MARKER_TABLE)
    except SQLAlchemyError as exc:
        first = str(getattr(exc, "orig", exc)).strip().splitlines()[0] if str(exc) else ""
        raise StoreMissing(f"no riskstream store at {shown}: cannot open it ({first})") from None
    finally:
        engine.dispose()
    if not present:
        raise StoreMissing(f"no riskstream store at {shown}: the database holds no riskstream "
                           f"tables (nothing was created)")


def open_existing(url: str) -> Store:
    """The store at `url`, refusing (StoreMissing) a missing or uninitialized one."""
    check_store(url)
    return Store(url, schema="existing")
