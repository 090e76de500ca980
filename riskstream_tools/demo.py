"""`make demo`: every pipeline's seed scenario end to end on the embedded defaults (file log +
SQLite), with a readable summary. Each section uses its own store under `.riskstream/demo/`
(recreated on every run) so the demo can be repeated and never touches the default store.

Settings (env): RISKSTREAM_DEMO_DIR (default .riskstream/demo), RISKSTREAM_DEMO_SECTIONS
(comma list; default all: join,repair,ledger,receipts,nats,evidence)."""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import time
from collections import Counter

from rich.console import Console
from rich.table import Table

from streaming.timeutil import us_to_iso

console = Console()
ALL_SECTIONS = ("join", "repair", "ledger", "receipts", "nats", "evidence")


def _store(workdir: str, name: str) -> str:
    return f"sqlite:///{os.path.join(workdir, name + '.sqlite')}"


def join_section(workdir: str) -> list[str]:
    from streaming.cli.join import outcome_rows, pair_rows
    from streaming.host.loop import Worker
    from streaming.host.settings import RunSettings
    from streaming.pipelines.join import SPEC
    from streaming.store.ops import Store
    from streaming.timeutil import US_PER_MIN

    from .workloads.join_seed import generate

    src = os.path.join(workdir, "join_seed")
    manifest = generate(7, src, 470)
    url = _store(workdir, "join")
    lines = [f"join: seed 7, {manifest['events']} events "
             f"({manifest['hard_case_lines']} hard-case lines) in {src}"]
    # 1. Drain the recording without finalizing: outcomes are provisional where unresolved.
    r1 = Worker(SPEC, RunSettings(source=src, store_url=url, checkpoint_every=200,
                                  batch_size=100)).run()
    store = Store(url)
    before = Counter(o["status"] for o in outcome_rows(store))
    # 2. Finalize the drained recording.
    r2 = Worker(SPEC, RunSettings(source=src, store_url=url, end_of_stream=True)).run()
    after = Counter(o["status"] for o in outcome_rows(store))
    current = pair_rows(store, False)
    everything = pair_rows(store, True)
    lines.append(f"  run 1 (drain): {r1.records} records, {r1.facts_written} facts, "
                 f"{r1.checkpoints} checkpoints; outcomes {dict(before)}")
    lines.append(f"  run 2 (--end-of-stream, resumed from checkpoint {r2.restored_from}): "
                 f"outcomes {dict(after)}")
    lines.append(f"  pairs: {len(current)} current, {len(everything) - len(current)} retired")
    cases = manifest["cases"]
    cur = {(r["payment_id"], r["signal_id"]): r for r in current}
    for label in ("A", "B"):
        c = cases[f"endpoint_{label}"]
        got = [s for s in c["match"] + c["no_match"] if (c["payment_id"], s) in cur]
        lines.append(f"  endpoints {label} ({c['order']}): {c['payment_id']} matches "
                     f"{', '.join(got)}; not {', '.join(s for s in c['no_match'])}")
    rev = [r for r in everything if r["signal_id"] == "risk-rev"]
    lines.append("  signal revision: " + "; ".join(
        f"risk-rev r{r['signal_rev']} {r['status']} pair {r['pair_id'][:12]}" for r in rev))
    for q in store.queue("join"):
        lines.append(f"  queued: {q['event_id']} r{q['revision']} on {q['queue_date']} "
                     f"({q['reason']}, watermark at arrival "
                     f"{us_to_iso(q['watermark_at_arrival_us'])}, {q['status']})")
    m = store.last_metrics("join")
    ck = store.latest_checkpoint("join")
    assert m is not None and ck is not None, "the demo's join run commits batches"
    st = m["state"]
    lines.append(f"  watermarks: payment_wm {m['input_wm_iso']['payments']}, "
                 f"risk_wm {m['input_wm_iso']['risk_signals']}")
    peak = st["peak"]
    lines.append(f"  state peak: {peak['records']} records / {peak['bytes']} B; hot key "
                 f"{peak['hot_key']} {peak['hot_key_records']} records / "
                 f"{peak['hot_key_bytes']} B; checkpoint {ck['size_bytes']} B in "
                 f"{ck['duration_ms']} ms")
    quarantine = Counter(q["reason"] for q in store.quarantine_rows("join"))
    lines.append(f"  quarantine: {dict(quarantine)}")
    table = Table(title="join accounting: read = accepted + duplicate + stale + quarantined + "
                        "routed_to_repair")
    for col in ("topic", "partition", "offsets", "read", "accepted", "duplicate", "stale",
                "quarantined", "routed", "closes"):
        table.add_column(col)
    for a in store.accounting("join"):
        table.add_row(a["topic"], str(a["partition"]), f"{a['first_offset']}-{a['last_offset']}",
                      str(a["read"]), str(a["accepted"]), str(a["duplicate"]), str(a["stale"]),
                      str(a["quarantined"]), str(a["routed_to_repair"]), str(a["closes"]))
    console.print(table)
    store.dispose()
    # 3. The lessons: a too-short TTL loses a valid match; idleness resumes cleanup.
    ttl_url = _store(workdir, "join_ttl")
    Worker(SPEC, RunSettings(source=src, store_url=ttl_url, end_of_stream=True,
                             ttl_us=5 * US_PER_MIN)).run()
    ttl_store = Store(ttl_url)
    ttl_pairs = {(r["payment_id"], r["signal_id"]) for r in pair_rows(ttl_store, False)}
    ttl_store.dispose()
    tc = cases["ttl"]
    lost = (tc["payment_id"], tc["signal_id"])
    lines.append(f"  too-short TTL (5 min): {len(cur) - len(ttl_pairs)} valid matches lost, "
                 f"including {lost[0]} x {lost[1]} "
                 f"({'missing' if lost not in ttl_pairs else 'present?!'} with TTL, "
                 f"{'present' if lost in cur else 'missing?!'} by default)")
    idle_url = _store(workdir, "join_idle")
    ri = Worker(SPEC, RunSettings(source=src, store_url=idle_url, batch_size=20,
                                  idle_after_us=60 * US_PER_MIN)).run()
    held = Worker(SPEC, RunSettings(source=src, store_url=_store(workdir, "join_held"),
                                    batch_size=20)).run()
    lines.append(f"  idle risk partition: state peak {held.metrics['state']['peak']['records']} "
                 f"records held vs {ri.metrics['state']['peak']['records']} with --idle-after 60")
    return lines


def evidence_section(workdir: str, root: str = os.path.join("evidence", "out")) -> list[str]:
    """One packet: the join, ledger and receipts packets and the index over every seed claim
    (`ROOT/index.html`, `ROOT/index.json`). Fails, after writing the index, if a claim fails."""
    from .evidence import index as I
    from .evidence.join import run_evidence
    from .evidence.ledger import run_ledger_evidence
    from .evidence.receipts import write_incident_packet
    src = os.path.join(workdir, "join_seed")
    if not os.path.isdir(src):
        from .workloads.join_seed import generate
        generate(7, src, 470)
    join = run_evidence(src, os.path.join(root, "join"))
    ledger = run_ledger_evidence(os.path.join(root, "ledger"))
    receipts_url = _store(workdir, "receipts")
    if not os.path.exists(receipts_url[len("sqlite:///"):]):
        sub = os.path.join(workdir, "receipts")
        os.makedirs(sub, exist_ok=True)
        importlib.import_module("riskstream_tools.demos.receipts").run_demo(sub, receipts_url)
    incident = write_incident_packet(receipts_url, os.path.join(root, "receipts"))
    claims = (I.join_claims(join, "join")
              + I.other_checks("join", "000", join.get("checks", {}), I.JOIN_CHECKS,
                               "join/evidence.md")
              + I.ledger_claims(ledger, "ledger")
              + I.other_checks("ledger", "001", ledger.get("checks", {}), I.LEDGER_CHECKS,
                               "ledger/evidence.md")
              + I.receipts_claims(incident, "receipts", incident["pictures"]))
    index = I.write_index(root, claims, I.ui_links("ui", root))
    lines = [f"evidence: {'PASS' if c.passed else 'FAIL'} {c.claim_id}: {c.result}"
             for c in claims]
    lines.append(f"evidence: index {os.path.join(root, 'index.html')} (and index.json): "
                 f"{index['passed']} PASS, {index['failed']} FAIL")
    if not index["all_pass"]:
        failed = [c.claim_id for c in claims if not c.passed]
        for line in lines:
            console.print(line, highlight=False, markup=False)
        raise RuntimeError(f"evidence claims fail: {', '.join(failed)}")
    return lines


def _section(name: str, workdir: str) -> list[str]:
    if name == "join":
        return join_section(workdir)
    if name == "evidence":
        return evidence_section(workdir)
    if name == "nats":
        try:
            socket.create_connection(("127.0.0.1", 4222), timeout=1).close()
        except OSError:
            return ["nats: skipped: NATS JetStream is not reachable on 127.0.0.1:4222"]
    mod = importlib.import_module(f"riskstream_tools.demos.{name}")
    sub = os.path.join(workdir, name)
    os.makedirs(sub, exist_ok=True)
    return mod.run_demo(sub, _store(workdir, name))


def main() -> int:
    workdir = os.environ.get("RISKSTREAM_DEMO_DIR", os.path.join(".riskstream", "demo"))
    wanted = [s.strip() for s in os.environ.get("RISKSTREAM_DEMO_SECTIONS",
                                                ",".join(ALL_SECTIONS)).split(",") if s.strip()]
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir, exist_ok=True)
    failed = []
    for name in wanted:
        t0 = time.perf_counter()
        console.rule(f"[bold]{name}")
        try:
            lines = _section(name, workdir)
        except ModuleNotFoundError as exc:
            lines = [f"{name}: not available in this build ({exc.name})"]
        except Exception as exc:  # a demo section failing must be loud, and fail the demo
            console.print_exception()
            failed.append(name)
            lines = [f"{name}: FAILED: {exc}"]
        for line in lines:
            console.print(line, highlight=False, markup=False)
        console.print(f"[dim]{name}: {time.perf_counter() - t0:.1f}s[/dim]")
    if failed:
        console.print(f"[red]demo sections failed: {', '.join(failed)}")
        return 1
    console.print(f"[green]demo complete; stores and recordings under {workdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
