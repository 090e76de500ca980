"""`riskstream exceptions list|resolve`: what holds the gates, and the recorded decisions that
release them."""

from __future__ import annotations

import click

from .common import echo_json, emit_rows, fail, format_option, open_store, store_option

COLUMNS = ["id", "pipeline", "kind", "status", "detail", "decision", "decided_by",
           "decided_at", "reason"]


@click.group()
def exceptions() -> None:
    """Gate blockers: open sink exceptions, accounting gaps, unexplained quarantine rows."""


@exceptions.command("list")
@store_option
@click.option("--pipeline", default=None)
@click.option("--open", "only_open", is_flag=True, help="Only blockers without a decision.")
@format_option
def list_blockers(store_url, pipeline, only_open, fmt):
    """Every blocker with its status and, once resolved, the decision."""
    from ..gates import blockers
    rows = []
    for b in blockers(open_store(store_url), pipeline):
        if only_open and not b.open:
            continue
        d = b.as_dict()
        rows.append({**d, **(b.decision or {})})
    emit_rows(rows, COLUMNS, fmt)


@exceptions.command("resolve")
@store_option
@click.option("--id", "blocker_id", required=True, help="A blocker ID from `exceptions list`.")
@click.option("--decision", required=True,
              type=click.Choice(["keep-existing", "superseded", "explained"]),
              help="keep-existing: the committed fact stands; superseded: a later correction "
                   "publishes the right content; explained: the gap or quarantine row's cause "
                   "is recorded.")
@click.option("--by", "decided_by", required=True, help="Who decides.")
@click.option("--reason", required=True, help="Why: stored with the decision.")
@click.option("--pipeline", default=None, help="Needed only when the ID is ambiguous.")
@click.option("--json", "as_json", is_flag=True)
def resolve_blocker(store_url, blocker_id, decision, decided_by, reason, pipeline, as_json):
    """Record a decision on an open blocker; the gates of its pipeline stop holding on it."""
    from ..gates import DecisionRefused, resolve
    try:
        b = resolve(open_store(store_url), blocker_id, decision, decided_by, reason, pipeline)
    except DecisionRefused as exc:
        fail(str(exc), exc.exit_code)
    if as_json:
        echo_json(b.as_dict())
        return
    assert b.decision is not None  # resolve() returns the blocker with its decision
    click.echo(f"resolved {b.blocker_id} ({b.pipeline} {b.kind}): {decision} by "
               f"{b.decision['decided_by']} at {b.decision['decided_at']}")


COMMANDS = [exceptions]
