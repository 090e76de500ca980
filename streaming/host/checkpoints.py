"""Checkpoints: the operator state, watermarks, positions and source fingerprints of one moment,
written in one row every N records and at the end; read back, verified against the source and
decoded on restore. A checkpoint this code cannot read, or a source that changed under it, stops
the run before anything is read or written."""

from __future__ import annotations

import os
import subprocess
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import orjson

from ..store.ops import Store, dumps, now_iso
from ..timeutil import NEG_INF, us_to_iso
from ..watermarks import InputWatermark
from .settings import TP, Operator, PipelineSpec, Source

SERIALIZER = "orjson+zlib/1"
# zlib level 1: the state is mostly IDs, hashes and times, where level 1 compresses almost as
# well as higher levels at a fraction of the CPU of every checkpoint. The level is not part of
# the format (decompression reads any level), so checkpoints written at another level restore
# unchanged and SERIALIZER stays the same.
COMPRESS_LEVEL = 1
# A state larger than one piece is compressed in pieces on threads (zlib releases the
# interpreter lock while it deflates). Measured on a 134 MB ledger state at 1,000,000 events,
# in the worker with the writer process idle: 0.85 s in one piece, 0.56 s in 4 MiB pieces on two
# threads (more threads or other piece sizes changed nothing), 0.04% larger. With overlapped
# commits the writer process compresses (`checkpoint_row`) while the worker runs the next batch.
COMPRESS_PIECE_BYTES = 4 << 20


class CompressedPieces:
    """The last state `compress_state` compressed in pieces, and those pieces compressed. A
    piece whose bytes are the same in the next state, at the same place and not last in
    either, compresses to the same bytes (each piece is deflated on its own, with no dictionary
    from the piece before), so it is taken from here instead. Measured between two checkpoints
    50,000 events apart at 1,000,000 ledger events: 25 of 36 pieces the same (the identities,
    kept in insertion order, are most of the state and only grow at their end). Holds the last
    state (its size again in memory) so that sameness is a byte comparison, not a hash."""

    __slots__ = ("raw", "level", "pieces")

    def __init__(self) -> None:
        self.raw = b""
        self.level = -1
        self.pieces: list[bytes] = []

    def reusable(self, raw: bytes, level: int, i: int, last: int) -> bytes | None:
        """Piece `i` of `raw` (of `last` + 1) compressed, when the last state had the same."""
        if level != self.level or i >= last or i >= len(self.pieces) - 1:
            return None
        start = i * COMPRESS_PIECE_BYTES
        end = start + COMPRESS_PIECE_BYTES
        return self.pieces[i] if self.raw[start:end] == raw[start:end] else None


def compress_state(raw: bytes, level: int = COMPRESS_LEVEL,
                   reuse: CompressedPieces | None = None) -> bytes:
    """`raw` as one zlib stream, which `zlib.decompress` reads like any other, deflated in
    pieces in parallel the way pigz does it: each piece is a raw deflate stream ended by a
    sync flush (an empty stored block, so the next piece's blocks may follow) and the last by
    the final block; the zlib header and the Adler-32 of the whole wrap them. With `reuse`, the
    pieces the last state compressed through it had the same are taken from it (the bytes are
    the same either way), and it then holds this state."""
    if len(raw) <= COMPRESS_PIECE_BYTES:
        if reuse is not None:
            reuse.raw, reuse.level, reuse.pieces = b"", -1, []
        return zlib.compress(raw, level)
    view = memoryview(raw)
    pieces = [view[i:i + COMPRESS_PIECE_BYTES]
              for i in range(0, len(raw), COMPRESS_PIECE_BYTES)]
    last = len(pieces) - 1

    def deflate(i: int) -> bytes:
        if reuse is not None:
            same = reuse.reusable(raw, level, i, last)
            if same is not None:
                return same
        c = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        return c.compress(pieces[i]) + c.flush(zlib.Z_FINISH if i == last else zlib.Z_SYNC_FLUSH)

    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        compressed = list(pool.map(deflate, range(len(pieces))))
    if reuse is not None:
        reuse.raw, reuse.level, reuse.pieces = raw, level, compressed
    header = zlib.compress(b"", level)[:2]  # the two header bytes this level writes
    return header + b"".join(compressed) + zlib.adler32(raw).to_bytes(4, "big")


class CheckpointMismatch(RuntimeError):
    exit_code = 3


class SourceMismatch(RuntimeError):
    exit_code = 4


def tp_str(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


_CODE_REV: str | None = None


def code_revision() -> str:
    global _CODE_REV
    if _CODE_REV is None:
        here = os.path.dirname(os.path.abspath(__file__))
        try:
            rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                                 text=True, timeout=5).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                   cwd=here, capture_output=True, text=True,
                                   timeout=5).stdout.strip()
            _CODE_REV = (rev + ("+dirty" if dirty else "")) if rev else "unknown"
        except (OSError, subprocess.SubprocessError):
            _CODE_REV = "unknown"
    return _CODE_REV


def read_checkpoint(store: Store, pipeline: str, state_schema: str) -> dict | None:
    """The latest checkpoint, decoded into `decoded`; refuses (before reading or writing
    anything) when its serializer or state schema is not this code's."""
    ck = store.latest_checkpoint(pipeline)
    if ck is None:
        return None
    if ck["serializer"] != SERIALIZER or ck["state_schema"] != state_schema:
        raise CheckpointMismatch(
            f"checkpoint {ck['id']} of pipeline {pipeline!r} was written with serializer "
            f"{ck['serializer']!r} and state schema {ck['state_schema']!r}; this code reads "
            f"{SERIALIZER!r} / {state_schema!r}. Refusing to start: nothing was read "
            f"or written. Migrate the checkpoint or start a new store.")
    try:
        ck["decoded"] = orjson.loads(zlib.decompress(ck["state"]))
    except (zlib.error, orjson.JSONDecodeError) as exc:
        raise CheckpointMismatch(f"checkpoint {ck['id']} cannot be decoded: {exc}") from None
    problem = shape_problem(ck["decoded"])
    if problem:
        raise CheckpointMismatch(
            f"checkpoint {ck['id']} of pipeline {pipeline!r} decodes but does not have the shape "
            f"this code writes ({problem}). Refusing to start: nothing was read or written.")
    return ck


# What `write_checkpoint` puts in a state, by key: the type each value must have.
_STATE_SHAPE = {"operator": dict, "watermarks": dict, "positions": dict, "source": dict,
                "clock": int, "stream_start": int, "journal_seq": int, "records_total": int}


def shape_problem(state: object) -> str | None:
    """What makes a decoded checkpoint state unusable, or None. The operator's own state is
    judged by its `restore` (a failure there is reported the same way)."""
    if not isinstance(state, dict):
        return f"the state is a {type(state).__name__}, not an object"
    for key, kind in _STATE_SHAPE.items():
        if key not in state:
            return f"no {key!r}"
        if not isinstance(state[key], kind) or isinstance(state[key], bool):
            return f"{key!r} is a {type(state[key]).__name__}, not a {kind.__name__}"
    for tps, off in state["positions"].items():
        if ":" not in tps or not isinstance(off, int) or off < 0:
            return f"position {tps!r} = {off!r} is not topic:partition -> offset"
    src = state["source"]
    if not isinstance(src.get("partitions"), dict) or not isinstance(src.get("fingerprints"),
                                                                     dict):
        return "the source identity has no partitions or fingerprints"
    missing = [tps for tps in state["positions"] if tps not in src["fingerprints"]]
    if missing:
        return f"no fingerprint for {missing[0]!r}"
    return None


def verified_positions(ck: dict, source: Source) -> dict[TP, int]:
    """The checkpoint's read positions, once the source is shown to be the one it was taken
    from: same partitions, same identity, same bytes before every position."""
    state = ck["decoded"]
    src = state["source"]
    if src["partitions"] != source.partition_counts:
        raise SourceMismatch(
            f"source partitions {source.partition_counts} differ from the checkpoint's "
            f"{src['partitions']}: the log was repartitioned; restore refused")
    # Sources that know their own identity (a broker stream) judge the rest of it.
    refusal = getattr(source, "restore_refusal", None)
    reason = refusal(src) if refusal is not None else None
    if reason:
        raise SourceMismatch(f"{reason}: restore refused")
    positions = {tuple(k.rsplit(":", 1)): v for k, v in state["positions"].items()}
    verified = {(t, int(p)): v for (t, p), v in positions.items()}
    for tp, off in verified.items():
        want = src["fingerprints"][tp_str(*tp)]
        got = source.fingerprint(tp, off)
        if want != got:
            raise SourceMismatch(
                f"partition {tp_str(*tp)} changed before offset {off} since checkpoint "
                f"{ck['id']} (fingerprint {got[:12]} != {want[:12]}): restore refused")
    return verified


@dataclass(frozen=True, slots=True)
class CheckpointDump:
    """A checkpoint taken but not yet written: the state of one moment, serialized, and the
    rest of its row. What the worker hands a writer process, which compresses and writes it
    (`checkpoint_row`, then `Store.write_checkpoint`) while the worker goes on. `meta` lacks the
    size and duration, known once the state is compressed; `raw` travels apart from the rest
    (a message of its own: never copied into a pickle)."""

    pipeline: str
    seq: int
    state_schema: str
    meta: dict
    dump_s: float  # the seconds the snapshot and its serialization took
    raw: bytes = b""
    # A writer process stops the write after the row's insert and waits for the worker's word
    # (the during-checkpoint crash point, when it is armed to fire at this checkpoint).
    pause_mid_write: bool = False


def dump_checkpoint(spec: PipelineSpec, op: Operator, source: Source,
                    wms: dict[str, InputWatermark], positions: dict[TP, int], *, clock: int,
                    stream_start: int, seq: int, records_total: int,
                    ended: bool) -> CheckpointDump:
    """The state of this moment, serialized: operator, watermarks, positions and source
    fingerprints. Everything after this (compression, the write) reads only the bytes, so the
    host may go on changing the state once it returns."""
    t0 = time.perf_counter()
    op_state = op.snapshot()
    fps = {tp_str(*tp): source.fingerprint(tp, off) for tp, off in positions.items()}
    state = {
        "operator": op_state,
        "watermarks": {t: w.snapshot() for t, w in wms.items()},
        "positions": {tp_str(*tp): off for tp, off in positions.items()},
        "source": {**source.identity(), "fingerprints": fps},
        "clock": clock, "stream_start": stream_start,
        "journal_seq": seq, "records_total": records_total, "ended": ended,
    }
    raw = orjson.dumps(state, option=orjson.OPT_NON_STR_KEYS)
    sm = op.state_metrics()
    meta = {
        "pipeline": spec.name, "journal_seq": seq,
        "positions": state["positions"], "source": state["source"],
        "watermarks": {t: us_to_iso(w.wm) for t, w in wms.items()},
        "idle_partitions": {t: [p for p, i in enumerate(w.idle) if i]
                            for t, w in wms.items()},
        "rule_version": getattr(op, "rule_version", None),
        "reference_versions": (spec.reference_versions(op)
                               if spec.reference_versions else {}),
        "serializer": SERIALIZER, "state_schema": op.state_schema,
        "code_revision": code_revision(), "state_bytes": sm.get("state_bytes"),
        "state_records": sm.get("state_records"), "records_total": records_total,
        "clock": us_to_iso(clock) if clock > NEG_INF else None,
        "end_of_stream": ended,
    }
    return CheckpointDump(spec.name, seq, op.state_schema, meta, time.perf_counter() - t0, raw)


def checkpoint_row(dump: CheckpointDump, reuse: CompressedPieces | None = None) -> dict:
    """The checkpoints row of a dump: its state compressed (with `reuse`, the pieces the last
    state compressed through it had the same taken from there). The duration is the dump's
    and the compression's seconds (the write itself not included)."""
    t0 = time.perf_counter()
    blob = compress_state(dump.raw, reuse=reuse)
    duration_ms = int((dump.dump_s + time.perf_counter() - t0) * 1000)
    meta = {**dump.meta, "size_bytes": len(blob), "duration_ms": duration_ms}
    return {"pipeline": dump.pipeline, "journal_seq": dump.seq, "serializer": SERIALIZER,
            "state_schema": dump.state_schema, "meta": dumps(meta), "state": blob,
            "size_bytes": len(blob), "duration_ms": duration_ms, "created_at": now_iso()}


def checkpoint_summary(row: dict) -> dict:
    """What the metrics report about a written checkpoint."""
    return {"id_journal_seq": row["journal_seq"], "size_bytes": row["size_bytes"],
            "duration_ms": row["duration_ms"]}


def write_checkpoint(store: Store, spec: PipelineSpec, op: Operator, source: Source,
                     wms: dict[str, InputWatermark], positions: dict[TP, int], *, clock: int,
                     stream_start: int, seq: int, records_total: int, ended: bool,
                     mid_write: Callable[[], None]) -> dict:
    """Write one checkpoint row in this process; returns what the metrics report about it.
    `mid_write` runs between the two halves of the write (the during-checkpoint crash
    point)."""
    row = checkpoint_row(dump_checkpoint(spec, op, source, wms, positions, clock=clock,
                                         stream_start=stream_start, seq=seq,
                                         records_total=records_total, ended=ended))
    store.write_checkpoint(row, mid_write=mid_write)
    return checkpoint_summary(row)
