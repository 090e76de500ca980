"""A store writer in a process of its own: it commits the batches a worker hands it, one at a
time, on its own connection, so the database work of one batch (SQLite's B-trees and WAL, or
PostgreSQL's client side) runs on another core while the worker computes the next batch.

A thread cannot do this: SQLite's executemany takes the interpreter lock back for every row it
binds, so a writer thread and the worker take turns instead of running side by side (measured
in docs/performance.md, fifth and sixth rounds).

The protocol is one request, one answer. The worker sends a `BatchRows` (plain tuples) encoded
by `pack` while the batch before it still commits (msgpack, or a pickle when msgpack cannot hold
it: `pack` says why), on Linux in a memory file whose descriptor goes on the socket, so handing
it over does not wait for the writer to read (`Handover`), and later reads the answer: the
`SinkResult` and the commit's seconds, or the failure as text. Outside a checkpoint (below), at
most one batch is in flight: the host settles it before it sends the next one and before every
step whose order matters (crash points, checkpoints, acks), so the store sees the commits in the
order a serial run makes them. A checkpoint is handed over the same way (`submit_checkpoint`):
its state already serialized by the worker, which the writer compresses and writes as the
checkpoint row (see `streaming.host.checkpoints`). Batches may be handed over behind a
checkpoint before it is answered (`Worker._queues_behind`): the writer serves its work in the
order it came, so they commit after the checkpoint's row, and the answers come in that order. An
empty message, or the worker's end of the socket closing, ends the process; it ignores SIGINT so
that an interrupt reaches the worker alone, which settles or abandons the batch in flight itself
(a commit is atomic either way).

The process is a fresh interpreter running this module (`python -m`), joined to the worker by a
socket pair, not a `multiprocessing` child: nothing of the worker is inherited (no open
connections or threads, as a fork would copy) and nothing of the worker's own main module is
re-imported (which `multiprocessing`'s spawn does, and which fails when the worker runs from
standard input or a notebook). The store URL, which may carry a password, is the first message
on the socket, never a command-line argument."""

from __future__ import annotations

import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle
from typing import BinaryIO

import msgspec

from ..collector import run_collector
from ..host.checkpoints import CheckpointDump, checkpoint_row, checkpoint_summary
from ..procinfo import cpu_seconds, vm_hwm_mib, written_mib
from .errors import StoreErrorElsewhere, describe_store_error, is_store_error
from .ops import BatchRows, SinkResult, Store

log = logging.getLogger(__name__)

# How long closing waits for the process to end on its own before it is terminated.
CLOSE_TIMEOUT_S = 30.0
# The worker's word to a checkpoint paused mid-write: go on and commit.
GO_ON = b"go on"
# Bytes a memory file takes at a time from the pickler (a frame is at most 64 KiB).
_WRITE_BUFFER = 1 << 16


class Handover:
    """Bytes for the writer process: on Linux in a memory-only file (memfd) whose descriptor
    goes on the socket, so handing them over does not wait for the writer to read them, as a
    socket does, and the file goes with its last descriptor, whichever process dies; elsewhere
    the bytes themselves, sent as a message of their own. `size` is what the writer reads."""

    __slots__ = ("file", "raw", "size")

    def __init__(self, file: BinaryIO | None, raw: bytes, size: int) -> None:
        self.file = file
        self.raw = raw
        self.size = size

    @classmethod
    def of_bytes(cls, raw: bytes) -> Handover:
        """`raw` as it will be handed over: copied into a memory file where there are some."""
        if not hasattr(os, "memfd_create"):
            return cls(None, raw, len(raw))
        return cls._written(lambda file: file.write(raw))

    @classmethod
    def pickled(cls, obj: object) -> Handover:
        """`obj` pickled straight into a memory file where there are some. A batch's pickle is
        several megabytes: built as bytes first, its buffer grew by reallocation into fresh
        pages, which cost the worker as much as the pickling itself (docs/performance.md,
        twenty-first round)."""
        if not hasattr(os, "memfd_create"):
            return cls.of_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        return cls._written(lambda file: pickle.dump(obj, file,
                                                     protocol=pickle.HIGHEST_PROTOCOL))

    @classmethod
    def _written(cls, write: Callable[[BinaryIO], object]) -> Handover:
        """A new memory file filled by `write`, closed again if that fails."""
        # Buffered: the pickler writes a frame at a time, and the buffered file finishes a
        # write the kernel took only part of.
        file = open(os.memfd_create("riskstream-handover", os.MFD_CLOEXEC), "wb",
                    buffering=_WRITE_BUFFER)
        try:
            write(file)
            file.flush()
        except BaseException:
            file.close()
            raise
        return cls(file, b"", file.tell())

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


# How a packed batch is encoded (`pack`), named in the header it is sent with.
BATCH_MSGPACK = "msgpack"
BATCH_PICKLE = "pickle"


@dataclass(frozen=True, slots=True)
class PackedBatch:
    """A batch as it is handed to the writer (`pack`). The worker packs a batch while the one
    before it still commits, so that the writer, once that commit is settled, waits only for
    the batch to be sent, not for it to be encoded too. A packed batch that is never handed
    over closes its memory file when it is collected."""

    seq: int
    encoding: str  # BATCH_MSGPACK or BATCH_PICKLE
    handover: Handover


def pack(rows: BatchRows) -> PackedBatch:
    """The batch encoded for the writer: msgpack by msgspec, which the writer decodes into the
    same `BatchRows`, its rows tuples again (`unpack`). msgspec encodes a batch's rows about
    five times faster than pickle, which keeps a memo of every object it writes (a 7,500-fact
    join batch: 3.5 ms against 16 ms; docs/performance.md, twenty-sixth round). The encoding
    is built as bytes and then copied into the memory file, which `Handover.pickled` avoids
    for a pickle; the copy costs far less than the pickler's memo did.

    The rows bind to text, integer and boolean columns, so their values are str, int, bool,
    None (and bytes or float, should a row carry them), which msgpack holds exactly. A batch it
    cannot hold as it is (an int beyond 64 bits, or an object msgspec does not encode) goes
    pickled instead, and its commit fails or succeeds as it always did."""
    try:
        raw = msgspec.msgpack.encode(rows)
    except (OverflowError, TypeError):
        return PackedBatch(rows.seq, BATCH_PICKLE, Handover.pickled(rows))
    return PackedBatch(rows.seq, BATCH_MSGPACK, Handover.of_bytes(raw))


def unpack(encoding: str, raw: bytes, decoder: msgspec.msgpack.Decoder | None = None
           ) -> BatchRows:
    """A packed batch's rows as `pack` was given them. `decoder`: a `batch_decoder()` to
    reuse (the writer's, made once)."""
    if encoding == BATCH_MSGPACK:
        return (decoder or batch_decoder()).decode(raw)
    if encoding == BATCH_PICKLE:
        return pickle.loads(raw)
    raise ValueError(f"a batch encoded as {encoding!r}: this writer reads {BATCH_MSGPACK} and "
                     f"{BATCH_PICKLE}")


def batch_decoder() -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(BatchRows)


class WriterFailed(RuntimeError):
    """The writer process failed otherwise than by a store error (those are raised as
    `StoreErrorElsewhere`, and reported like any other store failure), or ended without
    answering."""


def _serve(conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        store_url = pickle.loads(conn.recv_bytes())
    except EOFError:  # the worker is gone before it said which store
        return
    store: Store | None = None
    try:
        store = Store(store_url, schema="existing", batch_writer=True)
    except Exception as exc:  # noqa: BLE001 - the answer to the first batch says it
        refused: Exception | None = exc
    else:
        refused = None
    try:
        with run_collector():  # the process's modules and store frozen; batches freed whole
            _serve_batches(conn, store, refused)
    finally:
        if store is not None:
            store.dispose()


def _serve_batches(conn: Connection, store: Store | None, refused: Exception | None) -> None:
    """Commit each batch or checkpoint the worker sends and answer it, until the worker closes
    the socket or is gone."""
    decoder = batch_decoder()
    # Once a piece of work fails, nothing handed over after it is committed: a batch queued
    # behind it would otherwise leave the journal with a gap (its records after the failed
    # batch's, which a restore would never read again). Each later piece is answered as
    # refused, and the store keeps a prefix of the work, as a serial run leaves it.
    failed: str | None = None
    while True:
        try:
            msg = conn.recv_bytes()
            if not msg:
                return
            # A header, ("checkpoint", the dump without its state, size) or ("batch", its
            # encoding, its journal number, size), then the bytes it announces
            # (`WriterProcess._send`).
            header = pickle.loads(msg)
            raw = _received_bytes(conn, header[-1])
            if failed is not None:
                answer = ("failed", f"not written: {failed} failed before it", "")
            elif header[0] == "checkpoint":
                answer = _checkpoint(store, refused, replace(header[1], raw=raw), conn)
                what = f"the checkpoint at batch {header[1].seq}"
            else:
                answer = _commit(store, refused, unpack(header[1], raw, decoder))
                what = f"batch {header[2]}"
            if failed is None and answer[0] not in ("written", "committed"):
                failed = what
        except (EOFError, _Abandoned):  # the worker is gone: nothing is in flight from our side
            return
        try:
            conn.send_bytes(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:  # the worker is gone
            return


def _received_bytes(conn: Connection, size: int | None) -> bytes:
    """A checkpoint's state or a packed batch: in a file descriptor passed on the socket
    (`size` bytes long), or without one (None) as the next message."""
    if size is None:
        return conn.recv_bytes()
    fd = recv_handle(conn)
    try:
        return _read_all(fd, size)
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    parts = []
    got = 0
    while got < size:
        part = os.pread(fd, size - got, got)
        if not part:
            raise EOFError(f"the checkpoint's state ended at {got} of {size} bytes")
        parts.append(part)
        got += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class _Abandoned(Exception):
    """The worker ended (or said to stop) while a checkpoint's transaction waited for it: the
    transaction rolls back."""


def _failure(exc: Exception) -> tuple:
    """A failure as the worker raises it: ("store-failed", one line) for a store error (opening
    the store included) or ("failed", text), each followed by the traceback."""
    failure = (("store-failed", describe_store_error(exc)) if is_store_error(exc) else
               ("failed", f"{type(exc).__name__}: {exc}"))
    return (*failure, traceback.format_exc())


def _opened(store: Store | None, refused: Exception | None) -> Store:
    """The store, or the reason it could not be opened raised (said in the answer to the
    first piece of work, like any failure)."""
    if store is None:
        assert refused is not None
        raise refused
    return store


def _commit(store: Store | None, refused: Exception | None, rows: BatchRows) -> tuple:
    """The answer to one batch: ("committed", SinkResult, seconds), or its failure."""
    t0 = time.perf_counter()
    try:
        res = _opened(store, refused).commit_rows(rows)
    except Exception as exc:  # noqa: BLE001 - reported to the worker, which raises it
        return _failure(exc)
    return ("committed", res, time.perf_counter() - t0)


def _checkpoint(store: Store | None, refused: Exception | None, dump: CheckpointDump,
                conn: Connection) -> tuple:
    """The answer to one checkpoint: its state compressed and its row written, answered as
    ("written", what the metrics report about it), or its failure. When the worker asked for
    it (`pause_mid_write`), the transaction stops after the row's insert and waits: the
    worker runs its during-checkpoint crash point then, and a worker that ends there leaves
    the transaction to roll back."""

    def mid_write() -> None:
        conn.send_bytes(pickle.dumps(("mid-write",), protocol=pickle.HIGHEST_PROTOCOL))
        if conn.recv_bytes() != GO_ON:
            raise _Abandoned

    try:
        opened = _opened(store, refused)
        row = checkpoint_row(dump)
        opened.write_checkpoint(row, mid_write=mid_write if dump.pause_mid_write else None)
    except (_Abandoned, EOFError):
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the worker, which raises it
        return _failure(exc)
    return ("written", checkpoint_summary(row))


class WriterProcess:
    """The worker's end: `submit` a batch, `result` waits for its answer, `close` ends the
    process. `name` (the pipeline) names the process in the worker's log lines."""

    def __init__(self, store_url: str, name: str, max_in_flight: int = 1) -> None:
        ours, theirs = socket.socketpair()
        # The child imports this package from where the worker did: the worker's search path
        # goes over as PYTHONPATH, and `-P` keeps the child from putting its working directory
        # first (`-m` would, so a `streaming` directory there would shadow the worker's code).
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-P", "-m", __name__, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=env)
        finally:
            theirs.close()
        self.name = f"{name}-writer"
        self._conn = Connection(ours.detach())
        self._conn.send_bytes(pickle.dumps(store_url, protocol=pickle.HIGHEST_PROTOCOL))
        # The work in flight, by journal number, in the order handed over: a batch or a
        # checkpoint, or a checkpoint and the batches queued behind it (`Worker._queues_behind`),
        # at most `max_in_flight` pieces.
        self._pending: deque[int] = deque()
        self._max_in_flight = max_in_flight
        self.peak_rss_mib: float | None = None  # the process's peak memory, read at close
        # And its CPU seconds and what it wrote to storage (MiB), read at close: the work the
        # commits cost, apart from the worker's.
        self.cpu_s: float | None = None
        self.written_mib: float | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def submit(self, batch: BatchRows | PackedBatch) -> None:
        """Hand over a batch: its encoded message, in a memory file where there are memory
        files (`_send`; on the socket, the worker waited for the writer process to read each
        batch's few megabytes: docs/performance.md, thirteenth round)."""
        packed = batch if isinstance(batch, PackedBatch) else pack(batch)
        self._put_pending(packed.seq)
        self._send(("batch", packed.encoding, packed.seq), packed.handover, packed.seq)

    def result(self) -> tuple[SinkResult, float]:
        """The batch in flight's result and commit seconds. Raises StoreErrorElsewhere when
        the store refused the batch, WriterFailed on any other failure."""
        seq = self._take_pending("batch")
        reply = self._reply(seq)
        if reply[0] == "committed":
            return reply[1], reply[2]
        raise self._failed(reply, f"batch {seq}'s commit")

    def submit_checkpoint(self, dump: CheckpointDump) -> None:
        """Hand over a checkpoint: the writer compresses its state and writes its row. The
        state never goes into a pickle: on Linux it goes in a memory file whose descriptor is
        passed on the socket (on the socket, a 134 MB state made the worker wait for the writer
        to read it: docs/performance.md, seventh round), elsewhere as a message of its own."""
        self._put_pending(dump.seq)
        self._send(("checkpoint", replace(dump, raw=b"")), Handover.of_bytes(dump.raw), dump.seq)

    def _send(self, header: tuple, handover: Handover, seq: int) -> None:
        """`header` with the handover's size appended (None when the bytes come as a message
        of their own), then the handover: the memory file's descriptor, or the bytes. The
        writer reads it back with `_received_bytes`. The handover is closed either way."""
        try:
            self._conn.send_bytes(pickle.dumps(
                (*header, None if handover.file is None else handover.size),
                protocol=pickle.HIGHEST_PROTOCOL))
            if handover.file is None:
                self._conn.send_bytes(handover.raw)
            else:
                send_handle(self._conn, handover.file.fileno(), self._proc.pid)
        except OSError as exc:
            raise self._ended(seq, exc) from None
        finally:
            handover.close()

    def checkpoint_result(self, mid_write: Callable[[], None]) -> dict:
        """What the metrics report about the checkpoint in flight, once it is written.
        `mid_write` runs when the writer stopped mid-write (`pause_mid_write`); the write goes
        on when it returns. Raises like `result`."""
        seq = self._take_pending("checkpoint")
        reply = self._reply(seq)
        if reply[0] == "mid-write":
            mid_write()
            try:
                self._conn.send_bytes(GO_ON)
            except OSError as exc:
                raise self._ended(seq, exc) from None
            reply = self._reply(seq)
        if reply[0] == "written":
            return reply[1]
        raise self._failed(reply, f"the checkpoint at batch {seq}")

    def _put_pending(self, seq: int) -> None:
        if len(self._pending) >= self._max_in_flight:
            raise RuntimeError(f"batch {self._pending[-1]} is still in flight")
        self._pending.append(seq)

    def _take_pending(self, what: str) -> int:
        """The oldest work in flight: the writer answers in the order it was handed over."""
        if not self._pending:
            raise RuntimeError(f"no {what} is in flight")
        return self._pending.popleft()

    def _reply(self, seq: int) -> tuple:
        try:
            return pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError) as exc:
            raise self._ended(seq, exc) from None

    def _failed(self, reply: tuple, what: str) -> Exception:
        log.debug("writer process traceback:\n%s", reply[2])
        if reply[0] == "store-failed":
            return StoreErrorElsewhere(reply[1])
        return WriterFailed(f"{what} failed in the writer process: {reply[1]}")

    @property
    def exitcode(self) -> int | None:
        return self._proc.poll()

    def _ended(self, seq: int, exc: BaseException) -> WriterFailed:
        try:
            code: int | None = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        return WriterFailed(f"the writer process ({self.name}) ended (exit code {code}) "
                            f"before it answered for batch {seq}: {type(exc).__name__}")

    def close(self) -> None:
        """End the process. Callers settle the batch in flight first (`result`); closing with
        one still in flight leaves it to its transaction, which commits whole or not at all."""
        pid = self._proc.pid
        self.peak_rss_mib = vm_hwm_mib(pid)
        self.cpu_s = cpu_seconds(pid)
        self.written_mib = written_mib(pid)
        try:
            self._conn.send_bytes(b"")
        except OSError:
            pass  # already gone
        self._conn.close()
        try:
            self._proc.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
            self._proc.wait()


def main(argv: list[str]) -> None:
    """The writer process: serve the worker on the socket whose descriptor is `argv[1]`."""
    _serve(Connection(int(argv[1])))


if __name__ == "__main__":
    main(sys.argv)
