"""How `join evidence` and `ledger evidence` end: each check's verdict, the overall one and
where the packet is, then exit 1 when any check does not hold (the packet is written either
way)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import click

from ..evidence.markdown import overall_verdict

CHECK_FAILED_EXIT = 1


def report_packet(pipeline: str, ev: dict, out_dir: str, seconds: float,
                  notes: Sequence[str] = ()) -> None:
    """`notes` are lines that carry no verdict, printed after the checks."""
    for name, ok in ev["checks"].items():
        click.echo(f"  {'holds' if ok else 'FAILS':5}  {name}")
    for note in notes:
        click.echo(f"  {'-':5}  {note}")
    click.echo(f"{pipeline} evidence: {overall_verdict(ev['all_hold'])}; packet in "
               f"{os.path.join(out_dir, 'evidence.md')} ({seconds:.1f}s)")
    if not ev["all_hold"]:
        raise SystemExit(CHECK_FAILED_EXIT)
