"""`riskstream join evidence`: the interval join's evidence packet for a release reviewer."""

from __future__ import annotations

import click

from streaming.cli.common import fail, needs_extra, require_extra
from streaming.timeutil import US_PER_MIN

from ..evidence.join_runs import REPAIR_MODES, EvidenceSettings
from .evidence_report import report_packet


@click.command("evidence")
@click.option("--source", required=True, type=click.Path(exists=True, file_okay=False),
              help="Seed recording written by `riskstream join generate` (with scenario.json).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for evidence.json, evidence.md and the pictures.")
@click.option("--store-dir", default=None, type=click.Path(file_okay=False),
              help="Directory for the runs' fresh SQLite stores  [default: OUT/stores]")
@click.option("--batch-size", type=int, default=5, show_default=True,
              help="Records per batch: one metrics snapshot per batch sets the traces' "
                   "resolution.")
@click.option("--checkpoint-every", type=int, default=25, show_default=True,
              help="Records between checkpoints (the crash lands between two).")
@click.option("--idle-after", type=float, default=60.0, show_default=True,
              help="Minutes of source time for the opt-in idleness run.")
@click.option("--ttl-minutes", type=float, default=5.0, show_default=True,
              help="The intentionally too-short TTL.")
@click.option("--repair", type=click.Choice(REPAIR_MODES), default="dagster", show_default=True,
              help="dagster: the repair job in process, with its dbt gates; none: no rebuild.")
def evidence(source, out_dir, store_dir, batch_size, checkpoint_every, idle_after, ttl_minutes,
             repair):
    """Run the worker in the configurations the join's claims need and write the packet.
    Exits 1 when any check does not hold (the packet is written either way)."""
    require_extra("evidence", "matplotlib", "duckdb")
    if repair == "dagster":
        require_extra("orchestration", "dagster", "dagster_dbt")
    with needs_extra("evidence"):
        from ..evidence.join import run_evidence  # matplotlib and DuckDB load only here
    try:
        settings = EvidenceSettings(batch_size=batch_size, checkpoint_every=checkpoint_every,
                                    idle_after_us=int(idle_after * US_PER_MIN),
                                    ttl_us=int(ttl_minutes * US_PER_MIN), repair=repair)
    except ValueError as exc:
        fail(str(exc))
    try:
        ev = run_evidence(source, out_dir, store_dir=store_dir, settings=settings)
    except FileNotFoundError as exc:
        fail(str(exc))
    report_packet("join", ev, out_dir, ev["packet"]["timings_s"]["total"],
                  [f"historical_rebuild: {ev['historical_rebuild']['statement']}"])
