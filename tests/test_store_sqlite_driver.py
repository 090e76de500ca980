"""Which SQLite library opens a store (`streaming/store/sqlite_driver.py`): chosen by
RISKSTREAM_SQLITE_DRIVER, one per process, used by every connection the store opens, and the
files it writes are read alike by the other library. Each choice runs in a process of its own,
as a worker does: the choice is made once per process."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from streaming.store.errors import describe_store_error, is_store_error
from streaming.store.sqlite_driver import dbapi

HAS_PYSQLITE3 = importlib.util.find_spec("pysqlite3") is not None
needs_pysqlite3 = pytest.mark.skipif(not HAS_PYSQLITE3, reason="pysqlite3-binary is not "
                                     "installed (no wheel for this platform)")

# Opens a store through `Store`, writes a batch of facts, and reports which library the
# store's own connection and the presence check ran on.
_WRITE = textwrap.dedent("""
    import json, sys
    from streaming.operators.base import Fact
    from streaming.store.ops import BatchWrite, Store
    from streaming.store.presence import check_store
    from streaming.store.sqlite_driver import dbapi, describe
    url = sys.argv[1]
    store = Store(url)
    facts = [Fact.make(f"k|{i}", "pair", f"lk|{i}", "current", {"n": i}) for i in range(3)]
    res = store.commit_batch(BatchWrite("join", 1, facts))
    with store.engine.connect() as conn:
        version = conn.exec_driver_sql("SELECT sqlite_version()").scalar()
        raw = conn.connection.dbapi_connection
    store.dispose()
    check_store(url)
    print(json.dumps({"version": version, "driver": describe(),
                      "connection_module": type(raw).__module__,
                      "written": res.written, "noop": res.noop}))
""")


def _run(code: str, *args: str, driver: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("RISKSTREAM_SQLITE_DRIVER", None)
    if driver is not None:
        env["RISKSTREAM_SQLITE_DRIVER"] = driver
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=120)


def _written(url: str, driver: str | None) -> dict:
    done = _run(_WRITE, url, driver=driver)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_pysqlite3
def test_by_default_the_store_opens_with_the_recent_sqlite(tmp_path):
    import pysqlite3.dbapi2 as recent
    got = _written(f"sqlite:///{tmp_path}/auto.sqlite", driver=None)
    assert got["version"] == recent.sqlite_version
    assert got["driver"] == f"pysqlite3 {recent.sqlite_version}"
    assert got["connection_module"].startswith("pysqlite3")
    assert got["written"] == 3


def test_stdlib_is_used_when_asked(tmp_path):
    import sqlite3
    got = _written(f"sqlite:///{tmp_path}/stdlib.sqlite", driver="stdlib")
    assert got["version"] == sqlite3.sqlite_version
    assert got["driver"] == f"sqlite3 {sqlite3.sqlite_version}"
    assert got["connection_module"] == "sqlite3"


@needs_pysqlite3
def test_a_store_written_with_one_library_is_read_and_extended_by_the_other(tmp_path):
    url = f"sqlite:///{tmp_path}/shared.sqlite"
    assert _written(url, driver="pysqlite3")["written"] == 3
    # The same facts again: the other library finds them (same-hash no-op, nothing written).
    again = _written(url, driver="stdlib")
    assert (again["written"], again["noop"]) == (0, 3)
    read = _run(textwrap.dedent("""
        import sqlite3, sys
        con = sqlite3.connect(sys.argv[1])
        print(con.execute("PRAGMA integrity_check").fetchone()[0],
              con.execute("SELECT count(*) FROM facts").fetchone()[0])
    """), f"{tmp_path}/shared.sqlite", driver="stdlib")
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["ok", "3"]


def test_an_unknown_choice_is_refused_by_name(tmp_path):
    done = _run(_WRITE, f"sqlite:///{tmp_path}/x.sqlite", driver="sqlite4")
    assert done.returncode != 0
    assert "RISKSTREAM_SQLITE_DRIVER='sqlite4': expected one of auto, stdlib, pysqlite3" \
        in done.stderr
    assert not (tmp_path / "x.sqlite").exists()


@needs_pysqlite3
def test_one_process_keeps_the_library_it_chose():
    code = textwrap.dedent("""
        import os
        from streaming.store.sqlite_driver import SqliteDriverError, dbapi
        first = dbapi()
        os.environ["RISKSTREAM_SQLITE_DRIVER"] = "auto"  # the same library: allowed
        assert dbapi() is first
        os.environ["RISKSTREAM_SQLITE_DRIVER"] = "stdlib"
        try:
            dbapi()
        except SqliteDriverError as exc:
            print(exc)
    """)
    done = _run(code, driver="pysqlite3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("RISKSTREAM_SQLITE_DRIVER='stdlib' after this process "
                                   "opened stores with pysqlite3 "
                                   f"{dbapi().sqlite_version if HAS_PYSQLITE3 else ''}: "
                                   "one process keeps one SQLite library")


def test_pysqlite3_asked_for_but_missing_is_a_clear_error(tmp_path):
    # A path entry that shadows the package with one that fails to import, as a machine
    # without the wheel has none.
    shadow = tmp_path / "shadow" / "pysqlite3"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not on this platform')\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from streaming.store.sqlite_driver import dbapi; dbapi()")
    done = _run(code, str(tmp_path / "shadow"), driver="pysqlite3")
    assert done.returncode != 0
    assert ("RISKSTREAM_SQLITE_DRIVER=pysqlite3 but pysqlite3 is not installed "
            "(pip install pysqlite3-binary)") in done.stderr
    # `auto` falls back to the standard library's on the same machine.
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from streaming.store.sqlite_driver import describe; print(describe())")
    done = _run(code, str(tmp_path / "shadow"), driver="auto")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sqlite3 ")


def test_an_error_of_the_chosen_library_is_a_store_error_with_its_cause(tmp_path):
    driver = dbapi()
    with pytest.raises(driver.Error) as caught:
        driver.connect(f"file:{tmp_path}/missing/none.sqlite?mode=ro", uri=True)
    assert is_store_error(caught.value)
    said = describe_store_error(caught.value)
    assert said.startswith("store unreachable: unable to open database file")
