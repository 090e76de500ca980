"""Signed ledger repair requests: signing, verification and the repair run.

A request is signed with HMAC-SHA256 over the canonical JSON (sorted keys) of its body, the
fields in `SIGNED_FIELDS`. The key comes from RISKSTREAM_REPAIR_KEY; on SQLite a run without it
uses a published development key and says so in its metadata; on PostgreSQL it refuses.

`run_ledger_repairs(store, key=None)` verifies every pending request, holds unsigned or tampered
ones with the reason, rebuilds each affected final account-hour from the archive (latest
included revision per payment, category versions effective at each payment's time) and
publishes the corrected revision with a predecessor link, marking its requests repaired, in one
transaction per account-hour. It is shared by the CLI and the orchestration layer."""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import select, update

from ..contracts import payload_hash
from ..operators.ledger import (CATEGORIES, PAYMENTS, RETENTION_US, window_content,
                                window_fact, window_logical_key)
from ..operators.ledger_categories import CategoryVersions, VersionRejected
from ..store import schema as S
from ..store.ops import Store, now_iso, write_facts
from ..store.tables_ledger import ledger_repair_requests as RR
from ..timeutil import NEG_INF, US_PER_HOUR, parse_utc_us

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
    """The ledger's committed payments watermark (from its latest metrics snapshot)."""
    snap = store.last_metrics(PIPELINE)
    if not snap:
        return NEG_INF
    return snap.get("input_wm", {}).get(PAYMENTS, NEG_INF)


def _latest_fact(conn, logical_key: str) -> dict | None:
    f = S.facts.c
    row = conn.execute(select(S.facts).where(
        f.pipeline == PIPELINE, f.kind == "window", f.logical_key == logical_key)
        .order_by(f.id.desc()).limit(1)).mappings().first()
    return dict(row) if row else None


def run_ledger_repairs(store: Store, key: RepairKey | None = None) -> dict:
    """Verify and apply every pending ledger repair request. Returns a summary."""
    key = key or resolve_key(store.url)
    c = RR.c
    pending = store.rows(select(RR).where(c.status == "pending").order_by(c.request_id))
    summary: dict[str, Any] = {"key": key.describe(), "pending": len(pending), "held": [],
                               "repaired": [], "published": [], "unchanged": [], "waiting": []}
    verified: dict[tuple[str, int], list[dict]] = {}
    held_rows = []
    for r in pending:
        why = verify(key, r)
        if why:
            held_rows.append((r["request_id"], why))
        else:
            verified.setdefault((r["account_id"], r["hour_us"]), []).append(r)
    if held_rows:
        with store.engine.begin() as conn:
            for rid, why in held_rows:
                conn.execute(update(RR).where(c.request_id == rid, c.status == "pending")
                             .values(status="held", status_reason=why))
        summary["held"] = [{"request_id": rid, "reason": why} for rid, why in held_rows]
    if not verified:
        return summary
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
            content, _ = rebuild_window(conn, account, hour_us, included, cats)
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
                res = write_facts(conn, PIPELINE, [fact], None)
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
                                              c.status == "pending")
                             .values(status="repaired", status_reason=note,
                                     corrected_fact_key=fact_key, repaired_at=stamp))
            summary["repaired"].extend(r["request_id"] for r in reqs)
    return summary
