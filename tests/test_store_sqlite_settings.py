"""How a SQLite store is opened: the settings are read from the environment when the store is
opened (not at import), a new store gets the configured page size, and an existing store keeps
the page size it was made with."""

from __future__ import annotations

from streaming.store.ops import SqliteSettings, Store
from streaming.store.sqlite_driver import dbapi


def _pragma(url: str, name: str, batch_writer: bool = False) -> object:
    store = Store(url, batch_writer=batch_writer)
    try:
        with store.engine.connect() as conn:
            return conn.exec_driver_sql(f"PRAGMA {name}").scalar()
    finally:
        store.dispose()


def test_a_new_store_gets_4_kib_pages_and_the_other_defaults(tmp_path, monkeypatch):
    for var in ("RISKSTREAM_SQLITE_CACHE_KIB", "RISKSTREAM_SQLITE_WAL_PAGES",
                "RISKSTREAM_SQLITE_PAGE_BYTES", "RISKSTREAM_SQLITE_WRITER_CACHE_KIB"):
        monkeypatch.delenv(var, raising=False)
    assert SqliteSettings.from_env() == SqliteSettings(8192, 262144, 4096, 32768)
    url = f"sqlite:///{tmp_path}/new.sqlite"
    assert _pragma(url, "page_size") == 4096
    assert _pragma(url, "journal_mode") == "wal"
    assert _pragma(url, "cache_size") == -8192
    assert _pragma(url, "wal_autocheckpoint") == 262144
    # The writer process's connection alone takes the larger cache.
    assert _pragma(url, "cache_size", batch_writer=True) == -32768


def test_settings_are_read_when_the_store_is_opened(tmp_path, monkeypatch):
    monkeypatch.setenv("RISKSTREAM_SQLITE_PAGE_BYTES", "8192")
    monkeypatch.setenv("RISKSTREAM_SQLITE_CACHE_KIB", "1024")
    monkeypatch.setenv("RISKSTREAM_SQLITE_WAL_PAGES", "500")
    monkeypatch.setenv("RISKSTREAM_SQLITE_WRITER_CACHE_KIB", "2048")
    url = f"sqlite:///{tmp_path}/told.sqlite"
    assert _pragma(url, "page_size") == 8192
    assert _pragma(url, "cache_size") == -1024
    assert _pragma(url, "cache_size", batch_writer=True) == -2048
    assert _pragma(url, "wal_autocheckpoint") == 500


def test_an_existing_store_keeps_its_page_size(tmp_path):
    path = tmp_path / "old.sqlite"
    raw = dbapi().connect(path)  # a store made with 16 KiB pages, as earlier releases made
    raw.execute("PRAGMA page_size=16384")
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("CREATE TABLE made_before (x)")
    raw.close()
    url = f"sqlite:///{path}"
    assert _pragma(url, "page_size") == 16384
    store = Store(url, schema="upgrade")  # and it still becomes a working store
    try:
        assert store.facts("join") == []
    finally:
        store.dispose()
