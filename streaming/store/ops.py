"""Store operations: engine set-up, the batch commit (facts + current view + archive + quarantine
+ queue + journal + metrics in one transaction), checkpoints and readers."""

from __future__ import annotations

import os
import time
import zlib
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from operator import itemgetter
from typing import Any

import orjson
from sqlalchemy import Select, Table, create_engine, event, func, select, update
from sqlalchemy.engine import Connection, Engine

from ..operators.base import ARCHIVE_ROW, hash_facts
from ..redaction import connect_url
from . import schema as S
from . import tables as _tables  # noqa: F401  (registers pipeline tables)
from .accounting import source_accounting
from .sqlite_driver import dbapi
from .versions import StoreVersionError, prepare

DEFAULT_STORE_URL = "sqlite:///.riskstream/ops.sqlite"


@dataclass(frozen=True)
class SqliteSettings:
    """How a SQLite store is opened, read from the environment when an engine is made (not at
    import). `page_bytes` applies to a store being created only: an existing file keeps the
    page size it was made with."""

    # Page cache per connection (RISKSTREAM_SQLITE_CACHE_KIB), the writer process's excepted
    # (`writer_cache_kib`). 8 MiB: at 1,000,000 join events 64 MiB for the worker and the writer
    # alike made neither faster (53.4 vs 53.6 s, commits 42.6 vs 43.1 s; the OS keeps the
    # file's pages) but grew each process by the difference as the store outgrew it.
    cache_kib: int = 8192
    # WAL pages between automatic checkpoints (RISKSTREAM_SQLITE_WAL_PAGES): 262,144 (1 GiB of
    # 4 KiB pages). A checkpoint copies each page of the WAL into the database once, however
    # many batches rewrote it; a grown store's batch rewrites thousands of random index pages
    # (view key, fact key), mostly the same ones batch after batch, so a longer WAL copies them
    # fewer times: 13% fewer bytes written than a quarter of it over a 1,000,000-event join
    # run. The WAL file keeps its largest size on disk between checkpoints.
    wal_pages: int = 262144
    # Page size of a new store (RISKSTREAM_SQLITE_PAGE_BYTES): SQLite's own 4 KiB. A batch of
    # a grown store touches thousands of random index pages, each written whole to the WAL
    # and copied whole into the database: at 1,000,000 events 4 KiB pages spent 4-20% less
    # time committing than 16 KiB for the join and 12-36% for the receipt scorer (pairs of
    # runs), and wrote a third fewer bytes; at 200,000 events, where the trees still fit the
    # cache, the two were alike (docs/performance.md, twenty-second round).
    page_bytes: int = 4096
    # Page cache of the writer process's connection (RISKSTREAM_SQLITE_WRITER_CACHE_KIB), the
    # one connection that commits every batch of an overlapped run. 32 MiB: replaying the
    # 200 batches of a 1,000,000-event join run, it read 49% fewer bytes and spent 11% less
    # CPU than with 8 MiB (the batch's random index pages stay cached between the facts insert
    # and the view upsert instead of being read again from the file), for about 45 MiB more
    # in the writer alone; the worker keeps `cache_kib` (docs/performance.md, seventh round).
    writer_cache_kib: int = 32768

    @classmethod
    def from_env(cls) -> SqliteSettings:
        env = os.environ.get
        return cls(int(env("RISKSTREAM_SQLITE_CACHE_KIB", cls.cache_kib)),
                   int(env("RISKSTREAM_SQLITE_WAL_PAGES", cls.wal_pages)),
                   int(env("RISKSTREAM_SQLITE_PAGE_BYTES", cls.page_bytes)),
                   int(env("RISKSTREAM_SQLITE_WRITER_CACHE_KIB", cls.writer_cache_kib)))


# A checkpoint whose serializer ends so holds only the changes since the checkpoint before it
# (host.checkpoints): the store keeps, and reads back, every row such a checkpoint builds on.
CHECKPOINT_DELTA_SUFFIX = "+delta"


def is_delta_checkpoint(serializer: str) -> bool:
    return serializer.endswith(CHECKPOINT_DELTA_SUFFIX)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def dumps(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


def loads(text: str | bytes) -> Any:
    return orjson.loads(text)


def normalize_url(url: str) -> str:
    """postgresql:// URLs use psycopg 3 (the `psycopg` driver)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def make_engine(url: str, batch_writer: bool = False) -> Engine:
    """An engine for the store at `url`; `batch_writer` for the writer process's, which takes
    SQLite's larger writer page cache (`SqliteSettings.writer_cache_kib`)."""
    url = normalize_url(connect_url(url))
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:" and not path.startswith("file:"):  # not a URI
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        # The SQLite library is the process's one (`sqlite_driver`: a recent SQLite when
        # installed).
        driver = dbapi()
        engine = create_engine(url, module=driver, connect_args={"timeout": 30})
        lite = SqliteSettings.from_env()

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _rec):  # noqa: ANN001
            # The store is the system of record: durable commits, readers beside one writer.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            # Before WAL mode, which fixes it: the page size of a store being created (a no-op
            # on an existing file; `SqliteSettings.page_bytes` says why 4 KiB).
            cur.execute(f"PRAGMA page_size={lite.page_bytes}")
            cur.execute("PRAGMA busy_timeout=30000")
            _enable_wal(cur, driver.OperationalError)
            cur.execute("PRAGMA synchronous=FULL")
            # Above SQLite's default 2 MiB, which the unique fact index outgrows after a few
            # hundred thousand facts (why not more: SqliteSettings.cache_kib).
            cache_kib = lite.writer_cache_kib if batch_writer else lite.cache_kib
            cur.execute(f"PRAGMA cache_size=-{cache_kib}")
            cur.execute("PRAGMA temp_store=MEMORY")  # the per-batch fact stage
            # Checkpoint the WAL into the database less often: each checkpoint rewrites (and
            # syncs) the index pages every batch touches again, so frequent small ones cost
            # more than the pages they move. Commits stay durable (synchronous=FULL).
            cur.execute(f"PRAGMA wal_autocheckpoint={lite.wal_pages}")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn):  # noqa: ANN001
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_pre_ping=True)


def _enable_wal(cur: Any, refused: type[Exception], timeout_s: float = 30.0) -> None:
    """Put the store in WAL mode (kept in the file: only its first connection changes it).
    Connections that open a new store at the same moment all try the change, which takes an
    exclusive lock from a shared one; SQLite answers one of them "database is locked" at once
    instead of waiting (it would deadlock), whatever the busy timeout. That one retries.
    `refused`: the `OperationalError` of the SQLite library the cursor belongs to."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
            return
        except refused as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _columns(rows: list[dict]) -> list[str]:
    cols: list[str] = list(rows[0])
    seen = set(cols)
    for r in rows[1:]:
        for k in r:
            if k not in seen:
                seen.add(k)
                cols.append(k)
    return cols


# Below this many rows a plain executemany is cheaper than staging through COPY.
_COPY_MIN_ROWS = 64


def _copy_stage(conn: Connection, like: str, cols: list[str], params: list[tuple]) -> str:
    """PostgreSQL: COPY rows into a per-connection temporary table with the target's types for
    exactly these columns (no constraints, no indexes, emptied at commit); return its name."""
    q = conn.dialect.identifier_preparer.quote
    collist = ", ".join(q(c) for c in cols)
    stage = f"stage_{like}_{zlib.crc32(collist.encode()):08x}"
    conn.exec_driver_sql(f"CREATE TEMP TABLE IF NOT EXISTS {q(stage)} ON COMMIT DELETE ROWS "
                         f"AS SELECT {collist} FROM {q(like)} WITH NO DATA")
    conn.exec_driver_sql(f"DELETE FROM {q(stage)}")
    _copy_rows(conn, f"{q(stage)} ({collist})", params)
    return stage


def _copy_rows(conn: Connection, target: str, rows: Iterable[tuple]) -> None:
    """PostgreSQL: COPY `rows` into `target` ("table (columns)", quoted as needed), through
    psycopg's own connection (SQLAlchemy has no COPY)."""
    raw: Any = conn.connection.dbapi_connection
    with raw.cursor() as cur:
        with cur.copy(f"COPY {target} FROM STDIN") as cp:
            for row in rows:
                cp.write_row(row)


# PostgreSQL's error for a unique key a write met (SQLSTATE 23505): a COPY's, or a plain
# insert's (`_all_new`).
_UNIQUE_VIOLATION = "23505"


def _all_new(conn: Connection, write: Callable[[], object]) -> bool:
    """PostgreSQL: run `write` under a savepoint; True when it wrote, False (with nothing of it
    left) when a row met a unique key (SQLSTATE 23505). Any other error propagates."""
    raw: Any = conn.connection.dbapi_connection  # the savepoint on psycopg's connection too
    with raw.cursor() as cur:
        cur.execute("SAVEPOINT all_new")
        try:
            write()
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != _UNIQUE_VIOLATION:
                raise
            cur.execute("ROLLBACK TO SAVEPOINT all_new")
            return False
        cur.execute("RELEASE SAVEPOINT all_new")
    return True


def _copy_if_all_new(conn: Connection, table: str, cols: tuple[str, ...] | list[str],
                     params: Iterable[tuple]) -> bool:
    """PostgreSQL: COPY the rows straight into `table`, under a savepoint; True when every row
    was new. When one met a unique key the savepoint is rolled back (nothing of the COPY stays)
    and False is returned: the caller then takes the staged path, which decides row by row.

    Why: `INSERT ... SELECT ... ON CONFLICT` inserts each row speculatively (a probe of the
    key, the row, then a check that no other transaction took the key meanwhile), and it reads
    a stage the batch was first copied into. On the live path every row of a batch is new, so
    one COPY into the table does the work once (docs/performance.md, fortieth round)."""
    q = conn.dialect.identifier_preparer.quote
    target = f"{q(table)} ({', '.join(q(c) for c in cols)})"
    return _all_new(conn, lambda: _copy_rows(conn, target, params))


def as_tuples(rows: list[dict]) -> tuple[tuple[str, ...], list[tuple]]:
    """Dict rows as (columns, one tuple per row): the form the drivers bind and a writer
    process is handed. A key missing from a row is NULL."""
    cols = _columns(rows)
    first = tuple(rows[0])
    if tuple(cols) == first and all(len(r) == len(first) for r in rows):
        # Homogeneous rows (the common case): C-speed extraction.
        getter = itemgetter(*cols) if len(cols) > 1 else (lambda r, c=cols[0]: (r[c],))
        return tuple(cols), [getter(r) for r in rows]
    return tuple(cols), [tuple(r.get(c) for c in cols) for r in rows]


def _bulk(conn: Connection, table: Table, rows: list[dict], conflict: str) -> int:
    return _bulk_tuples(conn, table, *as_tuples(rows), conflict)


def _bulk_tuples(conn: Connection, table: Table, cols: tuple[str, ...], params: list[tuple],
                 conflict: str) -> int:
    """The driver's bulk path behind one portable statement; SQLAlchemy still owns the schema.
    SQLite: one prepared executemany (sqlite3 loops in C). PostgreSQL: COPY into a temporary
    stage, then one INSERT ... SELECT (psycopg's executemany costs Python work per row).
    `conflict` is the ON CONFLICT clause or ''."""
    q = conn.dialect.identifier_preparer.quote
    collist = ", ".join(q(c) for c in cols)
    if conn.dialect.name == "postgresql" and len(params) >= _COPY_MIN_ROWS:
        if conflict == DO_NOTHING and _copy_if_all_new(conn, table.name, cols, params):
            return len(params)
        stage = _copy_stage(conn, table.name, list(cols), params)
        res = conn.exec_driver_sql(f"INSERT INTO {q(table.name)} ({collist}) "
                                   f"SELECT {collist} FROM {q(stage)} {conflict}")
    else:
        mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
        sql = (f"INSERT INTO {q(table.name)} ({collist}) "
               f"VALUES ({', '.join([mark] * len(cols))}) {conflict}")
        res = conn.exec_driver_sql(sql, params)
    n = res.rowcount
    return n if n is not None and n >= 0 else len(params)


def bulk_insert(conn: Connection, table: Table, rows: list[dict]) -> int:
    return _bulk(conn, table, rows, "") if rows else 0


DO_NOTHING = "ON CONFLICT DO NOTHING"


def insert_ignore(conn: Connection, table: Table, rows: list[dict]) -> int:
    """INSERT ... ON CONFLICT DO NOTHING on either dialect. Returns rows inserted."""
    if not rows:
        return 0
    return _bulk(conn, table, rows, DO_NOTHING)


def upsert(conn: Connection, table: Table, rows: list[dict], keys: list[str]) -> None:
    """INSERT ... ON CONFLICT (keys) DO UPDATE SET the other columns, on either dialect."""
    if rows:
        _upsert_tuples(conn, table, *as_tuples(rows), keys)


def _upsert_tuples(conn: Connection, table: Table, cols: tuple[str, ...], params: list[tuple],
                   keys: list[str]) -> None:
    q = conn.dialect.identifier_preparer.quote
    sets = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in cols if c not in keys)
    _bulk_tuples(conn, table, cols, params,
                 f"ON CONFLICT ({', '.join(q(k) for k in keys)}) DO UPDATE SET {sets}")


@dataclass
class SinkResult:
    written: int = 0
    noop: int = 0
    rejected: int = 0
    rejected_keys: list[str] = field(default_factory=list)


# A fact as the sink stores it: a plain tuple of these columns, the payload as its canonical
# JSON text, in the order the facts insert binds them. Plain tuples, read by position: they
# pickle to a writer process several times cheaper than a `Fact` with its payload dict, and
# the sink binds them as they are, with no per-row conversion on either side.
#
# A fact without a predecessor (nearly every one) has "" there, stored as NULL by the inserts
# (`NULLIF`; a fact key is never empty). SQLite's driver binds a str or an int directly but
# sends every other value, None included, through its adapter lookup first: a tuple built and
# hashed and two attribute searches per fact, 2.5% of the join writer's samples
# (docs/performance.md, twenty-seventh round). None is still accepted and stored as NULL.
FACT_ROW = ("fact_key", "kind", "logical_key", "status", "payload_hash", "payload",
            "predecessor_key")
FactRow = tuple  # tuple[str, str, str, str, str, str, str], in FACT_ROW order
_KEY, _KIND, _LOGICAL, _STATUS, _HASH, _PAYLOAD, _PRED = range(len(FACT_ROW))
_FACT_KEY = itemgetter(_KEY)
# What the current view is keyed by within a pipeline.
_VIEW_IDENTITY = itemgetter(_KIND, _LOGICAL)
NO_PREDECESSOR = ""


def _stored_value(column: str, value: str) -> str:
    """The SQL expression the facts insert stores a fact column from, given the expression
    `value` that holds it (a placeholder, or the stage's column): the predecessor's "" as
    NULL, every other column as it is."""
    return f"NULLIF({value}, '{NO_PREDECESSOR}')" if column == "predecessor_key" else value


def payload_text(f: Any) -> str:
    """A fact's payload as stored: the canonical JSON it was hashed over (a `Fact` may carry
    only the dict)."""
    return f.payload_json or dumps(f.payload)


def fact_rows(facts: Iterable[Any]) -> list[FactRow]:
    """Facts (an operator's `Fact`s) as the rows `write_facts` writes. The hashes the facts
    left for later are taken here, the batch's together (`hash_facts`)."""
    facts = list(facts)
    hash_facts(facts)
    return [(f.fact_key, f.kind, f.logical_key, f.status, f.payload_hash, payload_text(f),
             f.predecessor_key or NO_PREDECESSOR) for f in facts]


@dataclass(frozen=True, slots=True)
class BatchRows:
    """One batch as the rows it writes, nothing else: what `Store.commit_rows` commits and what
    is handed to a writer process. `facts` are fact rows (FACT_ROW); `tables` are (table,
    columns, rows), each inserted ON CONFLICT DO NOTHING in this order; `metrics` (columns,
    row) is upserted."""

    pipeline: str
    seq: int
    generation_id: str | None
    facts: list[FactRow]
    tables: list[tuple[str, tuple[str, ...], list[tuple]]]
    metrics: tuple[tuple[str, ...], list[tuple]] | None


@dataclass
class BatchWrite:
    """Everything one batch commits, atomically. `archive` rows are tuples in ARCHIVE_ROW
    order; the other tables' rows are dicts by column."""

    pipeline: str
    seq: int
    facts: list = field(default_factory=list)
    archive: list[tuple] = field(default_factory=list)
    quarantine: list[dict] = field(default_factory=list)
    queue: list[dict] = field(default_factory=list)
    journal: dict | None = None
    metrics: dict | None = None
    extra: dict[str, list[dict]] = field(default_factory=dict)
    generation_id: str | None = None

    def rows(self) -> BatchRows:
        named = [("quarantine", self.quarantine), ("replay_queue", self.queue),
                 *self.extra.items(),
                 ("journal", [self.journal] if self.journal is not None else [])]
        archive = [("archive", ARCHIVE_ROW, self.archive)] if self.archive else []
        return BatchRows(self.pipeline, self.seq, self.generation_id, fact_rows(self.facts),
                         archive + [(table, *as_tuples(rows)) for table, rows in named if rows],
                         as_tuples([self.metrics]) if self.metrics is not None else None)


# Columns of a staged fact, in the order they are staged and inserted.
_FACT_COLUMNS = ("pipeline", *FACT_ROW, "batch_seq", "generation_id", "created_at")
_STAGE = "fact_stage"


def _stage_facts(conn: Connection, rows: list[tuple]) -> None:
    """Load a batch's facts into a per-connection temporary table without indexes: COPY on
    PostgreSQL, one prepared executemany on SQLite. The set-based statements below read it."""
    cols = ", ".join(_FACT_COLUMNS)
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(
            f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} (ord integer, "
            "pipeline text, fact_key text, kind text, logical_key text, status text, "
            "payload_hash text, payload text, predecessor_key text, batch_seq bigint, "
            "generation_id text, created_at text) ON COMMIT DELETE ROWS")
        conn.exec_driver_sql(f"DELETE FROM {_STAGE}")
        _copy_rows(conn, f"{_STAGE} (ord, {cols})", ((i, *r) for i, r in enumerate(rows)))
        return
    conn.exec_driver_sql(
        f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} (ord INTEGER, pipeline TEXT, fact_key TEXT, "
        "kind TEXT, logical_key TEXT, status TEXT, payload_hash TEXT, payload TEXT, "
        "predecessor_key TEXT, batch_seq INTEGER, generation_id TEXT, created_at TEXT)")
    conn.exec_driver_sql(f"DELETE FROM {_STAGE}")  # left from an earlier batch
    marks = ", ".join(["?"] * (len(_FACT_COLUMNS) + 1))
    conn.exec_driver_sql(f"INSERT INTO {_STAGE} (ord, {cols}) VALUES ({marks})",
                         [(i, *r) for i, r in enumerate(rows)])


def _literal(value: str | int | None) -> str:
    """A value that is the same for every row of a batch (pipeline, batch number, generation,
    timestamp) as an SQL literal, so a SQLite executemany binds only the per-row columns."""
    if value is None:
        return "NULL"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"no SQL literal for {type(value).__name__}")
    if isinstance(value, int):
        return str(value)
    if "\x00" in value:
        raise ValueError("a batch constant with a NUL character")
    return "'" + value.replace("'", "''") + "'"


# The view's columns other than its key, replaced when a newer fact of the key is written.
_VIEW_SET = ("fact_key = excluded.fact_key, status = excluded.status, "
             "fact_id = excluded.fact_id, batch_seq = excluded.batch_seq")
_VIEW_INSERT = ("INSERT INTO current_view (pipeline, kind, logical_key, fact_key, status, "
                "fact_id, batch_seq)")
# A view row is taken from the fact row it names: every column is the fact's own, so the view
# can never disagree with its fact. Callers add the WHERE clause choosing the facts (SQLite
# needs one before ON CONFLICT in an INSERT ... SELECT).
_VIEW_FROM_FACTS = ("SELECT pipeline, kind, logical_key, fact_key, status, id, batch_seq "
                    "FROM facts")
_VIEW_CONFLICT = f"ON CONFLICT (pipeline, kind, logical_key) DO UPDATE SET {_VIEW_SET}"
# SQLite: facts per statement writing the view. SQLite keeps the prior image of every existing
# page a multi-row statement changes until the statement ends (its statement journal, in memory
# under temp_store=MEMORY), and the view's key takes new rows at random pages: one statement
# per batch held more pages the larger the view (12 MiB at 50,000 join events, 42 MiB at
# 750,000; docs/performance.md, seventh round). A batch names each logical key at most once,
# so its statements can apply in any order.
SQLITE_VIEW_CHUNK = 512


def current_with_payload() -> Select:
    """The current view as its readers see it: the view's columns with the payload of the fact
    each row names, under the same names and in the same order as when the view held a copy of
    the payload. Readers add their WHERE and ORDER BY."""
    v, f = S.current_view.c, S.facts.c
    return (select(v.pipeline, v.kind, v.logical_key, v.fact_key, v.status, f.payload,
                   v.batch_seq)
            .select_from(S.current_view.join(S.facts, f.id == v.fact_id)))


def _last_per_logical_key(facts: list) -> list[int]:
    """Positions of the last fact of each (kind, logical key), in batch order: the current
    view keeps that one. The dictionary is built in one C pass (a later position of a key
    replaces the earlier one); a loop in Python over the batch cost the writer process twice
    as long (docs/performance.md, forty-first round)."""
    last = dict(zip(map(_VIEW_IDENTITY, facts), range(len(facts)), strict=True))
    positions = list(last.values())
    if len(positions) != len(facts):
        positions.sort()  # a key met again kept its first place in the dictionary
    return positions


def _superseded_in_batch(facts: list) -> list[int]:
    """Positions of facts another fact of the same (kind, logical key) follows in the batch.
    (A loop: built from `_last_per_logical_key`'s dictionary instead, with C iterators, it
    took two thirds longer, the batch's keys hashed twice.)"""
    last: dict[tuple[str, str], int] = {}
    superseded: list[int] = []
    for i, f in enumerate(facts):
        k = (f[_KIND], f[_LOGICAL])
        j = last.get(k)
        if j is not None:
            superseded.append(j)
        last[k] = i
    return superseded


def _sqlite_direct(conn: Connection, pipeline: str, ordered: list[FactRow],
                   batch_seq: int | None, generation_id: str | None, created: str,
                   with_view: bool) -> int | None:
    """SQLite: one prepared executemany straight into the facts, binding only the per-row
    columns (the batch's constants are literals). None when every key was new (the common
    case): the facts are written and, with `with_view`, the current view too, pointed at the
    fact rows just written (by rowid) rather than bound again from Python. When some key
    existed, the largest fact id before the batch: the batch's new keys are written (in batch
    order, so with the ids the staged insert would give them) and the staged path decides the
    rest, finding this batch's facts by id above it.

    No savepoint to roll back to: SQLite keeps the prior image of every existing page written
    under a savepoint (in memory under temp_store=MEMORY), and the unique key's random inserts
    touch more distinct pages the larger the store (docs/performance.md, seventh round)."""
    before = int(conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM facts").scalar() or 0)
    consts = ", ".join(_literal(v) for v in (batch_seq, generation_id, created))
    # A FactRow is its columns in the insert's order: the rows are bound as they are.
    n = conn.exec_driver_sql(
        f"INSERT INTO facts ({', '.join(_FACT_COLUMNS)}) VALUES ({_literal(pipeline)}, "
        f"{', '.join(_stored_value(c, '?') for c in FACT_ROW)}, {consts}) "
        "ON CONFLICT (pipeline, fact_key) DO NOTHING",
        ordered).rowcount
    if n != len(ordered):
        return before
    if with_view:
        _sqlite_view_of_direct(conn, pipeline, ordered, before)
    return None


def _sqlite_view_of_direct(conn: Connection, pipeline: str, ordered: list[FactRow],
                           before: int) -> None:
    """SQLite: the view pointed at a batch `_sqlite_direct` wrote whole, the facts' largest id
    having been `before`."""
    after = conn.exec_driver_sql("SELECT max(id) FROM facts").scalar()
    if after == before + len(ordered):
        # Each insert took the largest rowid plus one (facts are never deleted), so the
        # batch's facts are rowids before+1 .. before+n in batch order: a statement per
        # range of them points the view at them, leaving out those a later fact of its
        # key follows.
        skip = sorted(before + 1 + i for i in _superseded_in_batch(ordered))
        for lo in range(before, after, SQLITE_VIEW_CHUNK):
            hi = min(lo + SQLITE_VIEW_CHUNK, after)
            conn.exec_driver_sql(
                f"{_VIEW_INSERT} {_VIEW_FROM_FACTS} WHERE id > ? AND id <= ? AND id NOT IN "
                f"(SELECT value FROM json_each(?)) {_VIEW_CONFLICT}",
                (lo, hi, dumps(skip[bisect_right(skip, lo):bisect_right(skip, hi)])))
    else:
        upsert_view_of_facts(conn, pipeline,
                             [ordered[i][_KEY] for i in _last_per_logical_key(ordered)])


def _pg_direct(conn: Connection, pipeline: str, ordered: list[FactRow], batch_seq: int | None,
               generation_id: str | None, created: str, with_view: bool,
               hints: ViewInserts | None) -> list[int] | None:
    """PostgreSQL: the batch's facts COPYed straight into the table when every key is new
    (`_copy_if_all_new`), and the view pointed at them; the ids they took, in batch order.
    None, with nothing written, when some key existed (the staged path then decides each
    fact) or the batch is too small to COPY.
    The view statement names the facts by the ids drawn for them, as it names the ids the
    staged insert returns; finding them by their keys instead cost a quarter more
    (docs/performance.md, fortieth round)."""
    if len(ordered) < _COPY_MIN_ROWS:
        return None
    # The batch's ids drawn first, in batch order: a COPY returns none, and the view names
    # its facts by id. The sequence is found once per statement: named per row,
    # `pg_get_serial_sequence` cost 2 microseconds a fact.
    ids: Any = conn.exec_driver_sql(
        "WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence('facts', 'id')::regclass AS seq) "
        "SELECT array_agg(v ORDER BY v) FROM (SELECT nextval(s.seq) AS v FROM s "
        "CROSS JOIN generate_series(1, %s)) t", (len(ordered),)).scalar()
    rows = ((i, pipeline, *f[:_PRED], f[_PRED] or None, batch_seq, generation_id, created)
            for i, f in zip(ids, ordered, strict=True))
    if not _copy_if_all_new(conn, "facts", ("id", *_FACT_COLUMNS), rows):
        return None
    if with_view:
        _pg_view_of_batch(conn, pipeline, ordered, ids, hints)
    return ids


class ViewInserts:
    """PostgreSQL: which kinds of a pipeline's facts lately took only new logical keys in the
    current view. Their view rows are first tried as a plain INSERT under a savepoint, which
    skips the upsert's speculative insertion (a serial 1,000,000-event join run's view
    statements took 15.2 s instead of 20.3; docs/performance.md, forty-first round); a row
    meeting an existing key rolls the attempt back, and the upsert then writes them, as it
    would have anyway. So this only ever chooses the cheaper statement: the view is the same
    either way. A kind whose attempt met a key is upserted in the next `retry_after` batches
    that hold it before it is tried again (a join's outcomes replace their provisional rows:
    always some existing keys; its pairs: new ones, unless corrections retire them).

    One per `Store`: the writer process's store carries it from batch to batch."""

    def __init__(self, retry_after: int = 16) -> None:
        self.retry_after = retry_after
        self._upserts_left: dict[tuple[str, str], int] = {}

    def worth_trying(self, pipeline: str, kind: str) -> bool:
        left = self._upserts_left.get((pipeline, kind), 0)
        if left:
            self._upserts_left[(pipeline, kind)] = left - 1
        return not left

    def met_existing(self, pipeline: str, kind: str) -> None:
        self._upserts_left[(pipeline, kind)] = self.retry_after


def _pg_view_of_ids(conn: Connection, ids: list[int], upsert: bool = True) -> None:
    """PostgreSQL: point the current view at the facts with these ids (at most one per logical
    key), in one statement probing the facts' primary key; `upsert` False for a plain insert
    (rows that must all be new). The ids go as one array literal (`{1,2,3}`) cast on the
    server: handed a list, the driver's list dumper checks each element's text with a
    pattern, 1.1 s of the writer process's CPU over a 1,000,000-event join run
    (docs/performance.md, forty-first round). On psycopg's own connection, as the COPYs and
    their savepoints are, so a unique violation reaches `_all_new` as the driver raised it."""
    raw: Any = conn.connection.dbapi_connection  # as `_all_new` runs its savepoint
    with raw.cursor() as cur:
        cur.execute(f"{_VIEW_INSERT} {_VIEW_FROM_FACTS} WHERE id = ANY(%s::integer[]) "
                    f"{_VIEW_CONFLICT if upsert else ''}", ("{" + ",".join(map(str, ids)) + "}",))


def _pg_view_of_batch(conn: Connection, pipeline: str, ordered: list[FactRow], ids: list[int],
                      hints: ViewInserts | None) -> None:
    """PostgreSQL: the view pointed at a batch's facts (`ids[i]` the id of `ordered[i]`), the
    last one per logical key: with `hints`, the kinds worth it as plain inserts first
    (`ViewInserts`), the rest in one upsert."""
    last = _last_per_logical_key(ordered)
    if hints is None:
        _pg_view_of_ids(conn, [ids[i] for i in last])
        return
    by_kind: dict[str, list[int]] = {}
    for i in last:
        by_kind.setdefault(ordered[i][_KIND], []).append(ids[i])
    upserts: list[int] = []
    for kind, kind_ids in by_kind.items():
        if not hints.worth_trying(pipeline, kind):
            upserts.extend(kind_ids)
        elif not _all_new(conn, partial(_pg_view_of_ids, conn, kind_ids, False)):
            hints.met_existing(pipeline, kind)
            upserts.extend(kind_ids)
    if upserts:
        _pg_view_of_ids(conn, upserts)


def write_facts(conn: Connection, pipeline: str, facts_in: list[FactRow],
                batch_seq: int | None, generation_id: str | None = None,
                view_inserts: ViewInserts | None = None) -> SinkResult:
    """The sink contract: a new key is written; an existing key with the same payload hash is a
    no-op; an existing key with another hash is rejected and recorded as an exception. The
    current view is derived in the same transaction from the newly written facts (a row names
    the last one per logical key by id; facts written for a generation leave it alone).

    A batch whose keys are all new (the live path) goes straight in: one executemany on
    SQLite (`_sqlite_direct`), one COPY under a savepoint on PostgreSQL (`_pg_direct`). When
    some key existed, set-based per batch: the facts are staged (COPY on PostgreSQL), one
    `INSERT ... SELECT ... ON CONFLICT DO NOTHING RETURNING fact_key, id` lets the unique index
    decide and names the facts this batch wrote (on SQLite, the new keys the direct insert
    already wrote); only then does one join of the stage with the facts read the existing
    hashes back (by the unique key)."""
    res = SinkResult()
    if not facts_in:
        return res
    # Within a batch, the first occurrence of a key wins; a later different one is a conflict.
    # A batch that names each key once (nearly every one: its keys' set, built in C, is as
    # large as the batch) is written as it is, without a dictionary step per fact.
    ordered: list[FactRow] = []
    conflicts: list[tuple[FactRow, str]] = []
    if len(set(map(_FACT_KEY, facts_in))) == len(facts_in):
        ordered = facts_in
    else:
        seen: dict[str, str] = {}
        for f in facts_in:
            h = seen.get(f[_KEY])
            if h is None:
                seen[f[_KEY]] = f[_HASH]
                ordered.append(f)
            elif h != f[_HASH]:
                conflicts.append((f, h))
            else:
                res.noop += 1
    created = now_iso()
    with_view = generation_id is None
    sqlite = conn.dialect.name == "sqlite"
    # SQLite's direct insert: None when it wrote the whole batch, else the id above which it
    # wrote the batch's new keys.
    written_above = (_sqlite_direct(conn, pipeline, ordered, batch_seq, generation_id, created,
                                    with_view) if sqlite else None)
    if sqlite and written_above is None:
        res.written = len(ordered)
    elif not sqlite and _pg_direct(conn, pipeline, ordered, batch_seq, generation_id, created,
                                   with_view, view_inserts) is not None:
        res.written = len(ordered)
    else:
        _write_staged(conn, pipeline, ordered, batch_seq, generation_id, created, with_view,
                      res, conflicts, written_above)
    if conflicts:
        created = now_iso()
        rows_x = [{"pipeline": pipeline, "fact_key": f[_KEY], "existing_hash": h,
                   "rejected_hash": f[_HASH], "rejected_payload": f[_PAYLOAD],
                   "reason": "existing key with different content", "batch_seq": batch_seq,
                   "created_at": created} for f, h in conflicts]
        insert_ignore(conn, S.sink_exceptions, rows_x)
        res.rejected = len(conflicts)
        res.rejected_keys = [f[_KEY] for f, _ in conflicts]
    return res


# The existing hashes of the staged keys, probed through the unique index (pipeline, fact_key).
READ_BACK = (f"SELECT f.fact_key, f.payload_hash FROM {_STAGE} s JOIN facts f "
             "ON f.pipeline = s.pipeline AND f.fact_key = s.fact_key")


def _write_staged(conn: Connection, pipeline: str, ordered: list[FactRow],
                  batch_seq: int | None, generation_id: str | None, created: str,
                  with_view: bool, res: SinkResult, conflicts: list,
                  written_above: int | None = None) -> None:
    """The staged path: PostgreSQL always, SQLite when some key of the batch existed. Counts
    the written and no-op facts into `res` and appends the conflicting ones to `conflicts`.
    `written_above`: SQLite's direct insert already wrote the batch's new keys, with ids above
    this one (the transaction holds the write lock, so every such fact is this batch's)."""
    rows = [(pipeline, *f, batch_seq, generation_id, created) for f in ordered]
    cols = ", ".join(_FACT_COLUMNS)
    _batch_work_mem(conn)
    _stage_facts(conn, rows)
    if written_above is None:
        stored = ", ".join(_stored_value(c, c) for c in _FACT_COLUMNS)
        insert = (f"INSERT INTO facts ({cols}) SELECT {stored} FROM {_STAGE} WHERE true "
                  "ORDER BY ord ON CONFLICT (pipeline, fact_key) DO NOTHING "
                  "RETURNING fact_key, id")
        new_facts: Any = conn.exec_driver_sql(insert)
    else:
        new_facts = conn.exec_driver_sql("SELECT fact_key, id FROM facts WHERE id > ?",
                                         (written_above,))
    written: dict[str, int] = dict(new_facts.all())
    existing: dict[str, str] = {}
    if len(written) != len(rows):
        if conn.dialect.name == "postgresql":
            # Fresh statistics for the stage so the planner probes the unique index per key.
            conn.exec_driver_sql(f"ANALYZE {_STAGE}")
        found: Any = conn.exec_driver_sql(READ_BACK)
        for k, h in found:
            if k not in written:
                existing[k] = h
    new: list[int] = []  # stage positions of the facts this batch wrote
    for i, f in enumerate(ordered):
        key = f[_KEY]
        if key in written:
            res.written += 1
            new.append(i)
        elif existing.get(key) == f[_HASH]:
            res.noop += 1
        else:
            conflicts.append((f, existing.get(key, "")))
    if with_view and new:
        # The view points at the written facts, the last per logical key, by the ids the
        # insert returned: one statement probing the facts' primary key, no payload bound.
        ids = [written[ordered[new[j]][_KEY]]
               for j in _last_per_logical_key([ordered[i] for i in new])]
        if conn.dialect.name == "postgresql":
            _pg_view_of_ids(conn, ids)
        else:
            for part in _sqlite_view_chunks(ids):
                conn.exec_driver_sql(f"{_VIEW_INSERT} {_VIEW_FROM_FACTS} WHERE id IN "
                                     f"(SELECT value FROM json_each(?)) {_VIEW_CONFLICT}",
                                     (dumps(part),))


# The columns the store's queries filter, join or order on: the planner's estimates need
# statistics of these only (the table's size comes with any ANALYZE); the payload and the
# other columns nobody filters on are left out.
_FACT_KEY_COLUMNS = ("id", "pipeline", "fact_key", "kind", "logical_key", "status",
                     "generation_id")
_VIEW_KEY_COLUMNS = ("pipeline", "kind", "logical_key", "fact_key", "status")
ANALYZE_KEY_COLUMNS = (f"ANALYZE facts ({', '.join(_FACT_KEY_COLUMNS)}), "
                       f"current_view ({', '.join(_VIEW_KEY_COLUMNS)})")
# ANALYZE samples 300 rows per unit of statistics target. At the server's default (100) it
# reads every page of a facts table below 30,000 pages (about 500,000 facts); these columns
# have a handful of values (pipeline, kind, status) or are unique keys the unique index already
# describes, so a 9,000-row sample estimates them as well and reads a third of the pages.
ANALYZE_STATISTICS_TARGET = 30

# PostgreSQL: the facts are analysed again once they number this many times the rows the
# last analysis counted. The plans that need statistics (the read-back join probing the unique
# key) go wrong on a table the planner takes for empty or tiny, not on one a half larger than
# it knows; analysing after every checkpoint cost 2.1 s of a 1,000,000-event join run's 43 s of
# commits (docs/performance.md, fortieth and forty-first rounds).
ANALYZE_GROWTH = 1.5


def _statistics_stale(conn: Connection) -> bool:
    """PostgreSQL: whether the facts were never analysed, or have grown past `ANALYZE_GROWTH`
    times the rows their last analysis (or vacuum) counted. The facts' largest id stands for
    their number: ids are never reused, so it can only overstate it (an id a rolled-back
    batch drew), which analyses sooner, never later. The view grows with the facts and is
    analysed with them."""
    row: Any = conn.exec_driver_sql(
        "SELECT c.reltuples, coalesce((SELECT max(id) FROM facts), 0) FROM pg_class c "
        "WHERE c.oid = 'facts'::regclass").one()
    counted, largest = float(row[0]), int(row[1])
    return counted < 0 or largest > ANALYZE_GROWTH * counted


# PostgreSQL: memory for the batch transaction's sorts and hashes (the stage ordered by
# position, the read-back join), so they stay in memory instead of spilling to temporary
# files. Set local to the transaction (`set_config(..., true)`): the pooled connection and
# every other statement keep the server's setting. Read from the environment when a batch
# is written (`RISKSTREAM_PG_BATCH_WORK_MEM`, a PostgreSQL memory size), not at import.
DEFAULT_BATCH_WORK_MEM = "256MB"


def batch_work_mem() -> str:
    return os.environ.get("RISKSTREAM_PG_BATCH_WORK_MEM", DEFAULT_BATCH_WORK_MEM)


def _batch_work_mem(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SELECT set_config('work_mem', %s, true)", (batch_work_mem(),))


def _sqlite_path(url: str) -> str | None:
    if not url.startswith("sqlite"):
        return None
    path = url.split("///", 1)[1] if "///" in url else ""
    return path if path and path != ":memory:" else None


def shared_store(url: str) -> bool:
    """Whether another process can open the store at `url` (not an in-memory SQLite one)."""
    url = normalize_url(url)
    return not url.startswith("sqlite") or _sqlite_path(url) is not None


def upsert_view_of_facts(conn: Connection, pipeline: str, fact_keys: list[str]) -> None:
    """Point the current view at the stored facts with these keys (at most one per logical
    key), in one statement probing the unique fact key."""
    if not fact_keys:
        return
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"{_VIEW_INSERT} {_VIEW_FROM_FACTS} WHERE pipeline = %s AND "
                             f"fact_key = ANY(%s::text[]) {_VIEW_CONFLICT}",
                             (pipeline, fact_keys))
    else:
        for part in _sqlite_view_chunks(fact_keys):
            conn.exec_driver_sql(f"{_VIEW_INSERT} {_VIEW_FROM_FACTS} WHERE pipeline = ? AND "
                                 f"fact_key IN (SELECT value FROM json_each(?)) "
                                 f"{_VIEW_CONFLICT}", (pipeline, dumps(part)))


def _sqlite_view_chunks(items: list) -> Iterator[list]:
    """`items` in slices of SQLITE_VIEW_CHUNK: one view statement each (why: the constant)."""
    for i in range(0, len(items), SQLITE_VIEW_CHUNK):
        yield items[i:i + SQLITE_VIEW_CHUNK]


class Store:
    """The store at `url`. Opening it reads its schema revision (no DDL on open); `schema`
    says what to do when it is not at this release's head (`versions.prepare`): `create` makes
    an empty store and refuses an older one, `upgrade` also migrates an older one (the run
    commands), `existing` never creates one (readers). A newer store is always refused.
    `batch_writer`: the writer process's store (its engine's page cache, `make_engine`)."""

    def __init__(self, url: str = DEFAULT_STORE_URL, schema: str = "create",
                 batch_writer: bool = False):
        self.url = url
        path = _sqlite_path(normalize_url(url))
        if schema == "existing" and path is not None and not os.path.exists(path):
            raise StoreVersionError(f"there is no store at {url} (no such file): run a "
                                    f"pipeline or `riskstream store upgrade` to create it")
        self.engine = make_engine(url, batch_writer)
        # PostgreSQL: which kinds of facts lately took only new view keys (ViewInserts).
        self.view_inserts = ViewInserts()
        try:
            prepare(self.engine, schema)
        except Exception:
            self.engine.dispose()
            raise

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def dispose(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ writes
    def commit_batch(self, b: BatchWrite, before_commit: Callable[[], None] | None = None
                     ) -> SinkResult:
        return self.commit_rows(b.rows(), before_commit)

    def commit_rows(self, b: BatchRows, before_commit: Callable[[], None] | None = None
                    ) -> SinkResult:
        with self.engine.begin() as conn:
            res = write_facts(conn, b.pipeline, b.facts, b.seq, b.generation_id,
                              self.view_inserts)
            for table, cols, params in b.tables:
                _bulk_tuples(conn, S.metadata.tables[table], cols, params, DO_NOTHING)
            if b.metrics is not None:
                _upsert_tuples(conn, S.metrics, *b.metrics, ["pipeline", "seq"])
            if before_commit is not None:
                before_commit()
        return res

    def write_checkpoint(self, row: dict, mid_write: Callable[[], None] | None = None,
                         keep: int = 3) -> None:
        """One row in one transaction: a checkpoint is either wholly there or not at all.
        Older checkpoints beyond the newest `keep` are pruned in the same transaction (restore
        reads the newest; the journal keeps the history), except the ones a kept delta
        checkpoint builds on (`checkpoint_chain`)."""
        c = S.checkpoints.c
        with self.engine.begin() as conn:
            conn.execute(S.checkpoints.insert(), [row])
            if mid_write is not None:
                mid_write()
            rows = list(conn.execute(select(c.id, c.serializer)
                                     .where(c.pipeline == row["pipeline"])
                                     .order_by(c.id.desc())))
            kept = keep
            while kept < len(rows) and is_delta_checkpoint(rows[kept - 1][1]):
                kept += 1
            if len(rows) > kept:
                conn.execute(S.checkpoints.delete().where(
                    c.pipeline == row["pipeline"], c.id.in_([r[0] for r in rows[kept:]])))
        self.refresh_statistics()

    def refresh_statistics(self) -> None:
        """PostgreSQL: fresh planner statistics after a stretch of bulk loads, when they are
        stale (`_statistics_stale`); every checkpoint asks. On a never-analysed facts table
        the planner misjudges the read-back join and scans every row instead of probing the
        unique index (observed as a 25x slower run on a filled store). SQLite: nothing."""
        if self.dialect != "postgresql":
            return
        with self.engine.begin() as conn:
            if _statistics_stale(conn):
                conn.exec_driver_sql("SELECT set_config('default_statistics_target', %s, true)",
                                     (str(ANALYZE_STATISTICS_TARGET),))
                conn.exec_driver_sql(ANALYZE_KEY_COLUMNS)

    def start_run(self, pipeline: str, settings: dict) -> int:
        with self.engine.begin() as conn:
            r = conn.execute(S.runs.insert().values(pipeline=pipeline, started_at=now_iso(),
                                                    settings=dumps(settings)))
            pk = r.inserted_primary_key
            assert pk is not None  # an insert into a table with an autoincrement key
            return int(pk[0])

    def finish_run(self, run_id: int, result: dict) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(S.runs).where(S.runs.c.id == run_id).values(
                finished_at=now_iso(), result=dumps(result)))

    # ------------------------------------------------------------------ reads
    def journal_keys(self) -> list[str]:
        """The distinct keys the store's journal rows are kept under (`<pipeline>` or
        `<pipeline>@I/N`, streaming/assignment.py)."""
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(select(S.journal.c.pipeline).distinct())]

    def latest_checkpoint(self, pipeline: str) -> dict | None:
        c = S.checkpoints.c
        with self.engine.connect() as conn:
            row = conn.execute(select(S.checkpoints).where(c.pipeline == pipeline)
                               .order_by(c.id.desc()).limit(1)).mappings().first()
            return dict(row) if row else None

    def checkpoint_chain(self, pipeline: str) -> list[dict]:
        """The rows restore reads, oldest first: the newest checkpoint and, when it is a delta,
        every one before it back to the newest full one (a delta holds only the changes since
        the row before it). Empty when the pipeline has none."""
        c = S.checkpoints.c
        with self.engine.connect() as conn:
            heads = list(conn.execute(select(c.id, c.serializer).where(c.pipeline == pipeline)
                                      .order_by(c.id.desc())))
            if not heads:
                return []
            # With no full one left (which pruning never leaves), the oldest: restore refuses it.
            start = next((i for i, r in enumerate(heads) if not is_delta_checkpoint(r[1])),
                         len(heads) - 1)
            return [dict(r) for r in conn.execute(
                select(S.checkpoints).where(c.pipeline == pipeline, c.id >= heads[start][0])
                .order_by(c.id)).mappings()]

    def checkpoints(self, pipeline: str) -> list[dict]:
        c = S.checkpoints.c
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(
                select(c.id, c.journal_seq, c.serializer, c.state_schema, c.meta, c.size_bytes,
                       c.duration_ms, c.created_at).where(c.pipeline == pipeline)
                .order_by(c.id)).mappings()]

    def journal_after(self, pipeline: str, seq: int) -> list[dict]:
        j = S.journal.c
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(
                select(S.journal).where(j.pipeline == pipeline, j.seq > seq)
                .order_by(j.seq)).mappings()]

    def last_journal_seq(self, pipeline: str) -> int:
        j = S.journal.c
        with self.engine.connect() as conn:
            v = conn.execute(select(func.max(j.seq)).where(j.pipeline == pipeline)).scalar()
            return int(v or 0)

    def rows(self, stmt) -> list[dict]:
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(stmt).mappings()]

    def current(self, pipeline: str, kind: str) -> list[dict]:
        v = S.current_view.c
        return self.rows(current_with_payload().where(v.pipeline == pipeline, v.kind == kind)
                         .order_by(v.logical_key))

    def facts(self, pipeline: str, kind: str | None = None) -> list[dict]:
        f = S.facts.c
        stmt = select(S.facts).where(f.pipeline == pipeline)
        if kind:
            stmt = stmt.where(f.kind == kind)
        return self.rows(stmt.order_by(f.id))

    def queue(self, pipeline: str | None = None, status: str | None = None) -> list[dict]:
        q = S.replay_queue.c
        stmt = select(S.replay_queue)
        if pipeline:
            stmt = stmt.where(q.pipeline == pipeline)
        if status:
            stmt = stmt.where(q.status == status)
        return self.rows(stmt.order_by(q.queue_date, q.id))

    def quarantine_rows(self, pipeline: str) -> list[dict]:
        q = S.quarantine.c
        return self.rows(select(S.quarantine).where(q.pipeline == pipeline)
                         .order_by(q.topic, q.partition, q.offset))

    def sink_exception_rows(self, pipeline: str | None = None) -> list[dict]:
        e = S.sink_exceptions.c
        stmt = select(S.sink_exceptions)
        if pipeline:
            stmt = stmt.where(e.pipeline == pipeline)
        return self.rows(stmt.order_by(e.id))

    def metrics_trace(self, pipeline: str) -> list[dict]:
        m = S.metrics.c
        rows = self.rows(select(S.metrics).where(m.pipeline == pipeline).order_by(m.seq))
        return [{"seq": r["seq"], "clock_us": r["clock_us"], **loads(r["snapshot"])}
                for r in rows]

    def last_metrics(self, pipeline: str | None = None) -> dict | None:
        m = S.metrics.c
        stmt = select(S.metrics)
        if pipeline:
            stmt = stmt.where(m.pipeline == pipeline)
        rows = self.rows(stmt.order_by(m.seq.desc()).limit(1)) if pipeline else None
        if not pipeline:
            # Latest snapshot of every pipeline that has one.
            out = {}
            for p in [r["pipeline"] for r in self.rows(select(m.pipeline).distinct())]:
                snap = self.last_metrics(p)
                if snap:
                    out[p] = snap
            return out or None
        if not rows:
            return None
        r = rows[0]
        return {"pipeline": r["pipeline"], "seq": r["seq"], "clock_us": r["clock_us"],
                **loads(r["snapshot"])}

    def accounting(self, pipeline: str) -> list[dict]:
        """Per topic-partition: offset range read (from the journal) and the five buckets
        (`store.accounting` holds the definition)."""
        with self.engine.connect() as conn:
            return source_accounting(conn, pipeline)

    def table_counts(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return {name: int(conn.execute(select(func.count()).select_from(t)).scalar() or 0)
                    for name, t in S.metadata.tables.items()}


def open_store(url: str | None = None, schema: str = "existing") -> Store:
    """The store a command reads (by default it must exist at this release's revision)."""
    return Store(url or os.environ.get("RISKSTREAM_STORE_URL", DEFAULT_STORE_URL), schema)


def json_rows(rows: Iterable[dict]) -> list[dict]:
    return [dict(r) for r in rows]
