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
from dataclasses import dataclass, replace
from typing import Any

import orjson
import zstandard

from ..operators.changes import apply_changes
from ..store.ops import CHECKPOINT_DELTA_SUFFIX, Store, dumps, is_delta_checkpoint, now_iso
from ..timeutil import NEG_INF, us_to_iso
from ..watermarks import InputWatermark
from .settings import TP, Operator, PipelineSpec, Source

SERIALIZER = "orjson+zstd/1"
# A delta checkpoint: the state's small parts whole and its large maps as their changes since
# the checkpoint before it (operators.changes). Its own serializer, so that a release that
# cannot apply one refuses it rather than restoring a part of a state.
DELTA_SERIALIZER = SERIALIZER + CHECKPOINT_DELTA_SUFFIX
# What releases before the eighteenth round wrote: the same JSON, zlib-compressed. Still read
# (a store they left restores and goes on), never written.
ZLIB_SERIALIZER = "orjson+zlib/1"
_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    SERIALIZER: lambda blob: zstandard.ZstdDecompressor().decompress(blob),
    ZLIB_SERIALIZER: zlib.decompress,
}
READABLE_SERIALIZERS = tuple(base + suffix for base in _DECOMPRESS
                             for suffix in ("", CHECKPOINT_DELTA_SUFFIX))
# zstd level 1: the state is mostly IDs, hashes and times. Measured on a 141 MB ledger state at
# 1,000,000 events: zlib level 1 took 1.03 s on one thread (0.63 s in pieces on two) for
# 42.0 MB; zstd level 1 takes 0.34 s on one thread (0.24 s on two) for 31.3 MB, and reads
# back in 0.12 s against zlib's 0.48 s (docs/performance.md, eighteenth round). The level is
# not part of the format (any level decompresses the same way), so SERIALIZER names none.
COMPRESS_LEVEL = 1
# A state larger than this is compressed by zstd's own worker threads (it releases the
# interpreter lock while it compresses): the writer process compresses a checkpoint while the
# worker runs the next batch, and a large full one is what the worker may then wait for.
COMPRESS_THREADS_ABOVE = 4 << 20
COMPRESS_THREADS = 2


def compress_state(raw: bytes, level: int = COMPRESS_LEVEL) -> bytes:
    """`raw` as one zstd frame that records its own size (what restore reads back in one
    piece), compressed on COMPRESS_THREADS threads when it is large."""
    threads = min(COMPRESS_THREADS, os.cpu_count() or 1) if len(raw) > COMPRESS_THREADS_ABOVE else 0
    return zstandard.ZstdCompressor(level=level, threads=threads).compress(raw)


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


@dataclass(frozen=True, slots=True)
class CheckpointChain:
    """What the next checkpoint builds on: the last checkpoint's journal seq and records read
    (which a delta names, to be applied only on top of that one), and the raw sizes of the
    full checkpoint its chain starts from and of the deltas since."""

    journal_seq: int
    records_total: int
    full_bytes: int
    delta_bytes: int
    # The bytes an entry of the operator's named maps took in the full checkpoint (the named
    # maps' encoded bytes over `SnapshotParts.entries`); 0 when it held none.
    entry_bytes: float = 0.0
    # The bytes of the full checkpoint's other parts: the host's (watermarks, positions, the
    # source's identity and fingerprints), about the same in every checkpoint.
    host_bytes: int = 0

    def wants_full(self, full_after: float, whole_bytes: int, entries: int) -> bool:
        """Whether the next checkpoint is a full one, given the operator's state now: the
        encoded bytes of its parts written whole in every checkpoint (`whole_bytes`), and the
        `entries` its named maps hold (RunSettings.full_checkpoint_after; 0 writes every
        checkpoint full).

        Restore reads the full checkpoint and every delta since. A full one is written again
        once those add up to more than 1 + `full_after` times the state as it stands now, so
        restore reads at most about that many states. The state's size is estimated, not
        measured (measuring it is serializing it, which is what a full checkpoint costs): the
        operator's whole parts as they are, the host's as in the last full checkpoint, and the
        entries now at the bytes per entry of that checkpoint.
        - A state of about steady size (a window that turns over): full again once the deltas
          add up to `full_after` times it, as the rule before this one had it.
        - A state that grows (the ledger's identities, every payment ever seen): its deltas
          are mostly its new entries, which restore needs anyway and a full checkpoint would
          only write again. Full again only once the rewrites within the deltas (a window's
          payments as it changes, then as it leaves) add up; a rule on the deltas' bytes
          alone wrote ever larger full checkpoints, each about double the one before, and at
          1,000,000 ledger events they were the larger part of the checkpoint stage
          (docs/performance.md, forty-third round).
        - A state that shrinks: full sooner, as the old full one outweighs it.
        Before the full checkpoint held any entry there is no size per entry: full again once
        the deltas add up to `full_after` times it."""
        if full_after <= 0:
            return True
        if self.entry_bytes <= 0:
            return self.delta_bytes >= full_after * self.full_bytes
        state_bytes = self.host_bytes + whole_bytes + entries * self.entry_bytes
        return self.full_bytes + self.delta_bytes > (1 + full_after) * state_bytes

    def base(self) -> dict[str, int]:
        return {"journal_seq": self.journal_seq, "records_total": self.records_total}


def read_checkpoint(store: Store, pipeline: str, state_schema: str) -> dict | None:
    """The latest checkpoint, its state decoded into `decoded` (a delta applied to the full
    checkpoint and the deltas before it); refuses (before reading or writing anything) when a
    checkpoint it needs was written with another serializer or state schema, or the chain of
    deltas is broken."""
    rows = store.checkpoint_chain(pipeline)
    if not rows:
        return None
    state: dict | None = None
    for row in rows:
        _refuse_foreign(row, pipeline, state_schema)
        decoded = _decoded(row, decompressed_state(row))
        if state is None:
            if is_delta_checkpoint(row["serializer"]):
                raise CheckpointMismatch(
                    f"checkpoint {row['id']} of pipeline {pipeline!r} holds changes since an "
                    f"earlier checkpoint that is not in the store. Refusing to start: nothing "
                    f"was read or written.")
            state = decoded
        else:
            state = _applied(row, state, decoded)
        problem = shape_problem(state)
        if problem:
            raise CheckpointMismatch(
                f"checkpoint {row['id']} of pipeline {pipeline!r} decodes but does not have the "
                f"shape this code writes ({problem}). Refusing to start: nothing was read or "
                f"written.")
    ck = rows[-1]
    ck["decoded"] = state
    return ck


def _refuse_foreign(row: dict, pipeline: str, state_schema: str) -> None:
    if row["serializer"] not in READABLE_SERIALIZERS or row["state_schema"] != state_schema:
        raise CheckpointMismatch(
            f"checkpoint {row['id']} of pipeline {pipeline!r} was written with serializer "
            f"{row['serializer']!r} and state schema {row['state_schema']!r}; this code reads "
            f"{' / '.join(map(repr, READABLE_SERIALIZERS))} with {state_schema!r}. Refusing "
            f"to start: nothing was read or written. Migrate the checkpoint or start a new "
            f"store.")


def decompressed_state(row: dict) -> bytes:
    """The row's state bytes, decompressed by the codec its serializer names (`_refuse_foreign`
    has judged the serializer)."""
    base = row["serializer"].removesuffix(CHECKPOINT_DELTA_SUFFIX)
    try:
        return _DECOMPRESS[base](row["state"])
    except (zlib.error, zstandard.ZstdError) as exc:
        raise CheckpointMismatch(f"checkpoint {row['id']} cannot be decoded: {exc}") from None


def _decoded(row: dict, raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CheckpointMismatch(f"checkpoint {row['id']} cannot be decoded: {exc}") from None


# What a delta holds besides a state's own keys (`shape_problem` judges those once applied).
_DELTA_SHAPE = {"delta_of": dict, "operator": dict, "operator_changes": dict}


def _applied(row: dict, state: dict, delta: Any) -> dict:
    """`state` (the checkpoint before `row`, decoded and of the right shape; changed in place)
    brought to `row`'s moment by its delta."""
    missing = ([k for k, kind in _DELTA_SHAPE.items() if not isinstance(delta.get(k), kind)]
               if isinstance(delta, dict) else list(_DELTA_SHAPE))
    if missing:
        raise CheckpointMismatch(
            f"checkpoint {row['id']} is a delta but does not have the shape this code writes "
            f"(no {missing[0]!r} object). Refusing to start: nothing was read or written.")
    base = {"journal_seq": state["journal_seq"], "records_total": state["records_total"]}
    if delta["delta_of"] != base:
        raise CheckpointMismatch(
            f"checkpoint {row['id']} holds the changes since the checkpoint at {delta['delta_of']}"
            f", but the one before it in the store is at {base}: the chain of checkpoints is "
            f"broken. Refusing to start: nothing was read or written.")
    operator = state["operator"]
    try:
        apply_changes(operator, delta["operator"], delta["operator_changes"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointMismatch(
            f"checkpoint {row['id']} holds changes that do not have the shape of the state "
            f"before it ({type(exc).__name__}: {exc}). Refusing to start: nothing was read or "
            f"written.") from None
    applied = {k: v for k, v in delta.items() if k not in ("delta_of", "operator_changes")}
    applied["operator"] = operator
    return applied


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
    serializer: str = SERIALIZER  # DELTA_SERIALIZER when `raw` holds changes only


def dump_checkpoint(spec: PipelineSpec, op: Operator, source: Source,
                    wms: dict[str, InputWatermark], positions: dict[TP, int], *, clock: int,
                    stream_start: int, seq: int, records_total: int, ended: bool,
                    key: str | None = None, chain: CheckpointChain | None = None,
                    full_after: float = 1.0
                    ) -> tuple[CheckpointDump, CheckpointChain]:
    """The state of this moment, serialized: operator, watermarks, positions and source
    fingerprints; and what the checkpoint after it builds on. Everything after this
    (compression, the write) reads only the bytes, so the host may go on changing the state
    once it returns.

    With `chain` (what the checkpoint before this one left) and an operator that names its
    large maps (`snapshot_parts`), the dump is a delta: those maps as their changes since that
    checkpoint, the rest whole; a full one again once the full one and the deltas since add up
    to more than 1 + `full_after` times the state (`CheckpointChain.wants_full`). Either way
    the operator's parts are marked: the next delta starts here.
    `key`: what the checkpoint is kept under (the worker's key; default the pipeline's name)."""
    t0 = time.perf_counter()
    key = key or spec.name
    parts_of = getattr(op, "snapshot_parts", None)
    parts = parts_of() if parts_of is not None else None
    # The operator's whole parts, encoded once: a delta embeds these bytes as they are, and
    # their size goes into the rule for a full checkpoint.
    whole_raw = encode_state(parts.whole) if parts is not None else b""
    entries = parts.entries() if parts is not None else 0
    delta = (parts is not None and chain is not None
             and not chain.wants_full(full_after, len(whole_raw), entries))
    fps = {tp_str(*tp): source.fingerprint(tp, off) for tp, off in positions.items()}
    # The operator's part encoded apart when it has parts (the same bytes as inline): a full
    # one as its whole parts' bytes and its named maps' spliced together (`_joined`), so it
    # knows what its named maps took and encodes the whole parts once.
    named_raw = b""
    operator: Any
    if parts is None:
        operator = op.snapshot()
    elif delta:
        operator = orjson.Fragment(whole_raw)
    else:
        named_raw = encode_state(parts.named())
        operator = orjson.Fragment(_joined(whole_raw, named_raw))
    state = {
        "operator": operator,
        "watermarks": {t: w.snapshot() for t, w in wms.items()},
        "positions": {tp_str(*tp): off for tp, off in positions.items()},
        "source": {**source.identity(), "fingerprints": fps},
        "clock": clock, "stream_start": stream_start,
        "journal_seq": seq, "records_total": records_total, "ended": ended,
    }
    if delta and parts is not None and chain is not None:
        state["operator_changes"] = parts.changes()
        state["delta_of"] = chain.base()
    raw = encode_state(state)
    if parts is not None:
        parts.mark()
    if delta and chain is not None:
        after = replace(chain, journal_seq=seq, records_total=records_total,
                        delta_bytes=chain.delta_bytes + len(raw))
    elif parts is None:
        after = CheckpointChain(seq, records_total, len(raw), 0)
    else:
        after = CheckpointChain(
            seq, records_total, len(raw), 0,
            entry_bytes=len(named_raw) / entries if entries else 0.0,
            host_bytes=len(raw) - len(whole_raw) - len(named_raw))
    serializer = DELTA_SERIALIZER if delta else SERIALIZER
    sm = op.state_metrics()
    meta = {
        "pipeline": key, "journal_seq": seq,
        "positions": state["positions"], "source": state["source"],
        "watermarks": {t: us_to_iso(w.wm) for t, w in wms.items()},
        "idle_partitions": {t: [p for p, i in enumerate(w.idle) if i]
                            for t, w in wms.items()},
        "rule_version": getattr(op, "rule_version", None),
        "reference_versions": (spec.reference_versions(op)
                               if spec.reference_versions else {}),
        "serializer": serializer, "state_schema": op.state_schema,
        "code_revision": code_revision(), "state_bytes": sm.get("state_bytes"),
        "state_records": sm.get("state_records"), "records_total": records_total,
        "clock": us_to_iso(clock) if clock > NEG_INF else None,
        "end_of_stream": ended,
    }
    if delta and chain is not None:
        meta["delta_of"] = chain.base()
    dump = CheckpointDump(key, seq, op.state_schema, meta, time.perf_counter() - t0, raw,
                          serializer=serializer)
    return dump, after


def _joined(first: bytes, second: bytes) -> bytes:
    """Two encoded JSON objects as one, the first's members then the second's: the bytes of
    encoding `{**a, **b}` where the two share no key. Copied once: slicing each and adding
    the slices copied a full checkpoint's state three times (about 0.26 s for 80 MB in a
    1,000,000-receipt run; docs/performance.md, fifty-eighth round)."""
    if first == b"{}":
        return second
    if second == b"{}":
        return first
    return b"".join((memoryview(first)[:-1], b",", memoryview(second)[1:]))


def encode_state(state: dict) -> bytes:
    """A checkpoint's state as JSON. A map keyed by something other than text (an operator
    may key one by number) is written with its keys as their JSON text (orjson's
    `OPT_NON_STR_KEYS`); that option makes every map cost about 40% more to encode even when
    all its keys are text, as every built-in operator's are. So the state is encoded
    without it first, and again with it only when that refuses a key: the same bytes either
    way for a state keyed by text (docs/performance.md, seventeenth round)."""
    try:
        return orjson.dumps(state)
    except orjson.JSONEncodeError:
        return orjson.dumps(state, option=orjson.OPT_NON_STR_KEYS)


def checkpoint_row(dump: CheckpointDump) -> dict:
    """The checkpoints row of a dump: its state compressed. The duration is the dump's and the
    compression's seconds (the write itself not included)."""
    t0 = time.perf_counter()
    blob = compress_state(dump.raw)
    duration_ms = int((dump.dump_s + time.perf_counter() - t0) * 1000)
    meta = {**dump.meta, "size_bytes": len(blob), "duration_ms": duration_ms}
    return {"pipeline": dump.pipeline, "journal_seq": dump.seq, "serializer": dump.serializer,
            "state_schema": dump.state_schema, "meta": dumps(meta), "state": blob,
            "size_bytes": len(blob), "duration_ms": duration_ms, "created_at": now_iso()}


def checkpoint_summary(row: dict) -> dict:
    """What the metrics report about a written checkpoint."""
    return {"id_journal_seq": row["journal_seq"], "size_bytes": row["size_bytes"],
            "duration_ms": row["duration_ms"], "delta": is_delta_checkpoint(row["serializer"])}
