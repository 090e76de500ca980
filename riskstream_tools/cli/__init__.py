"""The tooling's CLI commands, added to the runtime's groups by `register` (the
`riskstream.commands` entry point `tools`): `join|ledger|receipts generate`, `join|ledger
evidence`, `receipts incident`, `receipts reference-check` and `bench`. Only click and light
modules load here; matplotlib, DuckDB and Dagster load inside the commands that use them."""

from __future__ import annotations

import click

from .bench import bench
from .incident import incident
from .join_evidence import evidence as join_evidence
from .ledger_evidence import evidence as ledger_evidence
from .reference_check import reference_check
from .workloads import join_generate, ledger_generate, receipts_generate


def register(cli: click.Group) -> None:
    def group(name: str) -> click.Group:
        g = cli.commands[name]
        assert isinstance(g, click.Group), f"riskstream {name} is not a command group"
        return g
    group("join").add_command(join_generate)
    group("join").add_command(join_evidence)
    group("ledger").add_command(ledger_generate)
    group("ledger").add_command(ledger_evidence)
    group("receipts").add_command(receipts_generate)
    group("receipts").add_command(incident)
    group("receipts").add_command(reference_check)
    cli.add_command(bench)
