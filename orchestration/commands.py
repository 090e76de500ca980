"""CLI commands that run Dagster jobs, registered into `riskstream` through the
`riskstream.commands` entry point: `riskstream repair run`. Dagster is imported only inside the
command, so loading this module costs only click."""

from __future__ import annotations

import click

from streaming.cli.common import fail, needs_extra, store_option
from streaming.join_published import generation_rows
from streaming.store.ops import open_store

warehouse_option = click.option(
    "--warehouse", "warehouse_path", envvar="RISKSTREAM_DUCKDB_PATH",
    default=".riskstream/warehouse.duckdb", show_default=True,
    help="DuckDB warehouse the rebuild validates in (one writer at a time).")


@click.group()
def repair() -> None:
    """Repairs from the dated replay queue."""


@repair.command("run")
@store_option
@warehouse_option
@click.option("--log-level", default=None, envvar="RISKSTREAM_DAGSTER_LOG_LEVEL",
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="Dagster console log level for the runs (default INFO).")
def run_repairs(store_url, warehouse_path, log_level):
    """Run the sensor's rebuild job in-process over every pending entry set."""
    with needs_extra("orchestration"):
        from .repair import run_pending  # Dagster loads only here
    outcomes = run_pending(store_url, warehouse_path, log_level=log_level)
    if not outcomes:
        click.echo("repair run: nothing pending")
        return
    for o in outcomes:
        entries = f"entries {','.join(map(str, o.entry_ids))}" if o.entry_ids else "pending set"
        click.echo(f"repair run {o.run_key}: {entries} -> "
                   f"{'success' if o.success else 'failed'} (run {o.run_id})")
    store = open_store(store_url)
    for g in generation_rows(store):
        if g["status"] in ("published", "held"):
            click.echo(f"  generation {g['generation_id']} {g['status']} "
                       f"{g['interval_key']} [{g['interval_start']}, {g['interval_end']}]"
                       f"{' ' + g['reason'] if g['reason'] else ''}")
    if not all(o.success for o in outcomes):
        fail("a repair run did not publish (see the held generations above)", 1)


def register(cli: click.Group) -> None:
    cli.add_command(repair)
