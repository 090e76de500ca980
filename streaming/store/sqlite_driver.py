"""Which SQLite library opens a SQLite store.

Python's `sqlite3` module links the system's SQLite, which on a long-term-support distribution
can be years old (3.40 on Debian 12). `pysqlite3-binary` is the same DB-API module built with a
recent SQLite. The two write the same file format, but a recent SQLite spends less CPU on the
work the store's writer does most (B-tree inserts at random keys): on the 1,000,000-event
`join-sqlite` bench, 3.51 took 7% less of the writer's CPU than 3.40 (docs/performance.md,
thirty-eighth round).

`RISKSTREAM_SQLITE_DRIVER` chooses:
* `auto` (the default): `pysqlite3` when it is installed, else the standard library's.
* `stdlib`: the standard library's `sqlite3`, whatever else is installed.
* `pysqlite3`: `pysqlite3`, and an error when it is not installed.

One library per process: it is chosen at the first store connection and kept. Two copies of
SQLite in one process that open the same file do not see each other's POSIX locks, and closing
one's descriptor drops the other's locks (sqlite.org, "How To Corrupt An SQLite Database",
section 2.2.1). So every connection this project opens to a store file, through SQLAlchemy or
directly, takes its module from `dbapi()`, and a later change of the variable in the same
process is refused rather than followed."""

from __future__ import annotations

import importlib
import os
import sqlite3
import sys
from types import ModuleType

DRIVER_ENV = "RISKSTREAM_SQLITE_DRIVER"
CHOICES = ("auto", "stdlib", "pysqlite3")

_chosen: tuple[str, ModuleType] | None = None


class SqliteDriverError(RuntimeError):
    """The SQLite library asked for cannot be used."""


def _wanted() -> str:
    raw = os.environ.get(DRIVER_ENV, "auto").strip().lower() or "auto"
    if raw not in CHOICES:
        raise SqliteDriverError(f"{DRIVER_ENV}={raw!r}: expected one of {', '.join(CHOICES)}")
    return raw


def _load(wanted: str) -> ModuleType:
    if wanted == "stdlib":
        return sqlite3
    try:
        return importlib.import_module("pysqlite3.dbapi2")
    except ImportError:
        if wanted == "pysqlite3":
            raise SqliteDriverError(
                f"{DRIVER_ENV}=pysqlite3 but pysqlite3 is not installed "
                f"(pip install pysqlite3-binary)") from None
        return sqlite3


def dbapi() -> ModuleType:
    """The DB-API module this process opens SQLite stores with (chosen once, see above)."""
    global _chosen
    wanted = _wanted()
    if _chosen is None:
        _chosen = (wanted, _load(wanted))
    elif wanted != _chosen[0] and _load(wanted) is not _chosen[1]:
        raise SqliteDriverError(
            f"{DRIVER_ENV}={wanted!r} after this process opened stores with "
            f"{describe(_chosen[1])}: one process keeps one SQLite library")
    return _chosen[1]


def describe(module: ModuleType | None = None) -> str:
    """`<module> <SQLite version>`, e.g. `pysqlite3 3.51.1` (for the bench's results)."""
    m = module if module is not None else dbapi()
    name = "sqlite3" if m is sqlite3 else m.__name__.split(".")[0]
    return f"{name} {m.sqlite_version}"


def in_use() -> str | None:
    """`describe()` of the library this process has opened SQLite stores with; None when it
    has opened none (a PostgreSQL store, or no store at all)."""
    return describe(_chosen[1]) if _chosen is not None else None


def error_types() -> tuple[type[BaseException], ...]:
    """Every loaded SQLite library's `Error`: a store error is recognised whichever raised it."""
    types: list[type[BaseException]] = [sqlite3.Error]
    other = sys.modules.get("pysqlite3.dbapi2")
    if other is not None:
        types.append(other.Error)
    return tuple(types)
