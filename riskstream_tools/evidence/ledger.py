"""The ledger's evidence packet for a release reviewer.

Two runs of the real worker with the ledger's `PipelineSpec`, each on a fresh SQLite store
under the output directory, with the settings the ledger demo uses:

  scenario  the seed scenario (named cases + background payments), end of stream, then the
            signed repair job: revision history, oracle, reconciliation, checkpoint meta
  pressure  background payments at a steady rate through the sink throttle: the backlog
            calculation and the backlog trace

and, through the command line, an uninterrupted and a crashed-then-restored run of the scenario
log (`ledger_crash.py`): the checkpoint/restore transcript and the sink-idempotency proof.

Every section is read back from those stores; OUT/ receives evidence.json, evidence.md,
backlog_drain.png and revisions.png."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


from streaming.cli.ledger import window_rows
from streaming.host.loop import Worker
from streaming.host.settings import RunSettings
from streaming.host.throttle import ThrottleSettings
from streaming.pipelines.ledger import make_spec, run_extra
from streaming.pipelines.ledger_accounting import equation, reconcile
from streaming.repairs.ledger import resolve_key, run_ledger_repairs
from streaming.store.ops import Store, loads
from streaming.timeutil import parse_utc_us, us_to_iso

from ..references.ledger import reference_totals
from ..workloads.ledger_seed import generate
from .join_runs import fresh_store_url
from .ledger_crash import crash_section
from .ledger_markdown import render
from .ledger_plots import draw_all
from .packet import write_packet

PIPELINE = "ledger"


@dataclass(frozen=True)
class LedgerEvidenceSettings:
    """Defaults are the ledger demo's: seed 11 with 300 background payments; the pressure
    workload of 600 payments at 4/s through a 1 rec/s sink until the backlog reaches 240,
    then 10 rec/s."""

    seed: int = 11
    payments: int = 300
    pressure_seed: int = 5
    pressure_payments: int = 600
    pressure_rate: float = 4.0
    sink_rate: float = 1.0
    backlog_limit: int = 240
    sink_capacity: float = 10.0

    def throttle(self) -> ThrottleSettings:
        return ThrottleSettings(self.sink_rate, self.backlog_limit, self.sink_capacity)


def _run_summary(res) -> dict:
    return {"records": res.records, "batches": res.batches, "facts_written": res.facts_written,
            "facts_noop": res.facts_noop, "facts_rejected": res.facts_rejected,
            "checkpoints": res.checkpoints, "elapsed_s": round(res.elapsed_s, 3)}


def named_windows(manifest: dict) -> list[tuple[str, str]]:
    """The (account, hour) pairs the scenario names, e.g. ('acct-8', '2026-10-06T10:00Z')."""
    found = {tuple(case["window"].split("|", 1)) for case in manifest["cases"].values()
             if "window" in case}
    return sorted(found)


def revision_history(store: Store, named: list[tuple[str, str]]) -> list[dict]:
    """Every revision of the named account-hours, as `ledger windows --all` lists them."""
    wanted = set(named)
    return [r for r in window_rows(store, include_all=True)
            if (r["account_id"], r["event_hour"]) in wanted]


def backlog_trace(store: Store) -> list[dict]:
    """One point per committed batch of the throttled run (the snapshots that carry a
    `backlog` dict)."""
    out = []
    for m in store.metrics_trace(PIPELINE):
        b = m.get("backlog")
        if not b or b.get("read_clock_us") is None:
            continue
        # x is the reader's clock (the throttle's), not the last committed record's.
        clock_us = b["read_clock_us"]
        out.append({"seq": m["seq"], "clock_us": clock_us, "clock": us_to_iso(clock_us),
                    "committed_clock": us_to_iso(m["clock_us"]),
                    "backlog_records": b["backlog_records"], "backlog_age_s": b["backlog_age_s"],
                    "sink_phase": b["sink_phase"], "read": b["read"],
                    "committed": b["committed"],
                    "payments_lag_s": m.get("event_time_lag_s", {}).get("payments")})
    return out


def checkpoint_meta(store: Store) -> dict | None:
    ck = store.latest_checkpoint(PIPELINE)
    if ck is None:
        return None
    meta = loads(ck["meta"])
    return {"id": ck["id"], "journal_seq": ck["journal_seq"], "serializer": ck["serializer"],
            "state_schema": ck["state_schema"], "size_bytes": ck["size_bytes"],
            "duration_ms": ck["duration_ms"], "positions": meta.get("positions"),
            "code_revision": meta.get("code_revision"), "meta": meta}


def oracle_section(store: Store, src: str) -> dict:
    current = {(r["account_id"], parse_utc_us(r["event_hour"].replace("Z", ":00Z"))):
               r["total_cents"] for r in window_rows(store, include_all=False)}
    ref = reference_totals(src)
    differ = sorted(f"{a}|{us_to_iso(h)}" for a, h in set(ref) | set(current)
                    if ref.get((a, h)) != current.get((a, h)))
    return {"account_hours": len(ref), "current_windows": len(current), "differ": differ,
            "holds": not differ}


def reconciliation_section(store: Store) -> dict:
    rows = reconcile(store)
    return {"rows": rows, "equations": [equation(r) for r in rows],
            "holds": bool(rows) and all(r["closes"] for r in rows)}


def backlog_section(res, store: Store, throttle: ThrottleSettings) -> dict:
    trace = backlog_trace(store)
    report = res.backlog or {}
    return {"settings": throttle.describe(), "report": report, "lines": list(res.backlog_lines),
            "trace": trace,
            "trace_max_backlog": max((p["backlog_records"] for p in trace), default=None),
            "trace_max_age_s": max((p["backlog_age_s"] for p in trace), default=None),
            "holds": (report.get("drained_at") is not None
                      and report.get("read") == report.get("committed")
                      and report.get("peak_backlog") == throttle.backlog_limit)}


def run_ledger_evidence(out: str, settings: LedgerEvidenceSettings | None = None) -> dict:
    """Generate both workloads under OUT/logs, run them on fresh stores under OUT/stores and
    write OUT/evidence.json, evidence.md and the pictures; return the evidence dict."""
    t_start = time.perf_counter()
    settings = settings or LedgerEvidenceSettings()
    os.makedirs(out, exist_ok=True)
    store_dir = os.path.join(out, "stores")
    src = os.path.join(out, "logs", "scenario")
    pressure_src = os.path.join(out, "logs", "pressure")
    manifest = generate(settings.seed, src, payments=settings.payments)
    pressure_manifest = generate(settings.pressure_seed, pressure_src,
                                 payments=settings.pressure_payments,
                                 rate=settings.pressure_rate, scenario=False)
    url = fresh_store_url(store_dir, "scenario")
    p_url = fresh_store_url(store_dir, "pressure")
    key = resolve_key(url)
    throttle = settings.throttle()
    named = named_windows(manifest)
    store, p_store = Store(url), Store(p_url)
    try:
        res = Worker(make_spec(key), RunSettings(source=src, store_url=url, end_of_stream=True,
                                                 extra=run_extra(key)), store=store).run()
        repairs = run_ledger_repairs(store, key)
        p_res = Worker(make_spec(key), RunSettings(
            source=pressure_src, store_url=p_url, end_of_stream=True, extra=run_extra(key),
            throttle=throttle), store=p_store).run()
        evidence: dict = {
            "packet": {"pipeline": PIPELINE, "seed": settings.seed,
                       "background_payments": settings.payments,
                       "scenario_lines": manifest["lines"],
                       "pressure": {"seed": settings.pressure_seed,
                                    "payments": settings.pressure_payments,
                                    "rate_per_s": settings.pressure_rate,
                                    "lines": pressure_manifest["lines"]},
                       "repair_key": key.describe(),
                       "runs": {"scenario": _run_summary(res), "pressure": _run_summary(p_res)},
                       "stores": {"scenario": os.path.relpath(url[len("sqlite:///"):], out),
                                  "pressure": os.path.relpath(p_url[len("sqlite:///"):], out)}},
            "repair": {"key": repairs["key"], "repaired": repairs["repaired"],
                       "held": repairs["held"], "published": repairs["published"]},
            "named_windows": [f"{a}|{h}" for a, h in named],
            "revisions": revision_history(store, named),
            "oracle": oracle_section(store, src),
            "reconciliation": {"scenario": reconciliation_section(store),
                               "pressure": reconciliation_section(p_store)},
            "checkpoint": {"scenario": checkpoint_meta(store),
                           "pressure": checkpoint_meta(p_store)},
            "backlog": backlog_section(p_res, p_store, throttle),
        }
    finally:
        store.dispose()
        p_store.dispose()
    evidence["crash_replay"] = crash_section(src, store_dir)
    evidence["pictures"] = draw_all(out, evidence)
    checks = {"backlog_drained": evidence["backlog"]["holds"],
              "oracle_agrees": evidence["oracle"]["holds"],
              "scenario_reconciles": evidence["reconciliation"]["scenario"]["holds"],
              "pressure_reconciles": evidence["reconciliation"]["pressure"]["holds"],
              "crash_replay_idempotent": evidence["crash_replay"]["holds"],
              "named_windows_corrected": all(
                  any(r["status"] == "corrected" for r in evidence["revisions"]
                      if f"{r['account_id']}|{r['event_hour']}" == w)
                  for w in evidence["named_windows"])}
    evidence["checks"] = checks
    evidence["all_hold"] = all(checks.values())
    evidence["packet"]["elapsed_s"] = round(time.perf_counter() - t_start, 3)
    write_packet(out, evidence, render)
    return evidence
