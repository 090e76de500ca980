"""`riskstream bench`: throughput, peak memory and correctness of every pipeline, each against
its reference in the same run (see riskstream_tools/benchmarks/catalog.py for the scenarios)."""

from __future__ import annotations

import json
import os
import platform
import time

import click
from rich.console import Console
from rich.table import Table

from streaming import hashing

from ..benchmarks import catalog
from ..benchmarks import scenarios as sc

DEFAULT_JSON = os.path.join("bench", "results", "bench.json")
DEFAULT_WORKDIR = os.path.join(".riskstream", "bench")


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if v < 100 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def print_table(results: list[dict], path: str, console: Console) -> None:
    table = Table(title=f"riskstream bench ({path})")
    for col, just in (("scenario", "left"), ("events", "right"), ("seconds", "right"),
                      ("events/s", "right"), ("reference/s", "right"), ("ratio", "right"),
                      ("peak RSS MiB", "right"), ("equal", "center"), ("stages (s)", "left")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in results:
        if "skipped" in r:
            table.add_row(r["scenario"], _fmt(r["events"]), "-", "-", "-", "-", "-",
                          "[yellow]skipped[/yellow]", r["skipped"][:80])
            continue
        if "error" in r:
            table.add_row(r["scenario"], _fmt(r["events"]), "-", "-", "-", "-", "-",
                          "[red]error[/red]", r["error"][:80])
            continue
        stages = ", ".join(f"{k.removesuffix('_s')} {_fmt(v)}"
                           for k, v in r.get("stages", {}).items() if v is not None)
        extra = ", ".join(f"{k.removesuffix('_s')} {_fmt(r[k])}"
                          for k in ("checkpoint_dump_s", "p50_ms", "p99_ms", "recovery_s",
                                    "target_seconds", "run_seconds")
                          if r.get(k) is not None)
        # What set the run's pace (`scenarios.limited_by`), where the run measured it.
        limit = f"limited by {r['limited_by']}" if r.get("limited_by") else ""
        stages = ", ".join(x for x in (stages, extra, limit) if x)
        table.add_row(r["scenario"], _fmt(r["events"]), _fmt(r["seconds"]),
                      _fmt(r["events_per_s"]), _fmt(r["reference_events_per_s"]),
                      _fmt(r["ratio"]), _fmt(r["peak_rss_mib"]),
                      "[green]yes[/green]" if r["reference_equal"] else "[red]NO[/red]", stages)
    console.print(table)


@click.command()
@click.option("--only", "only", multiple=True, type=click.Choice(catalog.ALL),
              help="Run only this scenario (repeatable).")
@click.option("--all", "run_all", is_flag=True,
              help="Run every scenario, the NATS, rebuild and follow ones too (what `make bench` "
                   "does); without it (and without --only) the hot-path scenarios run.")
@click.option("--events", type=int, default=sc.DEFAULT_EVENTS, show_default=True,
              help="Events per scenario.")
@click.option("--json", "json_path", default=DEFAULT_JSON, show_default=True,
              type=click.Path(dir_okay=False), help="Where the results are written.")
@click.option("--workdir", default=DEFAULT_WORKDIR, show_default=True,
              type=click.Path(file_okay=False),
              help="Inputs (generated once per size) and SQLite stores.")
def bench(only: tuple[str, ...], run_all: bool, events: int, json_path: str,
          workdir: str) -> None:
    """Run the benchmark scenarios; exit 1 when any scenario errors or disagrees with its
    reference, however fast it ran. A scenario whose services are missing is skipped (outside
    CI) with a line saying so."""
    console = Console()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    names = list(only) or list(catalog.ALL if run_all else catalog.DEFAULT)
    results = catalog.run(names, events, workdir)
    doc = {"started": started, "events": events,
           "machine": {"python": platform.python_version(), "platform": platform.platform(),
                       "cpus": os.cpu_count(),
                       # The content hash's vector width on this processor (fortieth round).
                       "hash_lanes": hashing.lanes()},
           "scenarios": results}
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as fh:
        json.dump(doc, fh, indent=2, default=str)
    print_table(results, json_path, console)
    bad = catalog.failed(results)
    if bad:
        # The table cuts an error to a cell; a failed run (in CI above all) needs the whole of
        # it, traceback and all, to be diagnosed from its output alone.
        for r in results:
            if "error" in r:
                console.print(f"[red]{r['scenario']}[/red]:", markup=True)
                console.print(r["error"], markup=False, highlight=False, soft_wrap=True)
        console.print(f"[red]failed: {', '.join(bad)}[/red]")
        raise SystemExit(1)
