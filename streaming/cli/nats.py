"""`riskstream nats ...`: load file-log recordings into NATS JetStream and inspect streams.
The NATS client is imported inside the commands, so other commands do not load it."""

from __future__ import annotations

import click

from .common import echo_json, fail, progress_bar

DEFAULT_URL = "nats://127.0.0.1:4222?stream=riskstream"

url_option = click.option(
    "--url", envvar="RISKSTREAM_NATS_URL", default=DEFAULT_URL, show_default=True,
    help="nats://HOST:PORT?stream=NAME (optional &timeout=SECONDS).")


@click.group()
def nats() -> None:
    """NATS JetStream, the production source log: one subject per topic-partition."""


@nats.command()
@click.option("--source", required=True, type=click.Path(exists=True, file_okay=False),
              help="File-log recording: DIR/<topic>/p<N>.jsonl.")
@url_option
@click.option("--recreate", is_flag=True, help="Delete the stream first if it exists.")
@click.option("--rate", type=float, default=None,
              help="Messages per second, paced steadily (default: as fast as acknowledged).")
@click.option("--pipeline", type=click.Choice(["join", "ledger", "receipts"]), default=None,
              help="Re-key: route each record by this pipeline's key, partition = "
                   "crc32(utf-8 key) mod --partitions (needed for --worker I/N).")
@click.option("--partitions", type=int, default=None,
              help="With --pipeline: partitions of every keyed topic.")
@click.option("--topics", default=None,
              help="Comma-separated topics to publish (default: every topic of DIR).")
@click.option("--partitioner", default="recorded", show_default=True,
              help="Name of the key->partition function the producers used, when the "
                   "recording's own routing is kept; stored in the stream layout and compared "
                   "on restore.")
@click.option("--quiet", is_flag=True)
def publish(source, url, recreate, rate, pipeline, partitions, topics, partitioner, quiet):
    """Append a file-log recording to a stream (created when missing), in replay order."""
    from ..sources.nats_publish import PublishError, Routing, publish_file_log
    if (pipeline is None) != (partitions is None):
        fail("--pipeline and --partitions go together")
    if partitions is not None and partitions < 1:
        fail("--partitions must be >= 1")
    routing = Routing(pipeline, partitions)
    try:
        with progress_bar("nats publish", enabled=None if not quiet else False) as cb:
            summary = publish_file_log(
                source, url, recreate=recreate, partitioner=partitioner, progress=cb,
                rate=rate, routing=routing,
                topics=[t for t in topics.split(",") if t] if topics else None)
    except PublishError as exc:
        fail(str(exc))
    click.echo(f"published {summary['messages']} messages ({summary['duplicates']} duplicates "
               f"dropped by message ID) to stream {summary['stream']!r} at "
               f"{summary['server']} in {summary['seconds']:.2f}s "
               f"(created {summary['stream_created']}; partitioner {summary['partitioner']})")
    for subject, n in summary["subjects"].items():
        click.echo(f"  {subject}: {n}")


@nats.command()
@url_option
def info(url):
    """The stream's layout, creation time and messages per subject, as JSON."""
    from ..sources.nats_publish import PublishError, describe_stream
    try:
        echo_json(describe_stream(url))
    except PublishError as exc:
        fail(str(exc))


@nats.command()
@url_option
@click.option("--yes", is_flag=True, help="Confirm: the stream and its messages are removed.")
def delete(url, yes):
    """Delete the stream (checkpoints taken on it can no longer be restored)."""
    from ..sources.nats_publish import PublishError, delete_stream
    if not yes:
        fail("deleting a stream removes its messages; pass --yes to confirm")
    try:
        existed = delete_stream(url)
    except PublishError as exc:
        fail(str(exc))
    click.echo("deleted" if existed else "no such stream")
