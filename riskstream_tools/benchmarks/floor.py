"""Scenarios `join-sqlite-floor`, `join-postgres-floor` and `receipts-sqlite-floor`: the
store's floor. What the store alone takes to hold a run's rows with the sink's statements, so
the hot-path scenarios' targets can be read against what the store allows on this machine.

The pipeline first runs over the scenario's recording into a SQLite store (off the clock, in a
child of its own; its answer is checked against the family's reference as its hot-path scenario
checks it). Then the rows it committed are written again, batch by batch as it committed them,
into an empty store of the scenario's kind, opened as the writer process opens its store. Each
batch is one transaction of the sink's own statements for a batch whose keys are all new (the
live path): the facts (`ops._sqlite_direct`, `ops._pg_direct`), the current view pointed at
them, the archive rows and the journal entry; the statistics are refreshed where the run
checkpointed (PostgreSQL). Only that is timed. Left out: the worker (reading, decoding, the
operator), the hand-over to the writer process, building each batch's rows, and the quarantine,
queue, metrics and checkpoint rows.

So `seconds` is what these statements cost the store for these rows with nothing else running.
The hot-path scenario's writer runs the same statements and more, beside a worker on the other
core: what the floor leaves out is what the code adds around the store. The stages split it:
the facts, the view, the archive, the journal entry with the commit, the statistics.
`target_events_per_s` is the issue's target for the hot-path scenario
(`floor_of`), and `floor_within_target` says whether the store alone reaches it.
`reference_equal` holds when the run agreed with its reference and the floor's store holds the
same facts (key and hash), archive rows and current view as the run's (`fingerprints`).

Rows are read one batch at a time, between the timed transactions, so memory holds one batch;
`peak_rss_mib` is read right after the writes, before the comparison and the reference."""

from __future__ import annotations

from typing import Any

import json
import subprocess
import sys
import time
from collections.abc import Iterator

from streaming.operators.base import ARCHIVE_ROW

from . import scenarios as sc

# scenario -> (pipeline family, the floor's store, the hot-path scenario it is the floor of)
FLOORS = {"join-sqlite-floor": ("join", "sqlite", "join-sqlite"),
          "join-postgres-floor": ("join", "postgresql", "join-postgres"),
          "receipts-sqlite-floor": ("receipts", "sqlite", "receipts-sqlite")}
# The target rates (events per second) of those scenarios.
TARGETS = {"join-sqlite": 60_000, "join-postgres": 40_000, "receipts-sqlite": 60_000}
# A fact as the floor reads it back from the run's store: the facts table's columns (the floor's
# store draws its own ids, in the same order).
FACT_COLUMNS = ("id", "pipeline", "fact_key", "kind", "logical_key", "status", "payload_hash",
                "payload", "predecessor_key", "batch_seq", "generation_id", "created_at")
JOURNAL_COLUMNS = ("pipeline", "seq", "ranges", "order_runs", "idleness", "records",
                   "clock_us", "end_of_stream", "committed_at")
# The run checkpoints every this many batches (the bench's settings).
BATCHES_PER_CHECKPOINT = sc.CHECKPOINT_EVERY // sc.BATCH_SIZE
# Positions in a fact as read (FACT_COLUMNS): the sink's FactRow (ops.FACT_ROW) is the columns
# up to the predecessor's, then the predecessor's ("" for none, as the sink binds it).
_ROW = slice(FACT_COLUMNS.index("fact_key"), FACT_COLUMNS.index("predecessor_key"))
_PREDECESSOR = FACT_COLUMNS.index("predecessor_key")
_PIPELINE = FACT_COLUMNS.index("pipeline")
_CREATED = FACT_COLUMNS.index("created_at")


class Batch:
    """One committed batch of the run, as read back: its facts (FACT_COLUMNS tuples, the run's
    ids), its archive rows (ARCHIVE_ROW) and its journal entry (JOURNAL_COLUMNS) or None."""

    __slots__ = ("seq", "facts", "archive", "journal")

    def __init__(self, seq: int, facts: list[tuple], archive: list[tuple],
                 journal: tuple | None) -> None:
        self.seq = seq
        self.facts = facts
        self.archive = archive
        self.journal = journal


def run_batches(url: str) -> Iterator[Batch]:
    """The run's batches in the order they committed (batch number), each read when it is
    wanted. One pass over each table in the order the run wrote it (facts by id, archive rows
    by SQLite's rowid), which is batch order: a batch's rows are the next run of its number."""
    from streaming.store.ops import Store
    store = Store(url, schema="existing")
    raw: Any = store.engine.raw_connection()
    cols = ", ".join(f'"{c}"' for c in ARCHIVE_ROW)
    try:
        def query(sql: str) -> Any:
            cur = raw.cursor()
            cur.execute(sql)
            return cur

        seqs = [r[0] for r in query(
            "SELECT batch_seq FROM facts UNION SELECT batch_seq FROM archive "
            "UNION SELECT seq FROM journal ORDER BY 1")]
        facts = _BatchRuns(query(f"SELECT {', '.join(FACT_COLUMNS)} FROM facts ORDER BY id"),
                      FACT_COLUMNS.index("batch_seq"))
        archive = _BatchRuns(query(f"SELECT {cols} FROM archive ORDER BY rowid"),
                        ARCHIVE_ROW.index("batch_seq"))
        journal = {r[1]: tuple(r) for r in query(
            f"SELECT {', '.join(JOURNAL_COLUMNS)} FROM journal")}
        for seq in seqs:
            yield Batch(seq, facts.take(seq), archive.take(seq), journal.get(seq))
    finally:
        raw.close()
        store.dispose()


class _BatchRuns:
    """Rows of a cursor in batch order, handed out a batch at a time (`take`)."""

    def __init__(self, cursor: Any, at: int) -> None:
        self._rows = iter(cursor)
        self._at = at
        self._next: tuple | None = next(self._rows, None)

    def take(self, seq: int | None) -> list[tuple]:
        out: list[tuple] = []
        while self._next is not None and self._next[self._at] == seq:
            out.append(tuple(self._next))
            self._next = next(self._rows, None)
        return out


def write_floor(source_url: str, url: str) -> tuple[float, dict[str, float], dict[str, int]]:
    """Write the run's batches from the store at `source_url` into the empty store at `url`
    (created here) with the sink's own statements, timing only the transactions. (seconds,
    stages, counts)."""
    from streaming.store import ops
    from streaming.store import schema as S
    # Created empty, and opened as the writer process opens its store.
    store = ops.Store(url, batch_writer=True)
    postgres = store.dialect == "postgresql"
    hints = ops.ViewInserts()  # as the writer process's store carries it
    stages = {"facts_s": 0.0, "view_s": 0.0, "archive_s": 0.0, "journal_and_commit_s": 0.0,
              "statistics_s": 0.0}
    counts = {"batches": 0, "facts": 0, "archive_rows": 0}
    seconds = 0.0
    written = 0  # the floor's store is empty and has one writer: its largest fact id
    try:
        for b in run_batches(source_url):
            rows = [(*f[_ROW], f[_PREDECESSOR] or ops.NO_PREDECESSOR) for f in b.facts]
            if rows:  # a batch's facts share their pipeline and their time of writing
                pipeline, created = b.facts[0][_PIPELINE], b.facts[0][_CREATED]
            journal: Any = b.journal
            if journal is not None and postgres:
                journal = (*journal[:7], bool(journal[7]), journal[8])
            t0 = time.perf_counter()
            with store.engine.begin() as conn:
                t_view = None
                if rows:
                    # The live path's write (every key new): the facts, then the view.
                    if postgres:
                        ids = ops._pg_direct(conn, pipeline, rows, b.seq, None, created, False,
                                             hints)
                        if ids is None:  # too few to COPY: the sink's staged path, view too
                            ops.write_facts(conn, pipeline, rows, b.seq, None, hints)
                        else:
                            t_view = time.perf_counter()
                            ops._pg_view_of_batch(conn, pipeline, rows, ids, hints)
                    else:
                        if ops._sqlite_direct(conn, pipeline, rows, b.seq, None, created,
                                              False) is not None:
                            raise RuntimeError(f"batch {b.seq}: a fact key was already there")
                        t_view = time.perf_counter()
                        ops._sqlite_view_of_direct(conn, pipeline, rows, written)
                t1 = time.perf_counter()
                if b.archive:
                    ops._bulk_tuples(conn, S.archive, ARCHIVE_ROW, b.archive, ops.DO_NOTHING)
                t2 = time.perf_counter()
                if journal is not None:
                    ops._bulk_tuples(conn, S.journal, JOURNAL_COLUMNS, [journal],
                                     ops.DO_NOTHING)
            t3 = time.perf_counter()
            if (counts["batches"] + 1) % BATCHES_PER_CHECKPOINT == 0:
                # Where the run checkpointed, the store's statistics as the run refreshed
                # them (PostgreSQL; without them the view's statement plans for an empty
                # table).
                store.refresh_statistics()
            t4 = time.perf_counter()
            stages["statistics_s"] += t4 - t3
            seconds += t4 - t3
            stages["facts_s"] += (t_view or t1) - t0
            stages["view_s"] += t1 - (t_view or t1)
            stages["archive_s"] += t2 - t1
            stages["journal_and_commit_s"] += t3 - t2
            seconds += t3 - t0
            written += len(rows)
            counts["batches"] += 1
            counts["facts"] += len(rows)
            counts["archive_rows"] += len(b.archive)
        # And after the last batch, as the run's final checkpoint did.
        t0 = time.perf_counter()
        store.refresh_statistics()
        last = time.perf_counter() - t0
        stages["statistics_s"] += last
        seconds += last
    finally:
        store.dispose()
    return seconds, stages, counts


def fingerprints(url: str) -> dict[str, tuple[int, int]]:
    """Per table, (rows, an order-free fingerprint of their contents): the facts by key and
    hash, the archive by source position and hash, the current view by logical key, fact key
    and status. The fingerprint sums the rows' hashes (this process's), so two stores compare
    within one process without holding either's rows."""
    from streaming.store.ops import Store
    store = Store(url, schema="existing")
    queries = {
        "facts": "SELECT pipeline, fact_key, payload_hash FROM facts",
        "archive": 'SELECT pipeline, topic, partition, "offset", payload_hash, disposition '
                   "FROM archive",
        "current_view": "SELECT pipeline, kind, logical_key, fact_key, status FROM "
                        "current_view"}
    out: dict[str, tuple[int, int]] = {}
    try:
        with store.engine.connect() as conn:
            for table, sql in queries.items():
                n = total = 0
                for row in conn.exec_driver_sql(sql):
                    n += 1
                    total = (total + hash(tuple(row))) & 0xFFFF_FFFF_FFFF_FFFF
                out[table] = (n, total)
    finally:
        store.dispose()
    return out


def floor(scenario: str, workdir: str, n: int) -> dict:
    """One floor scenario (FLOORS) over `n` events of its family's bench input."""
    family, kind, of = FLOORS[scenario]
    src = sc.prepare_input(family, workdir, n)
    source_url = sc._sqlite_url(workdir, f"{scenario}-run")
    # The run in a child of its own, as its hot-path scenario runs: this process's peak
    # memory is then the floor's own, not the run's answer check's.
    proc = subprocess.run([sys.executable, "-m", sc.__name__, "child", f"{family}-sqlite", src,
                           source_url, str(n)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the run exited {proc.returncode}: {proc.stderr[-1500:]}")
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    pg = sc._PgDatabase() if kind == "postgresql" else None
    url = pg.url if pg is not None else sc._sqlite_url(workdir, scenario)
    try:
        seconds, stages, counts = write_floor(source_url, url)
        # Read before the comparison and the reference (which holds the decoded recording):
        # the floor's own peak.
        rss = sc._peak_rss_mib()
        same = fingerprints(source_url) == fingerprints(url)
    finally:
        if pg is not None:
            pg.drop()
    ref_after = sc.REFERENCES[family](src)[1]
    # The reference timed after the run (before the floor) and after the floor: their mean.
    ref_s = (run["reference_seconds"] + ref_after) / 2
    out = sc.result_fields(scenario, n, seconds, ref_s, rss)
    target = TARGETS[of]
    out.update({
        "reference_equal": bool(run["reference_equal"]) and same,
        "stages": {k: round(v, 3) for k, v in stages.items()},
        "floor_of": of, "store": kind, "target_events_per_s": target,
        "target_seconds": round(n / target, 3),
        "floor_within_target": seconds <= n / target,
        "rows_equal_run": same, "run_seconds": round(run["seconds"], 3),
        "run_sink_commit_s": round(run["sink_commit_s"], 3), **counts})
    return out


SCENARIOS = {name: (lambda workdir, n, name=name: floor(name, workdir, n)) for name in FLOORS}
# The PostgreSQL floor needs the server; the SQLite ones nothing.
SERVICES = {"join-postgres-floor": (("PostgreSQL", "127.0.0.1", 5432),)}
PREPARE = {name: (lambda workdir, n, family=family: sc.prepare_input(family, workdir, n))
           for name, (family, _, _) in FLOORS.items()}
