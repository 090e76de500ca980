"""Commands shared by all pipelines: `queue list`, `metrics`."""

from __future__ import annotations

import click

from ..timeutil import us_to_iso
from .common import open_store, echo_json, emit_rows, format_option, store_option

QUEUE_COLUMNS = ["pipeline", "queue_date", "topic", "event_id", "revision", "reason",
                 "watermark_at_arrival", "status", "partition", "offset", "key", "event_time",
                 "status_reason", "generation_id"]


@click.group()
def queue() -> None:
    """The dated replay queue."""


@queue.command("list")
@store_option
@click.option("--pipeline", default=None)
@click.option("--status", default=None, type=click.Choice(["pending", "held", "processed"]))
@format_option
def queue_list(store_url, pipeline, status, fmt):
    """Queued records by event date, with reason, watermark at arrival and status."""
    rows = []
    for r in open_store(store_url).queue(pipeline, status):
        rows.append({**r, "watermark_at_arrival": us_to_iso(r["watermark_at_arrival_us"]),
                     "event_time": us_to_iso(r["event_us"])})
    emit_rows(rows, QUEUE_COLUMNS, fmt)


@click.command()
@store_option
@click.option("--pipeline", default=None,
              help="One pipeline, or one scaled-out worker as PIPELINE@I/N (default: the latest "
                   "of each pipeline and worker).")
@click.option("--trace", is_flag=True, help="The whole trace over time instead of the last.")
def metrics(store_url, pipeline, trace):
    """The last metrics snapshot as JSON."""
    store = open_store(store_url)
    if trace:
        echo_json(store.metrics_trace(pipeline or "join"))
    else:
        echo_json(store.last_metrics(pipeline) or {})


COMMANDS = [queue, metrics]
