"""`riskstream receipts reference-check`: the live decisions against the occurrence-order
reference (the reference lives with the tooling)."""

from __future__ import annotations

import click

from streaming.cli.common import echo_json, open_store, store_option


@click.command("reference-check")
@store_option
@click.option("--json", "as_json", is_flag=True)
def reference_check(store_url, as_json):
    """Compare every active decision with the occurrence-order reference (one batch pass with
    the pinned model, no watermark); exits 1 unless every receipt matches."""
    from ..incidents.receipts_reference import reference_check as check
    from ..incidents.receipts_reference import render_lines
    c = check(open_store(store_url))
    if as_json:
        echo_json(c)
    else:
        for line in render_lines(c):
            click.echo(line)
    if c["result"] != "match":
        raise SystemExit(1)
