"""The interval join's evidence packet for a release reviewer.

Given a seed recording (`riskstream join generate`), the real worker runs in the configurations
the claims need, each on a fresh SQLite store under the output directory:

  default        drained first (its checkpoint then holds live state), then finalized
  idle_after     the opt-in idleness (a caught-up partition quiet for 60 min is idle)
  ttl            the intentionally too-short TTL (5 min of source time)
  uninterrupted  one pass, the reference for the crash run
  crash          the CLI in a subprocess, killed after a sink write, then rerun

The sections are read back from those stores, the historical rebuild runs last on the default
store, and OUT/ receives evidence.json, evidence.md and three pictures."""

from __future__ import annotations

import os
import time

import orjson

from streaming.operators.interval_join import RULE_VERSION
from streaming.store.ops import Store

from .join_crash import crash_replay
from .join_markdown import render
from .join_plots import draw_all
from .join_rebuild import historical_rebuild
from .join_runs import EvidenceSettings, fresh_store_url, run_worker, store_url
from .join_sections import (PIPELINE, accounting_section, asymmetric_arrival, checkpoint_section,
                            endpoints, fact_set, hot_key, idle_partition, metrics_series,
                            provisional_retractions, queue_section, ttl_run)
from .packet import write_packet

SECTIONS = ("endpoints", "asymmetric_arrival", "idle_partition", "hot_key", "checkpoint",
            "crash_replay", "provisional_retractions", "ttl", "replay_queue", "accounting",
            "historical_rebuild")


def load_manifest(source: str) -> dict:
    path = os.path.join(source, "scenario.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found: the packet needs a seed recording written by "
                                f"`riskstream join generate`")
    with open(path, "rb") as fh:
        return orjson.loads(fh.read())


def _run_summary(res) -> dict:
    return {"records": res.records, "batches": res.batches, "facts_written": res.facts_written,
            "checkpoints": res.checkpoints, "restored_from": res.restored_from,
            "elapsed_s": round(res.elapsed_s, 3)}


def run_evidence(src: str, out: str, store_dir: str | None = None,
                 settings: EvidenceSettings | None = None) -> dict:
    """Run the packet on a seed recording; write OUT/evidence.json, evidence.md and the
    pictures; return the evidence as a dict (with `checks` and `all_hold`)."""
    t_start = time.perf_counter()
    settings = settings or EvidenceSettings()
    manifest = load_manifest(src)
    os.makedirs(out, exist_ok=True)
    store_dir = store_dir or os.path.join(out, "stores")
    hot = manifest["hot_merchant"]
    timings: dict[str, float] = {}
    stores: dict[str, Store] = {}

    def timed(name, fn, *a, **kw):
        t0 = time.perf_counter()
        value = fn(*a, **kw)
        timings[name] = round(time.perf_counter() - t0, 3)
        return value

    try:
        for name in ("default", "idle_after", "ttl"):
            stores[name] = Store(fresh_store_url(store_dir, name))
        default = stores["default"]
        drained_res = timed("default_drain", run_worker, src, default, settings,
                            end_of_stream=False)
        drained_ck = default.latest_checkpoint(PIPELINE)
        default_res = timed("default_finalize", run_worker, src, default, settings)
        final_ck = default.latest_checkpoint(PIPELINE)
        idle_res = timed("idle_after", run_worker, src, stores["idle_after"], settings,
                         idle_after_us=settings.idle_after_us)
        ttl_res = timed("ttl", run_worker, src, stores["ttl"], settings, ttl_us=settings.ttl_us)
        crash = timed("crash_replay", crash_replay, src, store_dir, settings)
        evidence: dict = {
            "packet": {"pipeline": PIPELINE, "rule_version": RULE_VERSION, "source": src,
                       "seed": manifest.get("seed"), "events": manifest.get("events"),
                       "hot_merchant": hot,
                       "settings": {"batch_size": settings.batch_size,
                                    "checkpoint_every": settings.checkpoint_every,
                                    "idle_after_minutes": settings.idle_after_us / 60e6,
                                    "ttl_minutes": settings.ttl_us / 60e6,
                                    "crash_point": settings.crash_point,
                                    "repair": settings.repair},
                       "runs": {"default_drain": _run_summary(drained_res),
                                "default_finalize": _run_summary(default_res),
                                "idle_after": _run_summary(idle_res),
                                "ttl": _run_summary(ttl_res)}},
        }
        default_series = metrics_series(default, hot)
        evidence["endpoints"] = endpoints(default, manifest)
        evidence["asymmetric_arrival"] = asymmetric_arrival(default, manifest)
        evidence["idle_partition"] = idle_partition(default, stores["idle_after"], manifest,
                                                    settings.idle_after_us, default_res,
                                                    idle_res, hot)
        evidence["hot_key"] = hot_key(default_res, idle_res, default_series, hot)
        evidence["checkpoint"] = checkpoint_section(drained_ck, final_ck, default_series)
        evidence["crash_replay"] = crash
        evidence["provisional_retractions"] = provisional_retractions(default)
        evidence["ttl"] = ttl_run(default, stores["ttl"], manifest, settings.ttl_us, ttl_res)
        evidence["replay_queue"] = queue_section(default, stores["idle_after"], manifest)
        evidence["accounting"] = accounting_section(stores)
        # Draining and then finalizing must give what one finalizing pass gives.
        one_pass = Store(store_url(store_dir, "uninterrupted"))
        try:
            evidence["packet"]["drain_then_finalize_equals_one_pass"] = \
                fact_set(default) == fact_set(one_pass)
        finally:
            one_pass.dispose()
        evidence["pictures"] = timed("pictures", draw_all, out, evidence, hot)
        # Last: the rebuild publishes a generation into the default store.
        evidence["historical_rebuild"] = timed(
            "historical_rebuild", historical_rebuild, default, manifest, settings,
            os.path.join(store_dir, "warehouse.duckdb"))
    finally:
        for st in stores.values():
            st.dispose()
    checks = {name: evidence[name]["holds"] for name in SECTIONS
              if evidence[name].get("holds") is not None}
    checks["drain_then_finalize_equals_one_pass"] = \
        evidence["packet"]["drain_then_finalize_equals_one_pass"]
    evidence["checks"] = checks
    evidence["all_hold"] = all(checks.values())
    timings["total"] = round(time.perf_counter() - t_start, 3)
    evidence["packet"]["timings_s"] = timings
    write_packet(out, evidence, render)
    return evidence
