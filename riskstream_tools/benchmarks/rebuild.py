"""Scenario `rebuild-duckdb`: the candidate rebuild of one day of N payments and signals
(10,000 merchants, one with 1 % of the traffic), as the rebuild runs it: the bucketed DuckDB
equi-join on (merchant, 10-minute bucket) with the exact bounds as a filter, timed against the
plain merchant equi-join with a BETWEEN filter in the same run, which is the reference (both
must give the same pairs: `reference_equal`; `ratio` is plain seconds over bucketed seconds).
Then the candidate's pair ids (the live path's `pair_id`), and the diff of a corrected
candidate (0.1 % of the payments corrected to a time 6 minutes later) against the current
pairs.

The SQL is timed apart from dbt and Dagster start-up; `repair_run_s` is one whole repair run on
the join seed (Dagster in-process, ingest, dbt build of the diff models, publication); it is
left out when RISKSTREAM_BENCH_REPAIR_RUN=0."""

from __future__ import annotations

from typing import Any

import os
import time

from streaming.join_rebuild import join_sql
from streaming.operators.interval_join import RULE_VERSION, pair_id
from streaming.timeutil import US_PER_DAY, US_PER_MIN

DAY_START = 20_367 * US_PER_DAY  # 2025-10-06
MERCHANTS = 10_000
HOT_SHARE = 0.01
REPAIR_RUN_ENV = "RISKSTREAM_BENCH_REPAIR_RUN"


def _make_side(con, name: str, n: int, seed: float) -> None:
    con.execute(f"SELECT setseed({seed})")
    con.execute(f"""
        CREATE OR REPLACE TABLE {name} AS
        SELECT i::INTEGER AS idx,
               'merchant-' || CASE WHEN random() < {HOT_SHARE} THEN 0
                                   ELSE floor(random() * {MERCHANTS})::INTEGER END AS merchant,
               ({DAY_START} + floor(random() * {US_PER_DAY}))::BIGINT AS t
        FROM range({n}) r(i)""")


def _one(con, sql: str) -> tuple[Any, ...]:
    """The single row a query must return."""
    row = con.execute(sql).fetchone()
    if row is None:
        raise RuntimeError(f"no row from: {sql[:80]}")
    return row


def _timed(con, sql: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    con.execute(f"CREATE OR REPLACE TEMP TABLE _out AS {sql}")
    elapsed = time.perf_counter() - t0
    return elapsed, _one(con, "SELECT count(*) FROM _out")[0]


def rebuild_duckdb(workdir: str, n: int) -> dict:
    import duckdb

    from .scenarios import _peak_rss_mib, result_fields
    repair_run = os.environ.get(REPAIR_RUN_ENV, "1") != "0"
    os.makedirs(workdir, exist_ok=True)
    con = duckdb.connect()
    pays, sigs = n // 2, n - n // 2
    _make_side(con, "pay", pays, 0.41)
    _make_side(con, "sig", sigs, 0.73)
    bucketed_s, bucketed_pairs = _timed(con, join_sql("pay", "sig", bucketed=True))
    con.execute("CREATE OR REPLACE TEMP TABLE bucketed AS SELECT * FROM _out")
    plain_s, plain_pairs = _timed(con, join_sql("pay", "sig", bucketed=False))
    mismatched = _one(
        con, "SELECT count(*) FROM ((SELECT * FROM bucketed EXCEPT SELECT * FROM _out) UNION ALL "
        "(SELECT * FROM _out EXCEPT SELECT * FROM bucketed))")[0]

    # Pair ids of the candidate, with the live operator's identity function.
    t0 = time.perf_counter()
    ids = [pair_id(RULE_VERSION, f"pay-{p}", 1, f"risk-{s}", 1)
           for p, s in con.execute("SELECT pay_idx, sig_idx FROM bucketed").fetchall()]
    ids_s = time.perf_counter() - t0

    # A corrected candidate: every 1000th payment moves 6 minutes later (revision 2).
    con.execute(f"""CREATE OR REPLACE TABLE pay2 AS
        SELECT idx, merchant, CASE WHEN idx % 1000 = 0 THEN t + {6 * US_PER_MIN} ELSE t END AS t,
               CASE WHEN idx % 1000 = 0 THEN 2 ELSE 1 END AS rev FROM pay""")
    t0 = time.perf_counter()
    con.execute(f"CREATE OR REPLACE TEMP TABLE cand AS {join_sql('pay2', 'sig', bucketed=True)}")
    diff = _one(con, """
        WITH c AS (SELECT c.pay_idx, c.sig_idx, p.rev FROM cand c JOIN pay2 p ON p.idx = c.pay_idx),
        j AS (SELECT c.rev AS new_rev, b.pay_idx AS old_pay
              FROM c FULL OUTER JOIN bucketed b
                ON c.pay_idx = b.pay_idx AND c.sig_idx = b.sig_idx)
        SELECT count(*) FILTER (WHERE old_pay IS NULL) AS added,
               count(*) FILTER (WHERE new_rev IS NULL) AS retired,
               count(*) FILTER (WHERE old_pay IS NOT NULL AND new_rev = 2) AS revised
        FROM j""")
    diff_s = time.perf_counter() - t0
    cand_pairs = _one(con, "SELECT count(*) FROM cand")[0]
    con.close()
    out = {
        **result_fields("rebuild-duckdb", n, bucketed_s, plain_s, _peak_rss_mib()),
        "reference_equal": mismatched == 0 and bucketed_pairs == plain_pairs > 0,
        "payments": pays, "signals": sigs, "merchants": MERCHANTS,
        "hot_share": HOT_SHARE,
        "bucketed_join_s": round(bucketed_s, 3), "plain_join_s": round(plain_s, 3),
        "pairs": bucketed_pairs, "plain_pairs": plain_pairs, "pair_sets_differ_by": mismatched,
        "pair_ids_s": round(ids_s, 3), "pair_ids": len(ids),
        "corrected_payments": pays // 1000 + (1 if pays % 1000 else 0),
        "candidate_pairs": cand_pairs, "diff_added": diff[0], "diff_retired": diff[1],
        "diff_revised": diff[2], "corrected_rebuild_and_diff_s": round(diff_s, 3),
    }
    if repair_run:
        out["repair_run_s"] = round(_repair_run(workdir), 1)
    return out


def _repair_run(workdir: str) -> float:
    """One repair run end to end on the join seed (the live run is not counted)."""
    from orchestration.repair import run_pending
    from streaming.host.loop import Worker
    from streaming.host.settings import RunSettings
    from streaming.pipelines.join import SPEC

    from ..workloads.join_seed import generate
    src = os.path.join(workdir, "join_seed")
    store = os.path.join(workdir, "repair-bench.sqlite")
    warehouse = os.path.join(workdir, "repair-bench.duckdb")
    # A fresh store and warehouse each time: one left by an earlier run in the same workdir
    # already holds the published generation, and the run would find nothing to repair.
    for path in (store, f"{store}-wal", f"{store}-shm", warehouse, f"{warehouse}.wal"):
        if os.path.exists(path):
            os.remove(path)
    url = f"sqlite:///{store}"
    generate(7, src, 470)
    Worker(SPEC, RunSettings(source=src, store_url=url, end_of_stream=True)).run()
    t0 = time.perf_counter()
    outcomes = run_pending(url, warehouse, log_level="WARNING")
    elapsed = time.perf_counter() - t0
    if not outcomes or not all(o.success for o in outcomes):
        raise RuntimeError("the benchmark's repair run did not publish")
    return elapsed


SCENARIOS = {"rebuild-duckdb": rebuild_duckdb}
SERVICES: tuple[tuple[str, str, int], ...] = ()

