"""Candidate rebuilds of the interval join from the archive (DESIGN.md section 4, replay queue).

An entry set is the pending replay-queue entries of one merchant and one queue date. Its rebuild
interval is the payment-time range its events (old and new versions) can affect:
  a payment at t affects payment time t;
  a signal at s affects payments in [s - 8 min, s + 47 min].
The hull is split at midnight (one published piece per day) and widened to any published piece it
overlaps, so a new generation replaces whole pieces and never leaves a gap or an overlap.

The rebuild reads the merchant's payments in the piece and the signals in
[start - 47 min, end + 8 min] from the archive (latest revision per event, queued records
included) and joins them with the live path's rule and identities (`pair_id`, `RULE_VERSION`,
bounds imported from the operator). The join itself runs in DuckDB as an equi-join on
(merchant, 10-minute bucket) with the exact bounds kept as a filter.

No Dagster import here: orchestration calls these functions; so do the CLI and the tests."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable

import orjson
from sqlalchemy import select

from .join_published import (PIPELINE, Piece, in_pieces, published_outcomes, published_pairs,
                             published_pointers)
from .operators.interval_join import (LOWER_US, PAYMENTS, RULE_VERSION, SIGNALS, UPPER_US,
                                      outcome_payload, pair_id)
from .operators.interval_join import pair_payload as shared_pair_payload
from .store import schema as S
from .store.ops import Store, loads
from .timeutil import US_PER_DAY, US_PER_MIN, event_date, parse_utc_us, us_to_iso

BUCKET_US = 10 * US_PER_MIN
LIVE_DISPOSITIONS = ("accepted", "routed_to_repair")


class WatermarkNotPassed(RuntimeError):
    """The live watermarks have not passed the interval yet: rebuilding now could miss events."""


@dataclass
class EntrySet:
    merchant: str
    queue_date: str
    entry_ids: list[int]
    event_ids: list[str]

    @property
    def run_key(self) -> str:
        digest = hashlib.blake2b(",".join(map(str, self.entry_ids)).encode(),
                                 digest_size=6).hexdigest()
        return f"{PIPELINE}:{self.merchant}:{self.queue_date}:{digest}"


@dataclass
class Candidate:
    generation_id: str
    pieces: list[Piece]
    entry_ids: list[int]
    entry_events: list[str]
    based_on: list[dict]  # published pointers this candidate replaces (compare-and-set)
    pairs: list[dict] = field(default_factory=list)
    outcomes: list[dict] = field(default_factory=list)
    base_pairs: list[dict] = field(default_factory=list)
    base_outcomes: list[dict] = field(default_factory=list)
    inputs: dict = field(default_factory=dict)

    @property
    def start_us(self) -> int:
        return min(p.start_us for p in self.pieces)

    @property
    def end_us(self) -> int:
        return max(p.end_us for p in self.pieces)

    @property
    def interval_key(self) -> str:
        return ",".join(sorted({p.merchant for p in self.pieces}))


# ---------------------------------------------------------------------------- entry sets
def pending_entries(store: Store, pipeline: str = PIPELINE) -> list[dict]:
    return store.queue(pipeline, "pending")


def entry_sets(store: Store, pipeline: str = PIPELINE) -> list[EntrySet]:
    """Pending entries grouped by (merchant, queue date), in date then merchant order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for e in pending_entries(store, pipeline):
        groups.setdefault((e["key"], e["queue_date"]), []).append(e)
    return [EntrySet(m, d, sorted(e["id"] for e in rows),
                     sorted({f"{e['topic']}:{e['event_id']}" for e in rows}))
            for (m, d), rows in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0]))]


def entries_by_id(store: Store, ids: Iterable[int]) -> list[dict]:
    ids = list(ids)
    if not ids:
        return []
    q = S.replay_queue.c
    return store.rows(select(S.replay_queue).where(q.id.in_(ids)).order_by(q.id))


def affected_ranges(entry: dict) -> list[tuple[str, int, int]]:
    """(merchant, lo, hi) payment-time ranges an entry's old and new versions can change."""
    detail = loads(entry["detail"]) if isinstance(entry["detail"], str) else entry["detail"]
    versions = [(entry["key"], entry["event_us"])]
    if detail.get("old_event_us") is not None:
        versions.append((detail.get("old_key") or entry["key"], detail["old_event_us"]))
    out = []
    for key, t in versions:
        if entry["topic"] == PAYMENTS:
            out.append((key, t, t))
        else:
            out.append((key, t - UPPER_US, t + LOWER_US))
    return out


def split_at_midnight(merchant: str, lo: int, hi: int) -> list[Piece]:
    pieces = []
    start = lo
    while start <= hi:
        day_end = (start // US_PER_DAY + 1) * US_PER_DAY - 1
        end = min(hi, day_end)
        pieces.append(Piece(merchant, start, end))
        start = end + 1
    return pieces


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(a, b) for a, b in out]


def plan_pieces(store: Store, ranges: Iterable[tuple[str, int, int]],
                pipeline: str = PIPELINE) -> tuple[list[Piece], list[dict]]:
    """Day pieces covering `ranges`, widened to the published pieces they overlap; returns the
    pieces and the pointers they replace."""
    # One interval per merchant: the hull of what the entries can affect.
    hull: dict[str, tuple[int, int]] = {}
    for m, lo, hi in ranges:
        cur = hull.get(m)
        hull[m] = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))
    by_merchant = {m: [(piece.start_us, piece.end_us) for piece in split_at_midnight(m, lo, hi)]
                   for m, (lo, hi) in hull.items()}
    pointers = published_pointers(store, pipeline)
    replaced: dict[tuple, dict] = {}
    pieces: list[Piece] = []
    for m, spans in sorted(by_merchant.items()):
        mine = [p for p in pointers if p["interval_key"] == m]
        merged = _merge(spans)
        while True:
            grown = list(merged)
            for p in mine:
                for lo, hi in merged:
                    if p["interval_start_us"] <= hi and lo <= p["interval_end_us"]:
                        grown.append((p["interval_start_us"], p["interval_end_us"]))
                        replaced[(m, p["interval_start_us"], p["interval_end_us"])] = p
            grown = _merge(grown)
            if grown == merged:
                break
            merged = grown
        for lo, hi in merged:
            pieces.extend(split_at_midnight(m, lo, hi))
    based_on = [{"interval_key": p["interval_key"], "start_us": p["interval_start_us"],
                 "end_us": p["interval_end_us"], "generation_id": p["generation_id"],
                 "version": p["version"]} for _, p in sorted(replaced.items())]
    return pieces, based_on


def generation_id_for(pieces: list[Piece], entry_ids: list[int], based_on: list[dict]) -> str:
    raw = orjson.dumps({"rule": RULE_VERSION, "pieces": [p.as_dict() for p in pieces],
                        "entries": sorted(entry_ids),
                        "based_on": [b["generation_id"] for b in based_on]},
                       option=orjson.OPT_SORT_KEYS)
    # Identifier-safe: candidate tables in the warehouse are named after it.
    return "g_" + hashlib.blake2b(raw, digest_size=8).hexdigest()


# ---------------------------------------------------------------------------- watermarks
def live_watermarks(store: Store, pipeline: str = PIPELINE) -> dict[str, int | None]:
    """Input watermarks of the latest committed batch (the checkpoint's metrics row); with
    scaled-out workers the minimum over them, None while any worker has none."""
    from .workers import progress
    out: dict[str, int | None] = {PAYMENTS: None, SIGNALS: None}
    snaps = [(w.metrics or {}).get("input_wm") or {} for w in progress(store, pipeline)]
    for topic in out:
        marks = [wm.get(topic) for wm in snaps]
        known = [m for m in marks if m is not None]
        if known and len(known) == len(marks):
            out[topic] = min(known)
    return out


def check_watermarks(store: Store, pieces: list[Piece], pipeline: str = PIPELINE) -> None:
    wm = live_watermarks(store, pipeline)
    end = max(p.end_us for p in pieces)
    pay, risk = wm[PAYMENTS], wm[SIGNALS]
    if pay is None or risk is None or not (pay > end and risk > end + UPPER_US):
        raise WatermarkNotPassed(
            f"rebuild needs payment_wm > {us_to_iso(end)} and risk_wm > "
            f"{us_to_iso(end + UPPER_US)}; live has payment_wm={us_to_iso(pay)} "
            f"risk_wm={us_to_iso(risk)}")


# ---------------------------------------------------------------------------- inputs
def latest_revisions(store: Store, topic: str, merchant: str, lo: int, hi: int,
                     pipeline: str = PIPELINE) -> list[dict]:
    """Latest revision per event among archived records (accepted or queued) whose latest
    revision lies on `merchant` within [lo, hi]."""
    a = S.archive.c
    # Candidates by position first, then every revision of those ids (a later revision may have
    # moved the event out of the range, or to another merchant).
    ids = {r["event_id"] for r in store.rows(
        select(a.event_id).where(a.pipeline == pipeline, a.topic == topic, a.key == merchant,
                                 a.event_us >= lo, a.event_us <= hi,
                                 a.disposition.in_(LIVE_DISPOSITIONS)))}
    if not ids:
        return []
    best: dict[str, dict] = {}
    idl = sorted(ids)
    for i in range(0, len(idl), 500):
        for r in store.rows(select(a.event_id, a.revision, a.key, a.event_us, a.payload,
                                   a.disposition).where(
                a.pipeline == pipeline, a.topic == topic, a.event_id.in_(idl[i:i + 500]),
                a.disposition.in_(LIVE_DISPOSITIONS))):
            cur = best.get(r["event_id"])
            if cur is None or r["revision"] > cur["revision"]:
                best[r["event_id"]] = r
    return sorted((r for r in best.values()
                   if r["key"] == merchant and lo <= r["event_us"] <= hi),
                  key=lambda r: (r["event_us"], r["event_id"]))


def load_inputs(store: Store, pieces: list[Piece]) -> tuple[list[dict], list[dict]]:
    payments: dict[str, dict] = {}
    signals: dict[str, dict] = {}
    for p in pieces:
        for r in latest_revisions(store, PAYMENTS, p.merchant, p.start_us, p.end_us):
            payments[r["event_id"]] = r
        for r in latest_revisions(store, SIGNALS, p.merchant, p.start_us - LOWER_US,
                                  p.end_us + UPPER_US):
            signals[r["event_id"]] = r
    return list(payments.values()), list(signals.values())


# ---------------------------------------------------------------------------- the join
def duck_load(con, table: str, columns: dict[str, str], rows: Iterable[Iterable],
              replace: bool = True, temp: bool = False) -> int:
    """Bulk-load rows into a DuckDB table through a newline-delimited JSON file (row-by-row
    inserts cost about 100x more)."""
    import os
    import tempfile
    cols = [str(c) for c in columns]
    if replace:
        kind = "TEMP TABLE" if temp else "TABLE"
        decl = ", ".join(f'"{c}" {t}' for c, t in columns.items())
        con.execute(f"CREATE OR REPLACE {kind} {table} ({decl})")
    fd, path = tempfile.mkstemp(suffix=".ndjson")
    n = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            for row in rows:
                fh.write(orjson.dumps(dict(zip(cols, row, strict=True)),
                                      option=orjson.OPT_NON_STR_KEYS))
                fh.write(b"\n")
                n += 1
        if n:
            spec = "{" + ", ".join(f"'{c}': '{t}'" for c, t in columns.items()) + "}"
            names = ", ".join(f'"{c}"' for c in cols)
            con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM "
                        f"read_json('{path}', format='newline_delimited', columns={spec})")
    finally:
        os.unlink(path)
    return n


SIDE_COLUMNS = {"idx": "INTEGER", "merchant": "VARCHAR", "t": "BIGINT"}


def _load_side(con, table: str, rows: list[dict]) -> None:
    duck_load(con, table, SIDE_COLUMNS, ((i, r["key"], r["event_us"]) for i, r in enumerate(rows)),
              temp=True)


BUCKETED_JOIN_SQL = """
WITH pay_buckets AS (
    SELECT p.idx, p.merchant, p.t, UNNEST(range((p.t - {lower}) // {bucket},
                                                (p.t + {upper}) // {bucket} + 1)) AS bucket
    FROM {pay} p
)
SELECT pb.idx AS pay_idx, s.idx AS sig_idx
FROM pay_buckets pb
JOIN (SELECT idx, merchant, t, t // {bucket} AS bucket FROM {sig}) s
  ON s.merchant = pb.merchant AND s.bucket = pb.bucket
WHERE s.t BETWEEN pb.t - {lower} AND pb.t + {upper}
"""

PLAIN_JOIN_SQL = """
SELECT p.idx AS pay_idx, s.idx AS sig_idx
FROM {pay} p JOIN {sig} s ON s.merchant = p.merchant
WHERE s.t BETWEEN p.t - {lower} AND p.t + {upper}
"""


def join_sql(pay: str, sig: str, bucketed: bool = True) -> str:
    sql = BUCKETED_JOIN_SQL if bucketed else PLAIN_JOIN_SQL
    return sql.format(pay=pay, sig=sig, lower=LOWER_US, upper=UPPER_US, bucket=BUCKET_US)


def pair_payload(p: dict, s: dict, p_payload: dict, s_payload: dict) -> dict:
    """The live operator's pair payload, field for field, so equal pairs hash equally."""
    pid = pair_id(RULE_VERSION, p["event_id"], p["revision"], s["event_id"], s["revision"])
    return shared_pair_payload(RULE_VERSION, pid, p["key"], p["event_id"], p["revision"],
                               s["event_id"], s["revision"], us_to_iso(p["event_us"]),
                               us_to_iso(s["event_us"]), p_payload.get("amount_cents"),
                               s_payload.get("score"))


def join_pairs(con, payments: list[dict], signals: list[dict]) -> list[dict]:
    """Candidate pairs of the given latest revisions, joined in DuckDB."""
    _load_side(con, "rb_pay", payments)
    _load_side(con, "rb_sig", signals)
    matches = con.execute(join_sql("rb_pay", "rb_sig")).fetchall()
    p_payloads = [loads(r["payload"]) for r in payments]
    s_payloads = [loads(r["payload"]) for r in signals]
    pairs = [pair_payload(payments[i], signals[j], p_payloads[i], s_payloads[j])
             for i, j in matches]
    return sorted(pairs, key=lambda r: (r["payment_id"], r["signal_id"]))


def outcome_rows(payments: list[dict], pairs: list[dict]) -> list[dict]:
    """Final outcome per rebuilt payment (the interval is past both watermarks)."""
    counts: dict[str, int] = {}
    for pr in pairs:
        counts[pr["payment_id"]] = counts.get(pr["payment_id"], 0) + 1
    out = []
    for p in payments:
        payload = loads(p["payload"])
        out.append(outcome_payload(p["event_id"], p["revision"], p["key"],
                                   us_to_iso(p["event_us"]), payload.get("amount_cents"),
                                   "final", counts.get(p["event_id"], 0), RULE_VERSION))
    return sorted(out, key=lambda r: r["payment_id"])


def build_candidate(store: Store, entry_ids: list[int], con=None,
                    pieces: list[Piece] | None = None, require_watermarks: bool = True
                    ) -> Candidate:
    """Plan, check the watermark precondition and join; `con` is a DuckDB connection (the
    warehouse in orchestration, an in-memory one elsewhere). With `pieces` given (a manual
    rebuild) the entry ids only name the queued events the rebuild includes."""
    import duckdb
    entries = entries_by_id(store, entry_ids)
    if pieces is None:
        ranges = [r for e in entries for r in affected_ranges(e)]
        if not ranges:
            raise ValueError("an entry set needs at least one queue entry")
    else:
        ranges = [(p.merchant, p.start_us, p.end_us) for p in pieces]
    planned, based_on = plan_pieces(store, ranges)
    if require_watermarks:
        check_watermarks(store, planned)
    gid = generation_id_for(planned, entry_ids, based_on)
    own = con is None
    con = con or duckdb.connect()
    try:
        payments, signals = load_inputs(store, planned)
        pairs = join_pairs(con, payments, signals)
    finally:
        if own:
            con.close()
    cand = Candidate(gid, planned, sorted(entry_ids),
                     sorted({f"{e['topic']}:{e['event_id']}" for e in entries}), based_on,
                     pairs=pairs, outcomes=outcome_rows(payments, pairs))
    cand.inputs = {"payments": len(payments), "signals": len(signals)}
    cand.base_pairs = [r for r in published_pairs(store)
                       if in_pieces(r["merchant_id"], r["payment_time"], planned)]
    cand.base_outcomes = [r for r in published_outcomes(store)
                          if in_pieces(r["merchant_id"], r["payment_time"], planned)]
    return cand


def manual_pieces(merchant: str, start: str, end: str) -> list[Piece]:
    lo, hi = parse_utc_us(start), parse_utc_us(end)
    if hi < lo:
        raise ValueError(f"end {end} is before start {start}")
    return split_at_midnight(merchant, lo, hi)


def entries_in(store: Store, pieces: list[Piece], pipeline: str = PIPELINE) -> list[int]:
    """Pending or held queue entries whose affected ranges touch the pieces (a manual rebuild
    includes and settles them)."""
    q = S.replay_queue.c
    rows = store.rows(select(S.replay_queue).where(q.pipeline == pipeline,
                                                   q.status.in_(("pending", "held"))))
    out = []
    for e in rows:
        for m, lo, hi in affected_ranges(e):
            if any(p.merchant == m and p.start_us <= hi and lo <= p.end_us for p in pieces):
                out.append(e["id"])
                break
    return sorted(out)


def describe(c: Candidate) -> dict[str, Any]:
    return {"generation_id": c.generation_id, "pieces": [p.as_dict() for p in c.pieces],
            "entry_ids": c.entry_ids, "entry_events": c.entry_events,
            "based_on": c.based_on, "pairs": len(c.pairs), "base_pairs": len(c.base_pairs),
            "inputs": c.inputs, "dates": sorted({event_date(p.start_us) for p in c.pieces})}
