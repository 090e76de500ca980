"""`riskstream rebuild --merchant M --from T --to T`: the UI's `rebuild_interval` job, run
in-process, behind the same validation as the job's typed config (a refusal is one line and
exit code 2, before Dagster starts anything)."""

from __future__ import annotations

import os

import click


def _instance():
    from dagster import DagsterInstance
    return DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else \
        DagsterInstance.ephemeral()


def run_rebuild(merchant: str, start: str, end: str, store_url: str | None = None,
                warehouse_path: str | None = None, instance=None):
    """Validate, then execute `rebuild_interval` in-process; returns (request, result, the
    run's tags as stored, including the generation tag the run adds)."""
    from streaming.store.presence import open_existing

    from .rebuild_request import validate
    from .resources import StoreResource
    # The store is looked at before the job definitions (and the dbt manifest) load.
    store = open_existing(StoreResource(url=store_url).resolved_url())
    try:
        req = validate(store, merchant, start, end)
    finally:
        store.dispose()
    from .definitions import build_defs
    from .jobs import manual_run_config
    from .repair import resources_for
    res = resources_for(store_url, warehouse_path)
    own = instance is None
    instance = instance or _instance()
    try:
        job = build_defs(res).resolve_job_def("rebuild_interval")
        result = job.execute_in_process(
            run_config=manual_run_config(req.merchant, req.start, req.end), instance=instance,
            raise_on_error=False, tags={"riskstream/merchant": req.merchant,
                                        "riskstream/interval": req.interval})
        stored = instance.get_run_by_id(result.run_id)
        tags = dict(stored.tags) if stored else {}
    finally:
        if own:
            instance.dispose()
    return req, result, tags


def failure_line(result) -> str:
    """The one-line reason of a failed run (its first step failure's description)."""
    for event in result.all_events:
        if event.is_step_failure:
            err = event.step_failure_data.error
            user = getattr(event.step_failure_data, "user_failure_data", None)
            if user is not None and user.description:
                return user.description
            while err is not None and err.cause is not None:
                err = err.cause
            return (err.message.strip().splitlines() or ["step failed"])[0] if err else \
                "step failed"
    return "the run failed"


@click.command("rebuild")
@click.option("--merchant", required=True, help="Merchant whose interval to rebuild.")
@click.option("--from", "start", required=True,
              help="First payment time, ISO-8601 with a time zone (2026-10-06T09:00:00Z).")
@click.option("--to", "end", required=True,
              help="Last payment time (inclusive, after --from), ISO-8601 with a time zone.")
@click.option("--store", "store_url", envvar="RISKSTREAM_STORE_URL", default=None,
              help="Operational store URL (default: RISKSTREAM_STORE_URL or the embedded "
                   "SQLite store).")
@click.option("--warehouse", "warehouse_path", envvar="RISKSTREAM_DUCKDB_PATH", default=None,
              help="DuckDB warehouse the rebuild validates in (one writer at a time).")
def rebuild(merchant, start, end, store_url, warehouse_path):
    """Rebuild one merchant interval through the `rebuild_interval` job, in-process: the
    candidate is validated by the blocking checks and published only if they pass."""
    from streaming.store.presence import StoreMissing

    from .rebuild_request import RebuildRefused
    try:
        req, result, tags = run_rebuild(merchant, start, end, store_url, warehouse_path)
    except RebuildRefused as exc:
        click.echo(exc.line, err=True)
        raise SystemExit(2) from None
    except StoreMissing as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(exc.exit_code) from None
    gen = tags.get("riskstream/generation", "(none built)")
    if result.success:
        click.echo(f"rebuild {req.merchant} [{req.start}, {req.end}]: generation {gen} "
                   f"published (run {result.run_id})")
        return
    click.echo(f"rebuild {req.merchant} [{req.start}, {req.end}]: not published "
               f"(run {result.run_id}): {failure_line(result)}", err=True)
    raise SystemExit(1)

