"""One definition per rule, held equal where the warehouse restates it in SQL: on a seed run
(the join seed and the ledger seed in one store: quarantined, duplicate, stale and routed
records), dbt's `rec_source_ranges` gives exactly `Store.accounting` per pipeline, topic and
partition, and dbt's `diff_pair_keys` gives exactly `join_diff.diff_pairs` for a candidate
whose base has added, retired and revised pairs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from riskstream_tools.workloads.ledger_seed import generate as ledger_generate
from streaming import join_rebuild as R
from streaming.join_diff import diff_pairs
from streaming.join_generations import pair_diff
from streaming.operators.base import BUCKETS
from streaming.store.ops import Store
from tests.ledgerutil import run_ledger
from tests.orchestration_helpers import live_seed

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.dagster


def test_diff_pairs_by_logical_pair():
    def row(p, s, pid, rule="r1"):
        return {"payment_id": p, "signal_id": s, "rule_version": rule, "pair_id": pid}
    before = [row("p1", "s1", "a"), row("p1", "s2", "b"), row("p2", "s1", "c"),
              row("p3", "s1", "d", "r0")]
    after = [row("p1", "s1", "a"), row("p1", "s2", "b2"), row("p3", "s1", "d"),
             row("p4", "s9", "e")]
    diff = diff_pairs(before, after)
    assert [(b, a["pair_id"]) for b, a in diff["added"]] == [(None, "d"), (None, "e")]
    assert [(b["pair_id"], a) for b, a in diff["retired"]] == [("c", None), ("d", None)]
    assert [(b["pair_id"], a["pair_id"]) for b, a in diff["revised"]] == [("b", "b2")]


@pytest.fixture(scope="module")
def warehouse(seed_dir, tmp_path_factory):
    """The join seed and the ledger seed run into one SQLite store, ingested, a candidate for
    the join's queued correction written, and the dbt models built."""
    from orchestration.warehouse import ingest, write_candidate

    tmp = tmp_path_factory.mktemp("definitions")
    url = f"sqlite:///{tmp}/ops.sqlite"
    live_seed(seed_dir[0], url)
    ledger_src = tmp / "ledger_seed"
    ledger_generate(11, str(ledger_src), payments=300)
    run_ledger(str(ledger_src), url, end_of_stream=True)
    store = Store(url)
    (entry_set,) = R.entry_sets(store)
    cand = R.build_candidate(store, entry_set.entry_ids)
    # Beside the correction's own changes, one pair of each change for sure: a pair only in
    # the candidate, one only in the base, and one in both under another pair id.
    t = cand.pairs[0]
    cand.pairs = [*cand.pairs, {**t, "signal_id": "sig-new", "pair_id": "pair-new"},
                  {**t, "signal_id": "sig-rev", "pair_id": "pair-rev-2"}]
    cand.base_pairs = [*cand.base_pairs, {**t, "signal_id": "sig-gone", "pair_id": "pair-gone"},
                       {**t, "signal_id": "sig-rev", "pair_id": "pair-rev-1"}]
    path = str(tmp / "warehouse.duckdb")
    with duckdb.connect(path) as con:
        ingest(store, con)
        write_candidate(con, cand, "definitions-run")
    env = {**os.environ, "RISKSTREAM_DUCKDB_PATH": path, "DO_NOT_TRACK": "1"}
    dbt = Path(sys.executable).with_name("dbt")
    project = ROOT / "dbt_project"
    out = subprocess.run([str(dbt), "run", "--select", "+rec_source_ranges", "+diff_pair_keys",
                          "--project-dir", str(project), "--profiles-dir", str(project),
                          "--target-path", str(tmp / "target"), "--log-path", str(tmp / "logs")],
                         env=env, capture_output=True, text=True, timeout=300, cwd=project)
    assert out.returncode == 0, out.stdout[-4000:]
    yield store, cand, path
    store.dispose()


def test_dbt_accounting_equals_store_accounting(warehouse):
    store, _, path = warehouse
    with duckdb.connect(path, read_only=True) as con:
        cols = ["pipeline", "topic", "partition_no", "first_offset", "last_offset", "read",
                *BUCKETS, "closes"]
        dbt_rows = [dict(zip(cols, r, strict=True)) for r in con.execute(
            f"SELECT {', '.join(cols)} FROM main.rec_source_ranges "
            "ORDER BY pipeline, topic, partition_no").fetchall()]
    py_rows = []
    for pipeline in ("join", "ledger"):
        for r in store.accounting(pipeline):
            py_rows.append({"pipeline": pipeline, "partition_no": r.pop("partition"), **r})
    py_rows.sort(key=lambda r: (r["pipeline"], r["topic"], r["partition_no"]))
    assert dbt_rows == py_rows
    # The seed run exercises every bucket, and the accounting closes.
    for bucket in BUCKETS:
        assert sum(r[bucket] for r in py_rows) > 0, bucket
    assert all(r["closes"] for r in py_rows)


def test_dbt_pair_diff_equals_python_pair_diff(warehouse):
    _, cand, path = warehouse
    with duckdb.connect(path, read_only=True) as con:
        dbt_rows = con.execute(
            "SELECT change, payment_id, signal_id, rule_version, current_pair_id, "
            "candidate_pair_id FROM main.diff_pair_keys WHERE change <> 'unchanged' "
            "ORDER BY change, payment_id, signal_id, rule_version").fetchall()
    py_rows = sorted(
        (change, (a or b)["payment_id"], (a or b)["signal_id"], (a or b)["rule_version"],
         b and b["pair_id"], a and a["pair_id"])
        for change, rows in diff_pairs(cand.base_pairs, cand.pairs).items()
        for b, a in rows)
    assert dbt_rows == py_rows
    assert {c for c, *_ in py_rows} == {"added", "retired", "revised"}
    # The generations' view of the same diff lists the same logical pairs.
    gen = pair_diff(cand)
    assert sorted((c, r["payment_id"], r["signal_id"]) for c, rows in gen.items()
                  for r in rows) == [(c, p, s) for c, p, s, *_ in py_rows]
