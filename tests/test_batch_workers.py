"""Scale-out of a run over a file log (`run --worker I/N` without `--follow`): two workers,
each over its share of the partitions, on one store at the same time, write what one worker
writes; each keeps its journal and checkpoints under its own key; a store kept by one worker
count refuses another."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streaming.store.ops import Store, loads
from tests.followutil import (ENV, assert_kept_per_worker, assert_same_sink, cli,
                              pipeline_args, recording_positions, rekeyed_recording,
                              sink_positions, within_lateness)

RUN = ["--batch-size", "50", "--checkpoint-every", "200", "--end-of-stream", "--quiet"]


@pytest.mark.parametrize("pipeline", ["join", "ledger", "receipts"])
def test_two_workers_over_a_file_log_give_the_sink_of_one(pipeline, tmp_path):
    rec, keyed = str(tmp_path / "rec"), str(tmp_path / "keyed")
    within_lateness(pipeline, rec)
    rekeyed_recording(rec, keyed, pipeline, 4)
    extra = pipeline_args(pipeline, tmp_path)
    one, two = f"sqlite:///{tmp_path}/one.sqlite", f"sqlite:///{tmp_path}/two.sqlite"
    cli(pipeline, "run", "--source", keyed, "--store", one, *RUN, *extra)
    Store(two).dispose()  # created before two processes open it at once
    procs = [subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", pipeline, "run", "--source", keyed,
         "--store", two, *RUN, *extra, "--worker", f"{i}/2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV})
        for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert_same_sink(two, one, pipeline)
    # Every position of the recording archived exactly once (the ledger's categories, which
    # both workers read whole, once too), and accounting closes.
    got = sink_positions(two, pipeline)
    assert sorted(got) == sorted(set(got)) and set(got) == recording_positions(keyed)
    store = Store(two)
    try:
        # Each worker read only its own partitions of the keyed topics (p % 2 == I) and the
        # reference topics whole.
        from streaming.assignment import BROADCAST_TOPICS
        for i in range(2):
            read = {tps for entry in store.journal_after(f"{pipeline}@{i}/2", 0)
                    for tps in loads(entry["ranges"])}
            keyed_read = {tps for tps in read
                          if tps.split(":")[0] not in BROADCAST_TOPICS.get(pipeline, ())}
            assert keyed_read and all(int(tps.split(":")[1]) % 2 == i for tps in keyed_read)
        assert_kept_per_worker(store, pipeline, 2)
    finally:
        store.dispose()


def test_a_store_kept_by_one_worker_refuses_two(tmp_path):
    rec, keyed = str(tmp_path / "rec"), str(tmp_path / "keyed")
    within_lateness("join", rec)
    rekeyed_recording(rec, keyed, "join", 4)
    store = f"sqlite:///{tmp_path}/ops.sqlite"
    cli("join", "run", "--source", keyed, "--store", store, *RUN)
    res = cli("join", "run", "--source", keyed, "--store", store, *RUN, "--worker", "0/2",
              check=False)
    assert res.returncode == 6 and "join" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_a_run_is_refused_while_a_live_process_holds_its_key(store_url, tmp_path):
    """A bounded run takes its key's lease as a following worker does: while another live
    process holds `join@0/2` (or `join`), a run under that key exits 6 naming the key and
    writes nothing; the other worker's key is free meanwhile, and a run releases its lease
    when it ends."""
    from sqlalchemy import text

    from streaming.store.lease import Lease
    rec, keyed = str(tmp_path / "rec"), str(tmp_path / "keyed")
    within_lateness("join", rec)
    rekeyed_recording(rec, keyed, "join", 4)
    store = Store(store_url)
    try:
        for key, worker in (("join@0/2", ["--worker", "0/2"]), ("join", [])):
            held = Lease(store.engine, key).acquire()
            try:
                res = cli("join", "run", "--source", keyed, "--store", store_url, *RUN,
                          *worker, check=False)
                assert res.returncode == 6, res.stdout + res.stderr
                assert f"assignment {key} is held by a live worker" in res.stderr
                assert "Traceback" not in res.stderr
                assert list(store.journal_after(key, 0)) == []
                assert store.rows(text("SELECT id FROM runs WHERE pipeline = :k")
                                  .bindparams(k=key)) == []
            finally:
                held.release()
        held = Lease(store.engine, "join@0/2").acquire()
        try:  # another worker's key is not held by it
            cli("join", "run", "--source", keyed, "--store", store_url, *RUN, "--worker", "1/2")
        finally:
            held.release()
        cli("join", "run", "--source", keyed, "--store", store_url, *RUN, "--worker", "0/2")
        assert list(store.journal_after("join@0/2", 0))
        # Released when the run ended: the key can be taken again, and the row says so.
        Lease(store.engine, "join@0/2").acquire().release()
        rows = store.rows(text("SELECT lease_key, released_at FROM worker_leases "
                               "ORDER BY lease_key"))
        assert [r["lease_key"] for r in rows] == ["join", "join@0/2", "join@1/2"]
        assert all(r["released_at"] is not None for r in rows)
    finally:
        store.dispose()
