"""The instance's launch guard: a manual rebuild that cannot run is refused when it is submitted,
before any run worker starts.

A run launched from the UI is created by the webserver and handed to the run coordinator; its
run worker (a new process that imports the whole code location, 5-10 s) starts only once the
daemon dequeues it. This coordinator checks a `rebuild_interval` request with the one validation
(`rebuild_request.validate`) as the run is submitted: a refused request fails its run at once with
the one-line reason as the run's failure message (no step runs, nothing is materialized, no stack
trace). Every other run is queued exactly as Dagster's QueuedRunCoordinator queues it.

The run's first step validates again (`assets.rebuild.select_work`), so an instance configured
without this guard refuses the same request with the same line, only after its worker started.

Configured in deploy/dagster.dev.yaml and deploy/dagster.postgres.yaml. It runs in the webserver
and daemon processes, so it imports no Dagster definitions and no dbt: only the validation."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dagster import DagsterRun, DagsterRunStatus, QueuedRunCoordinator, SubmitRunContext

from streaming.store.presence import StoreMissing, open_existing

from .paths import store_url
from .rebuild_request import RebuildRefused, validate

log = logging.getLogger(__name__)

# The job whose run config is an operator's typed request (jobs.rebuild_interval).
MANUAL_REBUILD_JOB = "rebuild_interval"


def refusal(run_config: Mapping[str, Any], url: str | None = None) -> str | None:
    """The one-line refusal of a manual rebuild's run config (the launchpad's merchant, start and
    end), or None when the request may run. `url`: the store, else as the runs resolve it."""
    try:
        store = open_existing(store_url(url))
    except StoreMissing as exc:
        return f"rebuild refused: {exc}"
    try:
        validate(store, str(run_config.get("merchant") or ""),
                 str(run_config.get("start") or ""), str(run_config.get("end") or ""))
    except RebuildRefused as exc:
        return exc.line
    finally:
        store.dispose()
    return None


class LaunchGuardRunCoordinator(QueuedRunCoordinator):
    """Dagster's QueuedRunCoordinator (same configuration), refusing a manual rebuild that cannot
    run at submission: its run fails at once with the refusal as its message."""

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        run = context.dagster_run
        if run.job_name == MANUAL_REBUILD_JOB and run.status == DagsterRunStatus.NOT_STARTED:
            try:
                reason = refusal(run.run_config)
            except Exception:
                # The guard is a shortcut, never a gate of its own: when it cannot look (the store
                # unreachable), the run goes ahead and its first step validates and reports.
                log.warning("launch guard could not check run %s; queued unchecked", run.run_id,
                            exc_info=True)
                reason = None
            if reason:
                self._instance.report_run_failed(run, message=reason)
                refused = self._instance.get_run_by_id(run.run_id)
                assert refused is not None
                return refused
        return super().submit_run(context)
