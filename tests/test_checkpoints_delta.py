"""Delta checkpoints on real stores: a long-running ledger writes most checkpoints as the changes
since the one before; restore applies the chain back to the newest full one and gets exactly
the state the worker had; pruning never drops a checkpoint a kept delta builds on; and a chain
with a gap or a missing start is refused before anything is read or written."""

from __future__ import annotations

import shutil
import zlib

import orjson
import pytest
from sqlalchemy import delete, update

from riskstream_tools.workloads.ledger_seed import generate
from streaming.host.checkpoints import (DELTA_SERIALIZER, SERIALIZER, ZLIB_SERIALIZER,
                                        CheckpointMismatch, decompressed_state,
                                        read_checkpoint)
from streaming.host.loop import Worker
from streaming.host.settings import RunSettings
from streaming.operators.ledger import STATE_SCHEMA
from streaming.pipelines.ledger import make_spec, run_extra
from streaming.store import schema as S
from streaming.store.ops import Store

from .ledgerutil import TEST_KEY, facts_digest


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    out = tmp_path_factory.mktemp("ledger_delta")
    generate(31, str(out), payments=300)
    return str(out)


def _worker(source: str, url: str, store: Store) -> Worker:
    # Deltas up to eight times the full checkpoint: chains long enough to break in the middle.
    settings = RunSettings(source=source, store_url=url, checkpoint_every=30, batch_size=15,
                           full_checkpoint_after=8.0, extra=run_extra(TEST_KEY))
    return Worker(make_spec(TEST_KEY), settings, store=store)


def _as_stored(obj):
    return orjson.loads(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))


def test_ledger_writes_deltas_and_restore_rebuilds_its_exact_state(source, store_url):
    store = Store(store_url)
    try:
        worker = _worker(source, store_url, store)
        worker.run()
        rows = store.checkpoints("ledger")
        chain = store.checkpoint_chain("ledger")
        ck = read_checkpoint(store, "ledger", STATE_SCHEMA)
    finally:
        store.dispose()
    kinds = [r["serializer"] for r in rows]
    assert rows[0]["serializer"] == SERIALIZER or len(rows) > 3  # older ones were pruned
    assert DELTA_SERIALIZER in kinds and SERIALIZER in kinds
    # Restore reads from the newest full checkpoint on, and nothing before it.
    assert chain[0]["serializer"] == SERIALIZER
    assert all(r["serializer"] == DELTA_SERIALIZER for r in chain[1:])
    assert chain[-1]["id"] == rows[-1]["id"]
    assert ck is not None and ck["id"] == rows[-1]["id"]
    assert ck["decoded"]["operator"] == _as_stored(worker.op.snapshot())
    assert ck["decoded"]["journal_seq"] == rows[-1]["journal_seq"]
    # A delta holds the changes only: smaller than the state it brings the chain to.
    state_raw = len(orjson.dumps(ck["decoded"]))
    for r in chain[1:]:
        assert len(decompressed_state(r)) < state_raw / 2
        assert orjson.loads(r["meta"])["delta_of"]["journal_seq"] < r["journal_seq"]


@pytest.mark.parametrize("zlib_rows", [False, True], ids=["zstd", "zlib"])
def test_restore_from_a_chain_goes_on_exactly_as_an_uninterrupted_run(source, store_url,
                                                                      tmp_path, zlib_rows):
    """Also from a chain an earlier release wrote with zlib (`zlib_rows`): each row is read by
    the codec its serializer names, and the run goes on writing zstd."""
    whole_url = f"sqlite:///{tmp_path}/whole.sqlite"
    whole = Store(whole_url)
    try:
        _worker(source, whole_url, whole).run()
        want = facts_digest(whole)
    finally:
        whole.dispose()
    store = Store(store_url)
    try:
        _worker(source, store_url, store).run()
        # Drop everything after a delta in the middle of the chain: the restart must restore
        # from that delta (applied on the full one before it) and replay the journal after it.
        c = S.checkpoints.c
        chain = store.checkpoint_chain("ledger")
        assert len(chain) >= 3
        with store.engine.begin() as conn:
            conn.execute(delete(S.checkpoints).where(c.id > chain[-2]["id"]))
            if zlib_rows:
                for row in chain[:-1]:
                    conn.execute(update(S.checkpoints).where(c.id == row["id"]).values(
                        serializer=row["serializer"].replace(SERIALIZER, ZLIB_SERIALIZER),
                        state=zlib.compress(decompressed_state(row))))
        restored = _worker(source, store_url, store)
        res = restored.run()
        assert res.restored_from == chain[-2]["id"]
        assert res.records < 300  # the journal after the delta replayed, not the whole log
        assert facts_digest(store) == want
        # The restored run's own first checkpoint is full: a chain never spans two runs.
        after = [r for r in store.checkpoints("ledger") if r["id"] > chain[-2]["id"]]
        assert after and after[0]["serializer"] == SERIALIZER
    finally:
        store.dispose()


def _row(seq: int, delta: bool) -> dict:
    return {"pipeline": "p", "journal_seq": seq, "serializer": DELTA_SERIALIZER if delta
            else SERIALIZER, "state_schema": "s", "meta": "{}", "state": b"", "size_bytes": 0,
            "duration_ms": 0, "created_at": "now"}


def test_pruning_keeps_every_checkpoint_a_kept_delta_builds_on(store_url):
    store = Store(store_url)
    try:
        def kept() -> list[tuple[int, bool]]:
            return [(r["journal_seq"], r["serializer"] == DELTA_SERIALIZER)
                    for r in store.checkpoints("p")]
        for seq, delta in [(1, False), (2, True), (3, True), (4, True)]:
            store.write_checkpoint(_row(seq, delta), keep=3)
        # The three newest are deltas: the full one they build on stays.
        assert kept() == [(1, False), (2, True), (3, True), (4, True)]
        store.write_checkpoint(_row(5, False), keep=3)
        store.write_checkpoint(_row(6, True), keep=3)
        assert kept() == [(1, False), (2, True), (3, True), (4, True), (5, False), (6, True)]
        store.write_checkpoint(_row(7, True), keep=3)  # the newest three: 5 (full), 6, 7
        assert kept() == [(5, False), (6, True), (7, True)]
        assert [r["journal_seq"] for r in store.checkpoint_chain("p")] == [5, 6, 7]
        store.write_checkpoint(_row(8, False), keep=3)
        assert [r["journal_seq"] for r in store.checkpoint_chain("p")] == [8]
        assert store.checkpoint_chain("other") == []
    finally:
        store.dispose()


def _tables(store: Store) -> tuple[dict, tuple]:
    return store.table_counts(), facts_digest(store)


@pytest.mark.parametrize("damage", ["gap", "no-full-start", "not-a-delta"])
def test_a_broken_chain_is_refused_before_anything_is_read_or_written(source, store_url,
                                                                      damage):
    store = Store(store_url)
    try:
        _worker(source, store_url, store).run()
        chain = store.checkpoint_chain("ledger")
        assert len(chain) >= 3
        c = S.checkpoints.c
        with store.engine.begin() as conn:
            if damage == "gap":  # a delta whose base is not the checkpoint before it
                conn.execute(delete(S.checkpoints).where(c.id == chain[-2]["id"]))
            elif damage == "no-full-start":  # the full one the chain starts from is gone
                conn.execute(delete(S.checkpoints).where(c.id <= chain[0]["id"]))
            else:  # a delta row holding a full state: it names no base and no changes
                conn.execute(update(S.checkpoints).where(c.id == chain[-1]["id"])
                             .values(state=chain[0]["state"]))
        before = _tables(store)
        with pytest.raises(CheckpointMismatch) as err:
            _worker(source, store_url, store).run()
        assert {"gap": "the chain of checkpoints is broken",
                "no-full-start": "an earlier checkpoint that is not in the store",
                "not-a-delta": "is a delta but does not have the shape"}[damage] in str(err.value)
        assert "nothing was read or written" in str(err.value)
        assert _tables(store) == before
    finally:
        store.dispose()


def test_a_checkpoint_from_before_delta_checkpoints_restores_and_its_run_goes_on(
        source, store_url, tmp_path):
    """A store whose newest checkpoint an earlier release wrote (the ledger's windows a list,
    each with its payments) restores; the restored run, reading on, checkpoints in full first
    (its deltas would not apply to that layout), and the run after it restores from what it
    wrote."""
    grown = tmp_path / "src"
    shutil.copytree(source, grown)
    logs = sorted(grown.rglob("*.jsonl"))
    whole = {p: p.read_bytes() for p in logs}
    for p, data in whole.items():  # the first run sees the first half of every partition
        lines = data.splitlines(keepends=True)
        p.write_bytes(b"".join(lines[:len(lines) // 2]))
    store = Store(store_url)
    try:
        _worker(str(grown), store_url, store).run()
        ck = read_checkpoint(store, "ledger", STATE_SCHEMA)
        assert ck is not None
        older = ck["decoded"]
        # That release's layout: a list of windows, each row holding its payments.
        op = older["operator"]
        payments = op.pop("window_payments")
        op["windows"] = [[*row[:2], payments[k], *row[2:]] for k, row in op["windows"].items()]
        assert op["windows"] and any(row[2] for row in op["windows"])
        with store.engine.begin() as conn:
            conn.execute(delete(S.checkpoints))
            conn.execute(S.checkpoints.insert().values(
                pipeline="ledger", journal_seq=ck["journal_seq"], serializer=ZLIB_SERIALIZER,
                state_schema=STATE_SCHEMA, meta=ck["meta"], size_bytes=0, duration_ms=0,
                created_at="then", state=zlib.compress(orjson.dumps(older))))
        old_id = store.checkpoints("ledger")[-1]["id"]
        for p, data in whole.items():
            p.write_bytes(data)
        assert _worker(str(grown), store_url, store).run().restored_from == old_id
        written = [r for r in store.checkpoints("ledger") if r["id"] > old_id]
        assert len(written) >= 2 and written[0]["serializer"] == SERIALIZER
        assert DELTA_SERIALIZER in {r["serializer"] for r in written}
        again = _worker(str(grown), store_url, store)
        assert again.run().restored_from == written[-1]["id"]
        assert read_checkpoint(store, "ledger", STATE_SCHEMA)["decoded"]["operator"] == \
            _as_stored(again.op.snapshot())
    finally:
        store.dispose()


@pytest.mark.parametrize("full_after", [0.25, 1.0])
def test_restore_reads_at_most_about_one_plus_the_ratio_states(source, store_url, full_after):
    """At every checkpoint of a ledger run, what restore would read (the last full checkpoint
    and the deltas since) is within 1 + `full_after` times the state at that moment, give or
    take the estimate of its size (`CheckpointChain.wants_full`) and the one delta written
    after the rule was asked; and the ledger's growing state is not rewritten whole at every
    few checkpoints."""
    settings = RunSettings(source=source, store_url=store_url, checkpoint_every=30,
                           batch_size=15, full_checkpoint_after=full_after,
                           overlap_commits=False, extra=run_extra(TEST_KEY))
    store = Store(store_url)
    worker = Worker(make_spec(TEST_KEY), settings, store=store)
    written: list[tuple[bool, int, int]] = []  # (full, raw bytes, the state's raw bytes)
    write = store.write_checkpoint

    def measured(row, *args, **kwargs):
        state = len(orjson.dumps({"operator": worker.op.snapshot()}))
        written.append((row["serializer"] == SERIALIZER, len(decompressed_state(row)), state))
        return write(row, *args, **kwargs)

    store.write_checkpoint = measured  # type: ignore[method-assign]
    try:
        worker.run()
    finally:
        store.dispose()
    assert len(written) >= 10 and written[0][0]
    chain = 0
    for full, raw, state in written:
        chain = raw if full else chain + raw
        assert chain <= (1 + full_after) * state * 1.1 + raw, (full_after, written)
    fulls = sum(full for full, _, _ in written)
    assert 1 < fulls < len(written) // 2 + 1, written
    if full_after == 1.0:
        # Most of the state is identities, each written once in a delta; a delta that adds
        # them is no reason to write them all again.
        assert fulls <= 2, written
