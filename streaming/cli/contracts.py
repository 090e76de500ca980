"""`riskstream contracts ...`: the input contracts' published JSON Schemas."""

from __future__ import annotations

import click

from ..contracts.schemas import DEFAULT_DIR, write
from .common import fail


@click.group()
def contracts() -> None:
    """Input contracts: the JSON Schemas generated from the topic structs."""


@contracts.command()
@click.option("--out", "out_dir", default=DEFAULT_DIR, show_default=True,
              type=click.Path(file_okay=False))
@click.option("--check", is_flag=True, help="Exit 1 if a committed file differs.")
def schemas(out_dir, check):
    """Write (or check) schemas/contracts/<topic>.json from the contract structs."""
    stale = write(out_dir, check)
    if check and stale:
        fail(f"schemas out of date: {', '.join(stale)}", 1)
    for path in stale:
        click.echo(f"wrote {path}")
