"""`riskstream receipts incident`: the receipt scorer's incident packet (and its pictures)."""

from __future__ import annotations

import click
import orjson

from streaming.cli.common import needs_extra, require_extra, store_option
from streaming.cli.common import open_store


@click.command("incident")
@store_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--out", "out_path", default=None, help="Write to a file instead of stdout.")
@click.option("--pictures", "pictures_dir", default=None, type=click.Path(file_okay=False),
              help="Also draw incident_timeline.png and backlog.png into DIR, with "
                   "pictures.json (what they show).")
def incident(store_url, fmt, out_path, pictures_dir):
    """The incident packet: ranges, revisions, counts, gaps, repairs, exceptions, disconnects."""
    from ..incidents.receipts import incident_packet, render_text
    if pictures_dir:
        require_extra("evidence", "matplotlib")
    store = open_store(store_url)
    packet = incident_packet(store)
    if pictures_dir:
        with needs_extra("evidence"):
            from ..evidence.receipts_plots import write_incident_pictures  # matplotlib here
        for line in write_incident_pictures(store, pictures_dir):
            click.echo(line, err=True)
    text = (orjson.dumps(packet, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
            if fmt == "json" else render_text(packet))
    if out_path:
        with open(out_path, "w", encoding="utf-8") as fh:
            fh.write(text)
        click.echo(f"wrote {out_path}")
    else:
        click.echo(text, nl=False)
