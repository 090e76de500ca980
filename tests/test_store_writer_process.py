"""The writer process on its own: it commits the batches it is handed on its own connection,
answers each with the sink's result, says a store refusal as a store error (the same one line
the worker would say), reports a store it cannot open, ends when told or when the worker's end
of the socket closes, and never shows the store URL on its command line."""

from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import replace

import msgspec
import orjson
import pytest

from streaming.host.checkpoints import (COMPRESS_THREADS_ABOVE, SERIALIZER, CheckpointDump,
                                        compress_state, decompressed_state)
from streaming.operators.base import Fact
from streaming.store.errors import StoreErrorElsewhere, describe_store_error, is_store_error
from streaming.store.ops import BatchRows, BatchWrite, Store
from streaming.store.sqlite_driver import dbapi
from streaming.store.writer_process import (BATCH_MSGPACK, BATCH_PICKLE, PackedBatch, WriterFailed,
                                           WriterProcess, pack, unpack)


def _batch(seq: int, keys: list[str], payload: dict | None = None) -> BatchWrite:
    facts = [Fact.make(f"k|{k}", "pair", f"lk|{k}", "current", payload or {"k": k})
             for k in keys]
    journal = {"pipeline": "join", "seq": seq, "ranges": "{}", "order_runs": "[]",
               "idleness": "[]", "records": len(keys), "clock_us": 0, "end_of_stream": False,
               "committed_at": "2026-01-01T00:00:00Z"}
    return BatchWrite("join", seq, facts, journal=journal)


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    Store(url).dispose()  # created by the worker before any writer starts
    return url


@pytest.mark.parametrize("memory_file", [True, False])
def test_commits_what_it_is_handed_and_answers_with_the_sink_result(store_url, memory_file,
                                                                    monkeypatch):
    """A batch handed over in a memory file, or as a message where there are none."""
    if not memory_file:
        monkeypatch.delattr(os, "memfd_create", raising=False)
    writer = WriterProcess(store_url, "join")
    try:
        writer.submit(_batch(1, ["a", "b"]).rows())
        res, seconds = writer.result()
        assert (res.written, res.noop, res.rejected) == (2, 0, 0) and seconds > 0
        # The same keys again: one the same (a no-op), one with other content (rejected).
        again = _batch(2, ["a"])
        again.facts += _batch(2, ["b"], {"k": "other"}).facts
        writer.submit(again.rows())
        res, _ = writer.result()
        assert (res.written, res.noop, res.rejected, res.rejected_keys) == (0, 1, 1, ["k|b"])
    finally:
        writer.close()
    assert writer.peak_rss_mib is not None and writer.peak_rss_mib > 10  # read before it ended
    store = Store(store_url)
    try:
        facts = store.facts("join")
        assert [(f["fact_key"], f["batch_seq"]) for f in facts] == [("k|a", 1), ("k|b", 1)]
        assert [r["fact_key"] for r in store.sink_exception_rows("join")] == ["k|b"]
        assert store.last_journal_seq("join") == 2
    finally:
        store.dispose()
    assert _gone(writer.pid)


def test_a_packed_batch_goes_in_its_memory_file_as_msgpack_that_decodes_to_the_batch():
    # The memory file holds the batch's msgpack, which decodes to the same rows, tuples again;
    # handing it over closes the file.
    if not hasattr(os, "memfd_create"):
        pytest.skip("no memory files on this platform")
    rows = _batch(4, ["a", "b"]).rows()
    packed = pack(rows)
    file = packed.handover.file
    assert packed.encoding == BATCH_MSGPACK and file is not None and packed.handover.size > 0
    held = os.pread(file.fileno(), packed.handover.size + 1, 0)
    assert len(held) == packed.handover.size and held == msgspec.msgpack.encode(rows)
    back = unpack(packed.encoding, held)
    assert back == rows and all(type(f) is tuple for f in back.facts)
    packed.handover.close()
    assert file.closed


def test_every_value_a_row_may_carry_comes_back_as_it_went():
    # The rows bind to text, integer and boolean columns; bytes and floats are held too, and
    # an int beyond 64 bits (which msgpack cannot hold) sends the batch pickled instead.
    row = ("text", "", "\u00e9\u20ac\U0001f600", 0, -(2 ** 63), 2 ** 64 - 1, True, False, None,
           b"\xff\x00", 1.5)
    rows = BatchRows("join", 7, None, [("k", "v", None)], [("archive", ("a", "b"), [row])],
                     (("m",), [(1,)]))
    packed = pack(rows)
    back = unpack(packed.encoding, _held(packed))
    assert packed.encoding == BATCH_MSGPACK and back == rows
    assert [type(v) for v in back.tables[0][2][0]] == [type(v) for v in row]
    assert type(back.tables[0][1]) is tuple and type(back.metrics) is tuple
    wide = replace(rows, tables=[("archive", ("a",), [(2 ** 64,)])])
    packed = pack(wide)
    assert packed.encoding == BATCH_PICKLE and unpack(packed.encoding, _held(packed)) == wide
    with pytest.raises(ValueError, match="a batch encoded as 'json'"):
        unpack("json", b"{}")


def _held(packed: PackedBatch) -> bytes:
    try:
        if packed.handover.file is None:
            return packed.handover.raw
        return os.pread(packed.handover.file.fileno(), packed.handover.size, 0)
    finally:
        packed.handover.close()


def _stored(store_url: str) -> tuple[list[tuple[str, int]], int | None]:
    """The join facts' (fact key, batch) in the store, and the last journal number."""
    store = Store(store_url)
    try:
        return ([(f["fact_key"], f["batch_seq"]) for f in store.facts("join")],
                store.last_journal_seq("join"))
    finally:
        store.dispose()


def test_a_batch_sent_pickled_commits_as_the_batch_itself(store_url, monkeypatch):
    # What msgpack cannot hold goes pickled: the writer reads it by the header's word.
    def refuse(obj):
        raise TypeError("not encodable")

    monkeypatch.setattr(msgspec.msgpack, "encode", refuse)
    packed = pack(_batch(1, ["a", "b"]).rows())
    monkeypatch.undo()
    assert packed.encoding == BATCH_PICKLE
    writer = WriterProcess(store_url, "join")
    try:
        writer.submit(packed)
        assert writer.result()[0].written == 2
        writer.submit(pack(_batch(2, ["c"]).rows()))  # and msgpack again after it
        assert writer.result()[0].written == 1
    finally:
        writer.close()
    assert _stored(store_url) == ([("k|a", 1), ("k|b", 1), ("k|c", 2)], 2)


def _maps_pysqlite3(pid: int) -> bool:
    """Whether process `pid` has `pysqlite3`'s SQLite mapped. The standard library's module
    is imported everywhere (`sqlite_driver` falls back to it), so its presence says nothing;
    `pysqlite3` is imported only once `dbapi()` has chosen it."""
    with open(f"/proc/{pid}/maps") as fh:
        return "/pysqlite3/" in fh.read()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc/<pid>/maps")
@pytest.mark.parametrize("driver", ["pysqlite3", "stdlib"])
def test_the_writer_process_commits_with_the_library_its_environment_chooses(
        store_url, driver, monkeypatch):
    """The writer process is a process of its own: it takes the SQLite library the worker's
    environment names (`sqlite_driver`), and no other."""
    if driver == "pysqlite3" and importlib.util.find_spec("pysqlite3") is None:
        pytest.skip("pysqlite3-binary is not installed (no wheel for this platform)")
    monkeypatch.setenv("RISKSTREAM_SQLITE_DRIVER", driver)
    writer = WriterProcess(store_url, "join")
    try:
        writer.submit(_batch(1, ["a", "b"]).rows())
        assert writer.result()[0].written == 2
        assert writer.pid is not None
        assert _maps_pysqlite3(writer.pid) == (driver == "pysqlite3")
    finally:
        writer.close()
    # This process chose its library when the fixture made the store: back to its own choice
    # before it reads the store again.
    monkeypatch.undo()
    assert _stored(store_url) == ([("k|a", 1), ("k|b", 1)], 1)


def test_a_batch_packed_ahead_commits_as_the_batch_itself(store_url):
    # The worker packs a batch while the one before it commits: the packed message is the
    # batch, answered and committed the same, with the batch's journal number kept.
    first, second = _batch(1, ["a", "b"]), _batch(2, ["c"])
    packed = pack(second.rows())
    assert packed.seq == 2
    writer = WriterProcess(store_url, "join")
    try:
        writer.submit(pack(first.rows()))
        assert writer.result()[0].written == 2
        writer.submit(packed)
        with pytest.raises(RuntimeError, match="batch 2 is still in flight"):
            writer.submit(pack(_batch(3, ["d"]).rows()))
        assert writer.result()[0].written == 1
    finally:
        writer.close()
    assert _stored(store_url) == ([("k|a", 1), ("k|b", 1), ("k|c", 2)], 2)


def test_a_store_refusal_is_said_as_the_worker_would_say_it(store_url, tmp_path):
    store = Store(store_url)
    try:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TRIGGER refuse BEFORE INSERT ON journal "
                                 "BEGIN SELECT RAISE(ABORT, 'journal is closed'); END")
    finally:
        store.dispose()
    writer = WriterProcess(store_url, "join")
    try:
        writer.submit(_batch(1, ["a"]).rows())
        with pytest.raises(StoreErrorElsewhere) as err:
            writer.result()
        assert is_store_error(err.value)
        assert describe_store_error(err.value).startswith("store failed: journal is closed (")
        assert "INSERT" not in str(err.value)  # the statement and its rows stay out
    finally:
        writer.close()
    store = Store(store_url)
    try:
        assert store.facts("join") == []  # the batch's facts rolled back with it
    finally:
        store.dispose()


def test_a_store_it_cannot_open_is_reported_with_the_first_batch(tmp_path):
    writer = WriterProcess(f"sqlite:///{tmp_path}/missing.sqlite", "join")
    try:
        writer.submit(_batch(1, ["a"]).rows())
        with pytest.raises(WriterFailed, match="batch 1's commit failed in the writer process: "
                                               "StoreVersionError: there is no store"):
            writer.result()
    finally:
        writer.close()
    assert not os.path.exists(tmp_path / "missing.sqlite")  # it never creates one


def test_it_ends_when_the_workers_end_of_the_socket_closes(store_url):
    writer = WriterProcess(store_url, "join")
    writer.submit(_batch(1, ["a"]).rows())
    writer.result()
    writer._conn.close()  # what the worker dying does to the socket
    writer._proc.wait(timeout=10)
    assert writer.exitcode == 0  # it ended on its own, cleanly


def test_one_batch_at_a_time(store_url):
    writer = WriterProcess(store_url, "join")
    try:
        writer.submit(_batch(1, ["a"]).rows())
        with pytest.raises(RuntimeError, match="batch 1 is still in flight"):
            writer.submit(_batch(2, ["b"]).rows())
        writer.result()
        with pytest.raises(RuntimeError, match="no batch is in flight"):
            writer.result()
    finally:
        writer.close()


def test_work_handed_over_behind_a_failed_batch_is_refused_not_committed(store_url):
    """Three batches in flight at once (as behind a checkpoint): they are answered in order,
    and once the second fails the third is refused, so the store keeps a prefix of the work
    and its journal no gap."""
    store = Store(store_url)
    try:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TRIGGER refuse BEFORE INSERT ON journal "
                                 "WHEN NEW.seq = 2 "
                                 "BEGIN SELECT RAISE(ABORT, 'journal is closed'); END")
    finally:
        store.dispose()
    writer = WriterProcess(store_url, "join", max_in_flight=3)
    try:
        for seq, key in ((1, "a"), (2, "b"), (3, "c")):
            writer.submit(_batch(seq, [key]).rows())
        with pytest.raises(RuntimeError, match="batch 3 is still in flight"):
            writer.submit(_batch(4, ["d"]).rows())
        assert writer.result()[0].written == 1
        with pytest.raises(StoreErrorElsewhere, match="journal is closed"):
            writer.result()
        with pytest.raises(WriterFailed, match="batch 3's commit failed in the writer process: "
                                               "not written: batch 2 failed before it"):
            writer.result()
    finally:
        writer.close()
    assert _stored(store_url) == ([("k|a", 1)], 1)


def test_the_store_url_is_not_on_the_command_line(tmp_path):
    secret = "s3cret-pw"
    url = f"postgresql://writer:{secret}@127.0.0.1:1/nowhere"
    writer = WriterProcess(url, "join")
    try:
        writer.submit(_batch(1, ["a"]).rows())  # answered: the process is up and has the URL
        with pytest.raises(StoreErrorElsewhere, match="^store unreachable"):
            writer.result()
        with open(f"/proc/{writer.pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
        assert b"streaming.store.writer_process" in cmdline and secret.encode() not in cmdline
    finally:
        writer.close()


def test_a_worker_running_from_standard_input_can_start_it(store_url):
    """A worker whose main module is not a file (standard input, a notebook): the writer does
    not re-import it (as multiprocessing's spawn would, and fail)."""
    import subprocess
    import sys
    script = (f"from tests.test_store_writer_process import _batch\n"
              f"from streaming.store.writer_process import WriterProcess\n"
              f"w = WriterProcess({store_url!r}, 'join')\n"
              f"w.submit(_batch(1, ['a']).rows())\n"
              f"print(w.result()[0].written)\n"
              f"w.close()\n")
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True,
                          timeout=60, cwd=os.getcwd())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def test_a_streaming_directory_where_the_worker_runs_does_not_shadow_its_code(
        store_url, tmp_path, monkeypatch):
    """The writer runs the worker's code, not a `streaming` package in the working directory
    (another checkout, a scratch copy): it would otherwise come first on the child's path."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "streaming").mkdir(parents=True)
    (elsewhere / "streaming" / "__init__.py").write_text(
        "raise ImportError('a foreign streaming package was imported')\n")
    monkeypatch.chdir(elsewhere)
    writer = WriterProcess(store_url, "join")
    try:
        writer.submit(_batch(1, ["a", "b"]).rows())
        assert writer.result()[0].written == 2
    finally:
        writer.close()


def _dump(seq: int, state: dict, pause_mid_write: bool = False) -> CheckpointDump:
    raw = orjson.dumps(state)
    return CheckpointDump("join", seq, "join/test", {"journal_seq": seq}, 0.001, raw,
                          pause_mid_write)


@pytest.mark.parametrize("memory_file", [True, False])
def test_writes_a_checkpoint_it_is_handed_as_the_worker_would(store_url, memory_file,
                                                               monkeypatch):
    """The state compressed as the worker compresses it (a state large enough for zstd's
    threads), the row as `checkpoint_row` builds it; the state handed over in a memory file,
    or as a message where there are none."""
    if not memory_file:
        monkeypatch.delattr(os, "memfd_create", raising=False)
    state = {"ids": {f"id-{i}": [i, f"h{i:08x}"] for i in range(200_000)}}
    dump = _dump(1, state)
    assert len(dump.raw) > COMPRESS_THREADS_ABOVE
    writer = WriterProcess(store_url, "join")
    try:
        writer.submit_checkpoint(dump)
        with pytest.raises(RuntimeError, match="batch 1 is still in flight"):
            writer.submit(_batch(2, ["b"]).rows())
        summary = writer.checkpoint_result(mid_write=lambda: pytest.fail("not paused"))
        with pytest.raises(RuntimeError, match="no checkpoint is in flight"):
            writer.checkpoint_result(mid_write=lambda: None)
    finally:
        writer.close()
    store = Store(store_url)
    try:
        [ck] = store.checkpoints("join")
        row = store.latest_checkpoint("join")
    finally:
        store.dispose()
    assert row is not None and ck["journal_seq"] == 1
    assert row["state"] == compress_state(dump.raw)
    assert orjson.loads(decompressed_state(row)) == state
    assert row["serializer"] == SERIALIZER and row["state_schema"] == "join/test"
    assert summary == {"id_journal_seq": 1, "size_bytes": len(row["state"]),
                       "duration_ms": row["duration_ms"], "delta": False}


def test_a_checkpoint_paused_mid_write_commits_on_the_workers_word(store_url):
    writer = WriterProcess(store_url, "join")
    seen = []
    try:
        writer.submit_checkpoint(_dump(1, {"n": 1}, pause_mid_write=True))
        writer.checkpoint_result(mid_write=lambda: seen.append(_checkpoint_seqs(store_url)))
    finally:
        writer.close()
    assert seen == [[]]  # mid-write, the row was not committed yet
    assert _checkpoint_seqs(store_url) == [1]


def test_a_checkpoint_paused_mid_write_rolls_back_when_the_worker_dies(store_url):
    """What a crash at the during-checkpoint point does to a checkpoint in flight."""
    writer = WriterProcess(store_url, "join")
    writer.submit_checkpoint(_dump(1, {"n": 1}, pause_mid_write=True))
    assert writer._reply(1) == ("mid-write",)  # the row is inserted, not committed
    writer._conn.close()  # what the worker dying there does to the socket
    writer._proc.wait(timeout=10)
    assert writer.exitcode == 0
    assert _checkpoint_seqs(store_url) == []


def _checkpoint_seqs(url: str) -> list[int]:
    """Read as a plain SQLite reader, which no open write transaction blocks (the store's own
    connections begin every transaction as a writer)."""
    conn = dbapi().connect(url.removeprefix("sqlite:///"))
    try:
        return [r[0] for r in conn.execute("SELECT journal_seq FROM checkpoints ORDER BY id")]
    finally:
        conn.close()
