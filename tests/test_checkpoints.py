"""Checkpoints: what they hold, atomicity, and the refusals that protect the store."""

from __future__ import annotations

import subprocess
import sys
import zlib
from dataclasses import replace

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, update

from streaming.host.checkpoints import (COMPRESS_LEVEL, SERIALIZER, ZLIB_SERIALIZER,
                                        CheckpointChain, CheckpointMismatch, _joined,
                                        compress_state,
                                        decompressed_state, read_checkpoint)
from streaming.store import schema as S
from streaming.store.ops import Store

from .joinutil import pair_set, run_join


def test_checkpoint_meta_holds_what_restore_needs(seed_dir, store_url):
    src, _ = seed_dir
    run_join(src, store_url, checkpoint_every=200, batch_size=100)
    store = Store(store_url)
    cks = store.checkpoints("join")
    assert len(cks) >= 3  # every 200 records and at the end
    meta = orjson.loads(cks[-1]["meta"])
    full = store.latest_checkpoint("join")
    store.dispose()
    assert set(meta["positions"]) == {"payments:0", "payments:1", "risk_signals:0",
                                      "risk_signals:1", "risk_signals:2"}
    assert sum(meta["positions"].values()) == 470
    assert meta["source"]["partitions"] == {"payments": 2, "risk_signals": 3}
    assert len(meta["source"]["fingerprints"]) == 5
    assert meta["serializer"] == "orjson+zstd/1" and meta["state_schema"] == "interval_join/1"
    assert meta["rule_version"] == "ij-v1:-47m..+8m"
    assert meta["reference_versions"] == {"rule_version": "ij-v1:-47m..+8m"}
    assert meta["code_revision"] and meta["size_bytes"] == cks[-1]["size_bytes"] > 0
    assert meta["duration_ms"] >= 0 and meta["state_bytes"] >= 0
    assert set(meta["watermarks"]) == {"payments", "risk_signals"}
    state = orjson.loads(decompressed_state(full))
    op = state["operator"]
    assert {"evicted_max_pay", "evicted_max_sig", "pay_ids", "sig_ids"} <= set(op)
    assert "pay-dup" in op["pay_ids"]  # deduplication identities survive restarts
    assert state["watermarks"]["risk_signals"]["idle"] == [False, False, False]


def _fingerprint_db(url):
    store = Store(url)
    counts = store.table_counts()
    facts = sorted((f["fact_key"], f["payload_hash"]) for f in store.facts("join"))
    store.dispose()
    return counts, facts


def test_serializer_mismatch_stops_before_reading_or_writing(seed_dir, store_url):
    src, _ = seed_dir
    run_join(src, store_url, checkpoint_every=200)
    store = Store(store_url)
    c = S.checkpoints.c
    with store.engine.begin() as conn:
        last = conn.execute(select(c.id).order_by(c.id.desc()).limit(1)).scalar()
        conn.execute(update(S.checkpoints).where(c.id == last).values(serializer="pickle/0"))
    store.dispose()
    before = _fingerprint_db(store_url)
    proc = subprocess.run([sys.executable, "-m", "streaming.cli.main", "join", "run", "--source",
                           src, "--store", store_url, "--end-of-stream", "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert "serializer 'pickle/0'" in proc.stderr and "Refusing to start" in proc.stderr
    assert _fingerprint_db(store_url) == before


def test_rewritten_source_is_refused(seed_dir, tmp_path, sqlite_url):
    import shutil
    src, _ = seed_dir
    copy = tmp_path / "src"
    shutil.copytree(src, copy)
    run_join(str(copy), sqlite_url)
    path = copy / "payments" / "p0.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[1] + lines[0] + b"".join(lines[2:]))
    proc = subprocess.run([sys.executable, "-m", "streaming.cli.main", "join", "run", "--source",
                           str(copy), "--store", sqlite_url, "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4 and "payments:0 changed" in proc.stderr


def test_appended_source_continues_from_checkpoint(seed_dir, tmp_path, sqlite_url, seed_whole):
    """A recording can be continued: appended lines are read, earlier ones are not re-read."""
    import shutil
    src, _ = seed_dir
    copy = tmp_path / "src"
    shutil.copytree(src, copy)
    p0 = copy / "payments" / "p0.jsonl"
    lines = p0.read_bytes().splitlines(keepends=True)
    p0.write_bytes(b"".join(lines[:-20]))
    first = run_join(str(copy), sqlite_url)
    p0.write_bytes(b"".join(lines))
    second = run_join(str(copy), sqlite_url, end_of_stream=True)
    assert first.records == 450 and second.records == 20
    assert pair_set(sqlite_url) == pair_set(seed_whole)


def _rewrite_checkpoints(url: str, recode) -> None:
    """Every checkpoint row of `url` re-encoded: `recode(serializer, raw state)` gives the
    row's new serializer and state blob."""
    store = Store(url)
    c = S.checkpoints.c
    try:
        with store.engine.begin() as conn:
            rows = conn.execute(select(c.id, c.serializer, c.state)).all()
            for ck_id, serializer, blob in rows:
                raw = decompressed_state({"id": ck_id, "serializer": serializer, "state": blob})
                new_serializer, new_blob = recode(serializer, raw)
                assert new_blob != blob  # really another encoding of the same state
                conn.execute(update(S.checkpoints).where(c.id == ck_id)
                             .values(serializer=new_serializer, state=new_blob))
    finally:
        store.dispose()


@pytest.mark.parametrize("written_by", ["zlib, as releases before zstd wrote them",
                                        "zstd at another level"])
def test_checkpoints_written_another_way_restore(seed_dir, tmp_path, seed_whole, written_by):
    """A store whose checkpoints an earlier release wrote with zlib, or that were compressed
    at another zstd level, restores and continues exactly: the codec is read from each row's
    serializer, and the level is not part of it. (A ledger's zlib delta chain restores
    in tests/test_checkpoints_delta.py.)"""
    def as_zlib(serializer: str, raw: bytes) -> tuple[str, bytes]:
        return serializer.replace(SERIALIZER, ZLIB_SERIALIZER), zlib.compress(raw, 6)

    def other_level(serializer: str, raw: bytes) -> tuple[str, bytes]:
        return serializer, compress_state(raw, COMPRESS_LEVEL + 9)

    src, _ = seed_dir
    url = f"sqlite:///{tmp_path}/written.sqlite"
    run_join(src, url, checkpoint_every=100)
    zlib_rows = written_by.startswith("zlib")
    _rewrite_checkpoints(url, as_zlib if zlib_rows else other_level)
    store = Store(url)
    try:
        kinds = {ck["serializer"] for ck in store.checkpoints("join")}
    finally:
        store.dispose()
    assert kinds == {ZLIB_SERIALIZER if zlib_rows else SERIALIZER}
    resumed = run_join(src, url, end_of_stream=True)
    assert resumed.records == 0  # restored at the end of the source, nothing re-read
    assert resumed.restored_from is not None
    assert pair_set(url) == pair_set(seed_whole)


def _cut_short(raw: bytes) -> bytes:
    blob = compress_state(raw)
    return blob[:len(blob) // 2]


def test_a_checkpoint_that_does_not_decompress_is_refused(seed_dir, tmp_path):
    """A row whose bytes are not what its serializer says (a zstd frame cut short, zlib bytes
    under the zstd name) stops the run before anything is read or written."""
    src, _ = seed_dir
    for name, spoil in [("cut", lambda s, raw: (s, _cut_short(raw))),
                        ("zlib bytes", lambda s, raw: (s, zlib.compress(raw)))]:
        url = f"sqlite:///{tmp_path}/{name.replace(' ', '_')}.sqlite"
        run_join(src, url, checkpoint_every=1000)
        _rewrite_checkpoints(url, spoil)
        store = Store(url)
        try:
            with pytest.raises(CheckpointMismatch, match="cannot be decoded"):
                read_checkpoint(store, "join", "interval_join/1")
        finally:
            store.dispose()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(
    st.binary(max_size=64),
    st.integers(0, 3 * 1024).map(lambda n: b"{\"id\":\"pay-%06d\"}," % n * n),
    st.sampled_from([4095, 4096, 4097, 8192, 12289]).flatmap(
        lambda n: st.binary(min_size=n, max_size=n))),
    level=st.sampled_from([1, 3]))
def test_state_is_one_zstd_frame_that_records_its_size(data, level, monkeypatch):
    """`compress_state` gives one zstd frame that records the state's size (what restore reads
    back in one call), on one thread or, above COMPRESS_THREADS_ABOVE, on several: empty,
    around the threshold, incompressible bytes."""
    import zstandard

    from streaming.host import checkpoints
    monkeypatch.setattr(checkpoints, "COMPRESS_THREADS_ABOVE", 1 << 12)  # threads, fast
    blob = checkpoints.compress_state(data, level)
    assert zstandard.frame_content_size(blob) == len(data)
    assert decompressed_state({"id": 1, "serializer": checkpoints.SERIALIZER,
                               "state": blob}) == data


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=6) | st.integers(-5, 5), inner, max_size=4),
    max_leaves=20)


@given(state=st.dictionaries(st.text(max_size=6), _JSON_VALUES, max_size=5))
@example(state={"operator": {"rows": {"a": [1, {2: "x"}]}}})
def test_a_state_is_encoded_as_with_non_text_keys_allowed(state):
    """`encode_state` tries the faster encoding without orjson's OPT_NON_STR_KEYS first: a
    state whose maps are keyed by text gives the same bytes, and one with a number key
    anywhere is still written (its key as text), as it always was."""
    from streaming.host.checkpoints import encode_state
    assert encode_state(state) == orjson.dumps(state, option=orjson.OPT_NON_STR_KEYS)


def test_a_state_that_json_cannot_hold_is_still_refused():
    from streaming.host.checkpoints import encode_state
    with pytest.raises(TypeError):
        encode_state({"operator": {"rows": {1: object()}}})


# A full checkpoint of 1,000 bytes: 100 of the host's, and 100 entries of 9 bytes each (the
# operator's whole parts empty).
_FULL = CheckpointChain(journal_seq=1, records_total=100, full_bytes=1000, delta_bytes=0,
                        entry_bytes=9.0, host_bytes=100)


def _after(deltas: int) -> CheckpointChain:
    return replace(_FULL, delta_bytes=deltas)


def test_a_steady_state_is_written_full_once_its_deltas_add_up_to_the_ratio_times_it():
    # 100 entries now, as then: the state is 1,000 bytes; restore may read twice that.
    assert not _after(1000).wants_full(1.0, 0, 100)
    assert _after(1001).wants_full(1.0, 0, 100)
    assert not _after(250).wants_full(0.25, 0, 100)
    assert _after(251).wants_full(0.25, 0, 100)


def test_a_growing_state_is_not_written_full_for_the_entries_its_deltas_added():
    # 450 entries added since (4,050 bytes of deltas): restore reads the state and no more.
    assert not _after(4050).wants_full(1.0, 0, 550)
    # ... until the deltas' rewrites add up: more than twice the 5,050 bytes it now takes.
    assert not _after(9100).wants_full(1.0, 0, 550)
    assert _after(9101).wants_full(1.0, 0, 550)
    # The operator's whole parts count as they are encoded now.
    assert not _after(9101).wants_full(1.0, 10, 550)


def test_a_shrunken_state_is_written_full_at_once():
    # 10 entries left (190 bytes): the full checkpoint alone is over twice that.
    assert _FULL.wants_full(1.0, 0, 10)
    assert not _FULL.wants_full(1.0, 0, 50)  # 550 bytes: 1,000 is within twice that


def test_every_checkpoint_is_full_with_a_ratio_of_zero_and_no_size_per_entry_falls_back():
    assert _FULL.wants_full(0.0, 0, 100)
    # A full checkpoint that held no entry gives no size per entry: its deltas against it.
    empty = replace(_FULL, entry_bytes=0.0)
    assert not empty.wants_full(1.0, 0, 500) and empty.wants_full(1.0, 0, 0) is False
    assert replace(empty, delta_bytes=1000).wants_full(1.0, 0, 500)


@pytest.mark.parametrize("first,second", [
    ({"wm": 1, "model": None}, {"ids": {"a": [1, "h", 3]}, "by_merchant": {"m": ["a"]}}),
    ({}, {"ids": {}}), ({"wm": 1}, {}), ({}, {}),
    ({"text": "with \"quotes\", commas, {braces}"}, {"n": [{}, [], ""]})])
def test_a_full_operator_state_is_its_whole_parts_and_named_maps_spliced(first, second):
    """The bytes a full checkpoint writes for an operator (`dump_checkpoint`): those of its
    whole parts and of its named maps, encoded apart and joined, are the bytes of encoding the
    snapshot in one piece."""
    joined = _joined(orjson.dumps(first), orjson.dumps(second))
    assert joined == orjson.dumps({**first, **second})
    assert orjson.dumps({"operator": orjson.Fragment(joined), "seq": 3}) == orjson.dumps(
        {"operator": {**first, **second}, "seq": 3})
