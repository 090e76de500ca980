"""`riskstream generations list`: the generation history. `riskstream repair run` runs Dagster
jobs, so the orchestration package registers it (`orchestration/commands.py`)."""

from __future__ import annotations

import click

from ..join_published import GENERATION_COLUMNS, generation_rows
from .common import emit_rows, format_option, open_store, store_option


@click.group()
def generations() -> None:
    """Generations: validated rebuilds of join intervals, published atomically."""


@generations.command("list")
@store_option
@format_option
def list_generations(store_url, fmt):
    """Generation history; `published` marks the current generation of its interval."""
    emit_rows(generation_rows(open_store(store_url)), GENERATION_COLUMNS, fmt)


COMMANDS = [generations]
