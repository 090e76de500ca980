"""A store that refuses writes (read-only, disk full) ends a run with one line and exit 7; no
traceback, no statement or payload rows, nothing corrupted: once the store is writable again the
next run finishes with the facts of an uninterrupted run."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys

import psycopg

from streaming.store.errors import STORE_FAILURE_EXIT

from .conftest import PG_ADMIN_DSN
from .joinutil import pair_set, run_join

ARGS = ["--batch-size", "50", "--checkpoint-every", "100", "--quiet"]


def _run(source, store_url, preexec=None):
    return subprocess.run([sys.executable, "-m", "streaming.cli.main", "join", "run", "--source",
                           str(source), "--store", store_url, *ARGS], capture_output=True,
                          text=True, timeout=300, preexec_fn=preexec)


def _assert_one_line(proc, kind: str):
    assert proc.returncode == STORE_FAILURE_EXIT, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: store {kind}:"), lines[0]
    for leak in ("Traceback", "INSERT INTO", "[SQL", "parameters", "payment_id", "pay-"):
        assert leak not in proc.stderr


def _source_with_tail(seed_dir, tmp_path, cut: int = 40):
    """A copy of the seed without its last `cut` payments of p0, and the full p0 lines."""
    src, _ = seed_dir
    copy = tmp_path / "src"
    shutil.copytree(src, copy)
    p0 = copy / "payments" / "p0.jsonl"
    lines = p0.read_bytes().splitlines(keepends=True)
    p0.write_bytes(b"".join(lines[:-cut]))
    return copy, p0, lines


def test_read_only_sqlite_store(seed_dir, tmp_path, seed_whole_in_batches):
    copy, p0, lines = _source_with_tail(seed_dir, tmp_path)
    path = tmp_path / "ops.sqlite"
    url = f"sqlite:///{path}"
    run_join(str(copy), url, batch_size=50, checkpoint_every=100)
    p0.write_bytes(b"".join(lines))
    proc = _run(copy, f"sqlite:///file:{path}?mode=ro&uri=true")
    _assert_one_line(proc, "read-only")
    assert not os.path.exists("file:")
    assert _run(copy, url).returncode == 0
    assert pair_set(url) == pair_set(seed_whole_in_batches)


def test_sqlite_store_on_a_full_disk(seed_dir, tmp_path, seed_whole_in_batches):
    """A file size limit makes SQLite's writes fail part-way, as a full disk does."""
    src, _ = seed_dir
    url = f"sqlite:///{tmp_path}/ops.sqlite"

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (400_000, 400_000))

    proc = _run(src, url, preexec=small_files)
    _assert_one_line(proc, "I/O error")
    again = _run(src, url)
    assert again.returncode == 0, again.stderr
    assert pair_set(url) == pair_set(seed_whole_in_batches)


def test_read_only_postgres_store(seed_dir, tmp_path, pg_url, seed_whole_in_batches):
    copy, p0, lines = _source_with_tail(seed_dir, tmp_path)
    run_join(str(copy), pg_url, batch_size=50, checkpoint_every=100)
    p0.write_bytes(b"".join(lines))
    name = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    try:
        _assert_one_line(_run(copy, pg_url), "read-only")
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
    assert _run(copy, pg_url).returncode == 0
    assert pair_set(pg_url) == pair_set(seed_whole_in_batches)
