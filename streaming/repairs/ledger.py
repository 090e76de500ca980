"""Signed ledger repair requests: signing, verification and the repair run.

A request is signed with HMAC-SHA256 over the canonical JSON (sorted keys) of its body, the
fields in `SIGNED_FIELDS`. The key comes from RISKSTREAM_REPAIR_KEY; on SQLite a run without it
uses a published development key and says so in its metadata; on PostgreSQL it refuses.

`run_ledger_repairs(store, key=None)` verifies every pending request (and, when asked, the held
ones again), holds unsigned or tampered ones with the reason, rebuilds each affected final
account-hour from the archive (latest included revision per payment, category versions effective
at each payment's time) and publishes the corrected revision with a predecessor link, marking
its requests repaired, in one transaction per account-hour. It is shared by the CLI and the
orchestration layer.

Verification is more than the signature:
  - the archived record the request names must still hash to the signed `subject_hash` (the
    signature protects the amount only if the archive is checked against it), and every
    archived payment a rebuild reads must still match its own stored hash;
  - a run with the development key (no RISKSTREAM_REPAIR_KEY) verifies only requests that were
    signed with the development key in a store whose ledger never ran with a configured key;
    a request signed under a configured key is never verified with the development key.
Every verification is recorded in `ledger_repair_attempts`; a held request stays held until a
retry (`riskstream ledger repair --retry-held`) verifies it."""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

import orjson
from sqlalchemy import literal_column, select, update

from ..contracts import canonical_hash, payload_hash
from ..gates import HOLD_BLOCKED, hold_reason
from ..operators.base import AGGREGATE_OVERFLOW, fits_int64
from ..operators.ledger import (CATEGORIES, PAYMENTS, RETENTION_US, window_content,
                                window_fact, window_logical_key)
from ..operators.ledger_categories import CategoryVersions, VersionRejected
from ..store import schema as S
from ..store.ops import Store, fact_rows, now_iso, write_facts
from ..store.tables_ledger import ledger_repair_attempts as RA
from ..store.tables_ledger import ledger_repair_requests as RR
from ..timeutil import US_PER_HOUR, parse_utc_us
from ..workers import input_watermark

KEY_ENV = "RISKSTREAM_REPAIR_KEY"
# Public on purpose: it only lets a developer sign on a throwaway SQLite store.
DEV_KEY = b"riskstream-development-repair-key (not a secret)"
SIGNED_FIELDS = ("request_id", "kind", "account_id", "event_hour", "hour_us", "topic",
                 "partition", "offset", "subject_id", "subject_revision", "subject_hash",
                 "reason", "watermark_us")
PIPELINE = "ledger"
FINAL_STATUSES = ("final", "corrected")


class RepairKeyMissing(RuntimeError):
    exit_code = 5


@dataclass(frozen=True)
class RepairKey:
    secret: bytes
    source: str  # "env" | "dev"

    def describe(self) -> str:
        return (f"env ({KEY_ENV})" if self.source == "env" else f"dev ({KEY_ENV} unset)")

    def sign(self, body: dict) -> str:
        return hmac.new(self.secret, canonical(body), hashlib.sha256).hexdigest()


def is_postgres(url: str) -> bool:
    return url.split(":", 1)[0].startswith("postgres")


def resolve_key(store_url: str, environ: dict | None = None) -> RepairKey:
    """The signing key for a store. Raises RepairKeyMissing on PostgreSQL without the env key."""
    env = os.environ if environ is None else environ
    value = env.get(KEY_ENV)
    if value:
        return RepairKey(value.encode(), "env")
    if is_postgres(store_url):
        raise RepairKeyMissing(
            f"{KEY_ENV} is not set: the ledger signs repair requests and will not use the "
            f"development key on PostgreSQL. Set {KEY_ENV} and start again; nothing was read or "
            f"written.")
    return RepairKey(DEV_KEY, "dev")


def canonical(body: dict) -> bytes:
    return orjson.dumps({k: body[k] for k in SIGNED_FIELDS}, option=orjson.OPT_SORT_KEYS)


def verify(key: RepairKey, row: dict) -> str | None:
    """None when the signature holds, else the reason the request is rejected."""
    sig = row.get("signature")
    if not sig:
        return "unsigned: the request carries no signature"
    want = key.sign(row)
    if not hmac.compare_digest(want, sig):
        return ("bad_signature: the signature does not match the request body (tampered, or "
                "signed with another key)")
    return None


def archived_hash(payload_text: str) -> str:
    """The hash of an archived payload as stored now (recomputed, not read from its column)."""
    return canonical_hash(orjson.loads(payload_text))[1]


def verify_subject(conn, row: dict) -> str | None:
    """None when the archived record the request names still is the one that was signed."""
    a = S.archive.c
    found = conn.execute(select(a.event_id, a.revision, a.payload, a.payload_hash).where(
        a.pipeline == PIPELINE, a.topic == row["topic"], a.partition == row["partition"],
        a.offset == row["offset"])).mappings().first()
    where = f"{row['topic']}:{row['partition']}:{row['offset']}"
    if found is None:
        return f"subject_missing: no archived record at {where}"
    if (found["event_id"], found["revision"]) != (row["subject_id"], row["subject_revision"]):
        return (f"subject_mismatch: the archive holds {found['event_id']} revision "
                f"{found['revision']} at {where}, the request names {row['subject_id']} revision "
                f"{row['subject_revision']}")
    now = archived_hash(found["payload"])
    if now != row["subject_hash"] or found["payload_hash"] != row["subject_hash"]:
        return (f"subject_changed: the archived payload at {where} hashes to {now}, the signed "
                f"subject_hash is {row['subject_hash']} (the archive was altered after signing)")
    return None


def configured_key_used(store: Store) -> bool:
    """True when a ledger run of this store signed with a configured key."""
    r = S.runs.c
    return any(str(orjson.loads(row["settings"]).get("repair_key", "")).startswith("env")
               for row in store.rows(select(r.settings).where(r.pipeline == PIPELINE)))


def key_policy(key: RepairKey, row: dict, env_store: bool) -> str | None:
    """None when this run's key may verify the request at all."""
    if key.source == "dev" and row["key_source"] != "dev":
        return (f"dev_key_refused: the request was signed under a configured key "
                f"(key_source={row['key_source']}); a run without {KEY_ENV} never verifies it "
                f"with the development key")
    if key.source == "dev" and env_store:
        return (f"dev_key_refused: a ledger run of this store signed with a configured key; "
                f"a request claiming the development key is not applied without {KEY_ENV}")
    if key.source == "env" and row["key_source"] != "env":
        return ("key_source_mismatch: the request was signed with the development key; this "
                f"run verifies with the configured key ({KEY_ENV})")
    return None


class ArchiveChanged(RuntimeError):
    """An archived payment no longer matches its stored hash: the rebuild would be wrong."""


# ---------------------------------------------------------------------------- rebuild
def _category_versions(store: Store) -> CategoryVersions:
    a = S.archive.c
    rows = store.rows(select(a.payload, a.payload_hash, a.partition, a.offset, a.arrival_us)
                      .where(a.pipeline == PIPELINE, a.topic == CATEGORIES,
                             a.disposition.in_(("accepted", "routed_to_repair")))
                      .order_by(a.arrival_us, a.partition, a.offset))
    cats = CategoryVersions()
    for r in rows:
        p = orjson.loads(r["payload"])
        to = p.get("effective_to")
        v = [parse_utc_us(p["effective_from"]), parse_utc_us(to) if to else None,
             p["version_id"], p["category"], p["high_risk"], r["payload_hash"]]
        try:
            if cats.check(p["merchant_id"], v) == "new":
                cats.add(p["merchant_id"], v)
        except VersionRejected:  # cannot happen for archived versions; keep the first
            continue
    return cats


def _rows(conn, stmt) -> list[dict]:
    return [dict(r) for r in conn.execute(stmt).mappings()]


def rebuild_window(conn, account: str, hour_us: int, included_positions: set,
                   cats: CategoryVersions) -> tuple[dict, list[str]]:
    """Content of one account-hour from the archive, and the payment IDs it holds. A payment
    counts with its latest included revision: accepted live, or routed and covered by a
    verified (or already repaired) request."""
    a = S.archive.c
    in_hour = _rows(conn, select(a.event_id).where(
        a.pipeline == PIPELINE, a.topic == PAYMENTS, a.event_us >= hour_us,
        a.event_us < hour_us + US_PER_HOUR).distinct())
    ids = sorted({r["event_id"] for r in in_hour})
    latest: dict[str, dict] = {}
    for i in range(0, len(ids), 500):
        for r in _rows(conn, select(a.event_id, a.revision, a.payload, a.event_us, a.partition,
                                   a.offset, a.disposition)
                            .where(a.pipeline == PIPELINE, a.topic == PAYMENTS,
                                   a.event_id.in_(ids[i:i + 500]))):
            if r["disposition"] == "accepted":
                pass
            elif r["disposition"] == "routed_to_repair":
                if (PAYMENTS, r["partition"], r["offset"]) not in included_positions:
                    continue
            else:
                continue
            cur = latest.get(r["event_id"])
            if cur is None or r["revision"] > cur["revision"]:
                latest[r["event_id"]] = r
    stored = {(r["partition"], r["offset"]): r["payload_hash"] for r in _rows(conn, select(
        a.partition, a.offset, a.payload_hash).where(
        a.pipeline == PIPELINE, a.topic == PAYMENTS,
        a.event_id.in_(sorted(latest))))} if latest else {}
    for r in latest.values():
        if archived_hash(r["payload"]) != stored.get((r["partition"], r["offset"])):
            raise ArchiveChanged(
                f"archive_changed: the archived payment {r['event_id']} at {PAYMENTS}:"
                f"{r['partition']}:{r['offset']} no longer matches its stored hash")
    payments = []
    held_ids = []
    for pid in sorted(latest):
        r = latest[pid]
        p = orjson.loads(r["payload"])
        t = r["event_us"]
        if p["account_id"] == account and t - t % US_PER_HOUR == hour_us:
            payments.append((p["merchant_id"], p["amount_cents"], t))
            held_ids.append(pid)
    return window_content(account, hour_us, payments, cats), held_ids


def _payments_watermark(store: Store) -> int:
    """The ledger's committed payments watermark (the minimum over its workers' latest metrics
    snapshots)."""
    return input_watermark(store, PIPELINE, PAYMENTS)


def latest_fact_query(logical_key: str):
    """The newest window fact of a logical key. The constants are literal so the planner can
    match the partial index ix_facts_ledger_window (a bound parameter would not prove it)."""
    f = S.facts.c
    return select(S.facts).where(
        f.pipeline == literal_column(f"'{PIPELINE}'"), f.kind == literal_column("'window'"),
        f.logical_key == logical_key).order_by(f.id.desc()).limit(1)


def _latest_fact(conn, logical_key: str) -> dict | None:
    row = conn.execute(latest_fact_query(logical_key)).mappings().first()
    return dict(row) if row else None


def run_ledger_repairs(store: Store, key: RepairKey | None = None, retry_held: bool = False,
                       ids: list[str] | None = None) -> dict:
    """Verify and apply every pending ledger repair request (with `retry_held`, the held ones
    again; `ids` narrows the retry to those requests). Returns a summary; `still_held` counts
    the requests left held in the store after the run."""
    key = key or resolve_key(store.url)
    c = RR.c
    statuses = ("pending", "held") if retry_held else ("pending",)
    candidates = store.rows(select(RR).where(c.status.in_(statuses)).order_by(c.request_id))
    if ids:
        wanted = set(ids)
        candidates = [r for r in candidates if r["status"] == "pending" or
                      r["request_id"] in wanted]
    summary = {"key": key.describe(), "key_source": key.source,
               "pending": sum(r["status"] == "pending" for r in candidates),
               "retried": [r["request_id"] for r in candidates if r["status"] == "held"],
               "held": [], "repaired": [], "published": [], "unchanged": [], "waiting": [],
               "blocked": None, "still_held": 0}
    blocked = hold_reason(store, PIPELINE)
    if blocked and blocked.startswith(HOLD_BLOCKED):
        # Open blockers of the ledger hold every publication until a decision resolves them.
        summary["blocked"] = blocked
        summary["still_held"] = _held_count(store)
        return summary
    env_store = key.source == "dev" and configured_key_used(store)
    verified: dict[tuple[str, int], list[dict]] = {}
    attempts: list[dict] = []
    held_rows = []
    stamp = now_iso()
    with store.engine.connect() as conn:
        for r in candidates:
            why = key_policy(key, r, env_store) or verify(key, r) or verify_subject(conn, r)
            attempts.append({"request_id": r["request_id"], "attempted_at": stamp,
                             "key_source": key.source, "retry": int(r["status"] == "held"),
                             "result": "held" if why else "verified", "reason": why})
            if why:
                held_rows.append((r["request_id"], why))
            else:
                verified.setdefault((r["account_id"], r["hour_us"]), []).append(r)
    with store.engine.begin() as conn:
        if attempts:
            conn.execute(RA.insert(), attempts)
        for rid, why in held_rows:
            conn.execute(update(RR).where(c.request_id == rid, c.status.in_(statuses))
                         .values(status="held", status_reason=why))
    summary["held"] = [{"request_id": rid, "reason": why} for rid, why in held_rows]
    if verified:
        _apply(store, key, verified, summary, statuses)
    summary["still_held"] = _held_count(store)
    return summary


def _held_count(store: Store) -> int:
    c = RR.c
    return len(store.rows(select(c.request_id).where(c.status == "held")))


def _hold(conn, reqs: list[dict], why: str, statuses: tuple, summary: dict) -> None:
    c = RR.c
    for r in reqs:
        conn.execute(update(RR).where(c.request_id == r["request_id"], c.status.in_(statuses))
                     .values(status="held", status_reason=why))
        summary["held"].append({"request_id": r["request_id"], "reason": why})


def _apply(store: Store, key: RepairKey, verified: dict, summary: dict, statuses: tuple) -> None:
    c = RR.c
    cats = _category_versions(store)
    wm = _payments_watermark(store)
    done = store.rows(select(c.topic, c.partition, c.offset).where(c.status == "repaired"))
    included = {(r["topic"], r["partition"], r["offset"]) for r in done}
    for reqs in verified.values():
        included.update((r["topic"], r["partition"], r["offset"]) for r in reqs)
    for (account, hour_us), reqs in sorted(verified.items()):
        logical = window_logical_key(account, hour_us)
        with store.engine.begin() as conn:
            last = _latest_fact(conn, logical)
            if last is not None:
                final = last["status"] in FINAL_STATUSES
            else:  # nothing published live: final once the watermark passed the cutoff
                final = wm >= hour_us + US_PER_HOUR + RETENTION_US
            if not final:
                summary["waiting"].extend(r["request_id"] for r in reqs)
                continue  # the live path may still publish this window: repair it once final
            try:
                content, _ = rebuild_window(conn, account, hour_us, included, cats)
            except ArchiveChanged as exc:
                _hold(conn, reqs, str(exc), statuses, summary)
                continue
            if not fits_int64(content["total_cents"]):
                _hold(conn, reqs, f"{AGGREGATE_OVERFLOW}: the rebuilt total "
                      f"{content['total_cents']} of {logical} leaves the 64-bit range; nothing "
                      f"was published", statuses, summary)
                continue
            if last is not None:
                prev = orjson.loads(last["payload"])
                prev_content = {k: v for k, v in prev.items() if k not in ("revision", "status")}
            else:
                prev, prev_content = None, None
            if (last is not None and prev_content is not None
                    and payload_hash(prev_content) == payload_hash(content)):
                fact_key = last["fact_key"]
                note = "rebuilt from the archive: no change to the published revision"
                summary["unchanged"].append(fact_key)
            else:
                revision = (prev["revision"] + 1) if prev else 1
                fact = window_fact(account, hour_us, revision, "corrected", content)
                res = write_facts(conn, PIPELINE, fact_rows([fact]), None)
                fact_key = fact.fact_key
                note = (f"rebuilt from the archive: revision {revision} supersedes "
                        f"{fact.predecessor_key}" if fact.predecessor_key else
                        "rebuilt from the archive: first revision of this account-hour")
                if res.rejected:
                    raise RuntimeError(f"sink rejected corrected revision {fact_key}")
                summary["published"].append(fact_key)
            stamp = now_iso()
            for r in reqs:
                conn.execute(update(RR).where(c.request_id == r["request_id"],
                                              c.status.in_(statuses))
                             .values(status="repaired", status_reason=note,
                                     corrected_fact_key=fact_key, repaired_at=stamp))
            summary["repaired"].extend(r["request_id"] for r in reqs)
