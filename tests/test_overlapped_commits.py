"""Overlapped commits (RunSettings.overlap_commits): a batch commits in the writer process while
the worker runs the next one. An overlapped run leaves exactly what a serial run leaves, its
crash points, checkpoints and acks come in the serial order (each after its batch is in the
store), a crash at any point recovers to the serial result, and a failed commit surfaces in the
worker with nothing after it acknowledged or checkpointed."""

from __future__ import annotations

import os
import time

import orjson
import pytest
from sqlalchemy import select

from streaming.host import loop as host_loop
from streaming.host.checkpoints import decompressed_state
from streaming.host.crash import CRASH_POINTS, CrashInjector
from streaming.host.settings import RunSettings
from streaming.store import schema as S
from streaming.store.ops import Store
from streaming.store.errors import StoreErrorElsewhere

from .conftest import FreshPostgres, need_service
from .joinutil import pairs, run_join
from .receiptsutil import riskstream

# Small batches against a checkpoint every three: two of every three batches overlap.
RUN = {"checkpoint_every": 120, "batch_size": 40, "end_of_stream": True}
ARGS = ["--checkpoint-every", "120", "--batch-size", "40", "--end-of-stream", "--quiet"]


@pytest.fixture
def fresh_pg():
    need_service("PostgreSQL", "127.0.0.1", 5432)
    pg = FreshPostgres()
    yield pg.new_url
    pg.drop_all()


@pytest.fixture(scope="module")
def serial_reference(seed_dir):
    """What an uninterrupted serial CLI run of the seed leaves (`outputs`), on PostgreSQL. Every
    crash case compares with it, so it is run once for the module; nothing writes to it after."""
    need_service("PostgreSQL", "127.0.0.1", 5432)
    src, _ = seed_dir
    pg = FreshPostgres()
    try:
        url = pg.new_url()
        riskstream("join", "run", "--source", src, "--store", url, "--serial-commits", *ARGS)
        yield outputs(url)
    finally:
        pg.drop_all()


def outputs(url: str) -> dict:
    """Everything a run leaves that must not depend on how its commits were scheduled (the
    wall-clock columns left out: creation times, commit times, checkpoint durations)."""
    store = Store(url)
    try:
        facts = [(f["fact_key"], f["kind"], f["logical_key"], f["status"], f["payload_hash"],
                  f["payload"], f["predecessor_key"], f["batch_seq"], f["generation_id"])
                 for f in store.facts("join")]
        view = sorted(tuple(sorted(r.items())) for kind in ("pair", "outcome")
                      for r in store.current("join", kind))
        journal = [{k: v for k, v in e.items() if k not in ("id", "committed_at")}
                   for e in store.journal_after("join", 0)]
        archive = store.rows(select(S.archive).order_by(S.archive.c.batch_seq,
                                                         S.archive.c.topic,
                                                         S.archive.c.partition,
                                                         S.archive.c.offset))
        checkpoints = []
        for ck in store.rows(select(S.checkpoints).order_by(S.checkpoints.c.id)):
            checkpoints.append((ck["journal_seq"], ck["serializer"], ck["state_schema"],
                                orjson.loads(decompressed_state(ck))))
        return {
            "facts": facts, "view": view, "journal": journal,
            "archive": [{k: v for k, v in r.items() if k != "id"} for r in archive],
            "quarantine": [{k: v for k, v in r.items() if k != "id"}
                           for r in store.quarantine_rows("join")],
            "accounting": store.accounting("join"),
            "checkpoints": checkpoints,
            "sink_exceptions": store.sink_exception_rows("join"),
            "pair_ids": sorted(r["pair_id"] for r in pairs(url, include_retired=True)),
        }
    finally:
        store.dispose()


def test_commits_overlap_unless_told_and_the_run_records_the_choice():
    for url in ("postgresql://h/db", "sqlite:///x.sqlite"):
        assert RunSettings(source="x", store_url=url).overlap_commits is True
        assert RunSettings(source="x", store_url=url).describe()["overlap_commits"] is True
    told = RunSettings(source="x", store_url="postgresql://h/db", overlap_commits=False)
    assert told.describe()["overlap_commits"] is False
    assert RunSettings(source="x", store_url="x").describe()["batches_behind_checkpoint"] == 4
    waits = RunSettings(source="x", store_url="x", batches_behind_checkpoint=0)
    assert waits.describe()["batches_behind_checkpoint"] == 0


def test_a_run_of_one_batch_or_on_an_in_memory_store_starts_no_writer(seed_dir, store_factory):
    src, _ = seed_dir
    one = run_join(src, store_factory(), end_of_stream=True)  # the seed fits in one batch
    assert one.batches == 2 and one.overlapped_batches == 0 and one.writer_pid is None
    memory = run_join(src, "sqlite://", **RUN)
    assert memory.batches > 3 and memory.overlapped_batches == 0 and memory.writer_pid is None


def test_overlapped_run_leaves_what_a_serial_run_leaves(seed_dir, store_factory):
    """On either store (SQLite runs it only when asked to)."""
    src, _ = seed_dir
    serial_url, overlap_url = store_factory(), store_factory()
    serial = run_join(src, serial_url, overlap_commits=False, **RUN)
    overlapped = run_join(src, overlap_url, overlap_commits=True, **RUN)
    assert serial.overlapped_batches == serial.overlapped_checkpoints == 0
    assert overlapped.overlapped_batches > 0
    # The run's last batch and the end of stream commit serially, and the run's last
    # checkpoint is written by the worker; every other checkpoint by the writer process while
    # the next batch runs.
    assert overlapped.overlapped_batches == overlapped.batches - 2
    assert overlapped.batches == serial.batches
    assert overlapped.overlapped_checkpoints == overlapped.checkpoints - 1 > 0
    # The batch after each of those checkpoints went to the writer behind it (and the one
    # after that, unless a checkpoint was due after it).
    assert overlapped.queued_behind_checkpoint >= overlapped.overlapped_checkpoints - 1 > 0
    for field in ("records", "facts_written", "facts_noop", "facts_rejected", "checkpoints"):
        assert getattr(overlapped, field) == getattr(serial, field), field
    assert overlapped.sink_commit_s > 0
    a, b = outputs(serial_url), outputs(overlap_url)
    assert a["facts"] and a["checkpoints"] and a["pair_ids"]
    assert all(r["closes"] for r in b["accounting"])
    for key in a:
        assert b[key] == a[key], key


def test_the_checkpoint_stage_counts_the_workers_own_serialization_apart(
        seed_dir, store_factory, monkeypatch):
    """`checkpoint_dump_s`: of the checkpoint stage, the worker's taking and serializing of
    the state, every checkpoint's, whether the worker or the writer process writes it."""
    src, _ = seed_dir
    real = host_loop.dump_checkpoint
    pause = 0.02

    def slow_dump(*args, **kwargs):
        time.sleep(pause)
        return real(*args, **kwargs)

    monkeypatch.setattr(host_loop, "dump_checkpoint", slow_dump)
    for overlap in (False, True):
        res = run_join(src, store_factory(), overlap_commits=overlap, **RUN)
        assert res.checkpoints > 1, overlap
        assert res.checkpoint_dump_s >= pause * res.checkpoints, overlap
        assert res.checkpoint_dump_s <= res.stage_seconds["checkpoint"], overlap


class _Recorder:
    """The order of what a run does that others can see: each commit as the worker learns it
    ended (with the newest batch the store holds at that moment), crash points, checkpoints
    and acks, each with its journal batch number."""

    def __init__(self, monkeypatch) -> None:
        self.events: list[tuple] = []
        rec = self
        real_committed = host_loop.Worker._committed
        real_checkpoint = host_loop.Worker._checkpoint
        real_open = host_loop.Worker._open_source
        real_hit = CrashInjector.hit

        def committed(worker, timed, seq, *args, **kwargs):
            rec.events.append(("commit", seq, worker.store.last_journal_seq(worker.key)))
            real_committed(worker, timed, seq, *args, **kwargs)

        def checkpoint(worker, *args):
            rec.events.append(("checkpoint", worker.seq))
            real_checkpoint(worker, *args)

        def open_source(worker):
            source = real_open(worker)
            real_ack = source.ack

            def ack(ranges):
                rec.events.append(("ack", tuple(sorted(ranges.items()))))
                real_ack(ranges)
            source.ack = ack
            return source

        def hit(injector, point):
            rec.events.append(("crash-point", point))
            real_hit(injector, point)

        monkeypatch.setattr(host_loop.Worker, "_committed", committed)
        monkeypatch.setattr(host_loop.Worker, "_checkpoint", checkpoint)
        monkeypatch.setattr(host_loop.Worker, "_open_source", open_source)
        monkeypatch.setattr(CrashInjector, "hit", hit)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_crash_points_checkpoints_and_acks_keep_the_serial_order(seed_dir, fresh_pg,
                                                                  monkeypatch):
    src, _ = seed_dir
    serial = _Recorder(monkeypatch)
    first = run_join(src, fresh_pg(), overlap_commits=False, **RUN)
    monkeypatch.undo()  # the second recorder wraps the real functions, not the first one
    overlapped = _Recorder(monkeypatch)
    # Every batch waits for the checkpoint before it (the order batches queued behind one
    # keep is the next test's).
    res = run_join(src, fresh_pg(), overlap_commits=True, batches_behind_checkpoint=0, **RUN)
    assert res.overlapped_batches > 0 and res.queued_behind_checkpoint == 0
    assert len(serial.events) > 20
    # Every commit is in the store (and no later batch is) when the worker goes on past it.
    commits = [e for e in serial.events if e[0] == "commit"]
    assert commits and all(seq == newest for _, seq, newest in commits)
    assert overlapped.events == serial.events
    # The overlapped run's commits ran in a process of their own, ended with the run.
    assert first.writer_pid is None
    assert res.writer_pid is not None and res.writer_pid != os.getpid()
    assert _gone(res.writer_pid)
    assert first.writer_peak_rss_mib is None
    assert res.writer_peak_rss_mib is not None and res.writer_peak_rss_mib > 10
    # What its commits cost it, read from /proc before it ended: the serial run had none.
    assert first.writer_cpu_s is None and first.writer_written_mib is None
    assert res.writer_cpu_s is not None and res.writer_cpu_s > 0
    assert res.writer_written_mib is not None


def test_batches_queued_behind_a_checkpoint_commit_after_it_and_are_acked_in_order(
        seed_dir, fresh_pg, monkeypatch):
    """A batch handed to the writer behind a checkpoint still being written commits after it:
    when the worker learns of any commit, every checkpoint due before that batch is in the
    store. The acks come in the serial run's order, each after its own commit, and the store
    ends as the serial run's does."""
    src, _ = seed_dir
    serial = _Recorder(monkeypatch)
    serial_url = fresh_pg()
    run_join(src, serial_url, overlap_commits=False, **RUN)
    monkeypatch.undo()
    events: list[tuple] = []
    real_committed = host_loop.Worker._committed

    def committed(worker, timed, seq, *args, **kwargs):
        kept = [c["journal_seq"] for c in worker.store.checkpoints("join")]
        events.append((seq, worker.store.last_journal_seq("join"), max(kept, default=0)))
        real_committed(worker, timed, seq, *args, **kwargs)

    monkeypatch.setattr(host_loop.Worker, "_committed", committed)
    queued = _Recorder(monkeypatch)  # wraps the committed hook above
    url = fresh_pg()
    res = run_join(src, url, overlap_commits=True, **RUN)
    assert res.queued_behind_checkpoint > 0
    due = [c[0] for c in outputs(serial_url)["checkpoints"]]
    assert due and [e[0] for e in events] == sorted(e[0] for e in events)
    for seq, newest, newest_checkpoint in events:
        assert newest >= seq
        assert newest_checkpoint >= max([c for c in due if c < seq], default=0), seq
    acks = [e for e in queued.events if e[0] == "ack"]
    assert acks == [e for e in serial.events if e[0] == "ack"]
    # Each ack after its own batch's commit: the n-th ack follows the n-th commit.
    order = [e[0] for e in queued.events if e[0] in ("commit", "ack")]
    commits_seen = 0
    for kind in order:
        if kind == "commit":
            commits_seen += 1
        else:
            commits_seen -= 1
            assert commits_seen >= 0
    a, b = outputs(serial_url), outputs(url)
    for key in a:
        assert b[key] == a[key], key


def test_a_batch_queued_behind_a_checkpoint_that_fails_surfaces_with_nothing_after_acked(
        seed_dir, fresh_pg, monkeypatch):
    src, _ = seed_dir
    url = fresh_pg()
    _fail_journal_insert(url, 5, "the server went away mid-commit")  # 4 and 5 queue behind 3
    rec = _Recorder(monkeypatch)
    with pytest.raises(StoreErrorElsewhere, match="^store failed: the server went away "):
        run_join(src, url, overlap_commits=True, **RUN)
    assert [e for e in rec.events if e[0] == "commit"] == [("commit", s, s) for s in (1, 2, 3, 4)]
    assert len([e for e in rec.events if e[0] == "ack"]) == 4
    assert [e for e in rec.events if e[0] == "checkpoint"] == [("checkpoint", 3)]
    # Batch 6 went behind them too (its checkpoint settled the queue): refused, not committed.
    _resumes_to_the_serial_result(src, url, fresh_pg, monkeypatch)


def _resumes_to_the_serial_result(src, url: str, fresh_pg, monkeypatch) -> None:
    """After batch 5's refused commit: the store holds batches 1-4 and the checkpoint at 3,
    and once the database takes batch 5 again the next run ends where a serial run ends."""
    store = Store(url)
    try:
        assert store.last_journal_seq("join") == 4
        assert [c["journal_seq"] for c in store.checkpoints("join")] == [3]
        with store.engine.begin() as conn:
            conn.exec_driver_sql("DROP TRIGGER refuse_batch ON journal")
    finally:
        store.dispose()
    monkeypatch.undo()
    run_join(src, url, overlap_commits=True, **RUN)
    reference = fresh_pg()
    run_join(src, reference, overlap_commits=False, **RUN)
    got, want = outputs(url), outputs(reference)
    for key in ("facts", "view", "accounting", "pair_ids", "sink_exceptions"):
        assert got[key] == want[key], key


def _fail_journal_insert(url: str, seq: int, message: str) -> None:
    """A trigger that aborts the transaction writing batch `seq`'s journal row: a commit the
    database itself refuses, in whichever process runs it."""
    store = Store(url)
    try:
        with store.engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE FUNCTION refuse_batch() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN RAISE EXCEPTION '{message}'; END $$")
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse_batch BEFORE INSERT ON journal FOR EACH ROW "
                f"WHEN (NEW.seq = {seq}) EXECUTE FUNCTION refuse_batch()")
    finally:
        store.dispose()


def test_a_failed_commit_surfaces_and_nothing_after_it_is_acked(seed_dir, fresh_pg,
                                                                 monkeypatch):
    src, _ = seed_dir
    url = fresh_pg()
    failing_seq = 5  # batch 6 ends in a checkpoint; 4 and 5 overlap
    _fail_journal_insert(url, failing_seq, "the server went away mid-commit")
    rec = _Recorder(monkeypatch)
    # The database's own error, said in one line as any store failure is (no statement).
    with pytest.raises(StoreErrorElsewhere, match="^store failed: the server went away "
                                                  "mid-commit .*the batch in hand was not"):
        run_join(src, url, overlap_commits=True, batches_behind_checkpoint=0, **RUN)
    commits = [e for e in rec.events if e[0] == "commit"]
    assert commits == [("commit", s, s) for s in (1, 2, 3, 4)]
    acks = [e for e in rec.events if e[0] == "ack"]
    assert len(acks) == 4  # batches 1-4, each after its own commit
    last_commit = rec.events.index(("commit", 4, 4))
    after = rec.events[last_commit + 1:]
    # Batch 4's own steps, then batch 5 reached its candidate point and nothing more.
    assert after == [("crash-point", "after-sink-write"), ("crash-point", "before-ack"),
                     acks[-1], ("crash-point", "after-candidate")]
    assert [e for e in rec.events if e[0] == "checkpoint"] == [("checkpoint", 3)]
    # The next run resumes from what was committed and ends where a serial run ends.
    _resumes_to_the_serial_result(src, url, fresh_pg, monkeypatch)


@pytest.mark.parametrize("point,k", [(p, k) for p in CRASH_POINTS for k in (1, 2, 4)
                                     if not (p == "during-checkpoint" and k == 4)])
def test_crash_with_overlap_recovers_to_the_serial_result(point, k, seed_dir, fresh_pg,
                                                          serial_reference):
    src, _ = seed_dir
    url = fresh_pg()
    crashed = riskstream("join", "run", "--source", src, "--store", url, "--overlap-commits",
                         *ARGS, "--crash-at", f"{point}:{k}", check=False)
    assert crashed.returncode == 137, crashed.stderr
    assert f"crash injected at {point}:{k}" in crashed.stderr
    resumed = riskstream("join", "run", "--source", src, "--store", url, "--overlap-commits",
                         *ARGS)
    assert resumed.returncode == 0, resumed.stderr
    got, want = outputs(url), serial_reference
    for key in ("facts", "view", "accounting", "pair_ids", "sink_exceptions", "quarantine"):
        assert got[key] == want[key], key
    assert all(r["closes"] for r in got["accounting"])
