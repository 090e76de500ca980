"""The follow-mode flags shared by `join|ledger|receipts run`, and the runner that serves them
(a one-line live status on a terminal, exit codes for refusals and outages)."""

from __future__ import annotations

import logging
import os

import click

from .common import SOURCE_UNAVAILABLE_EXIT, fail

follow_flag = click.option(
    "--follow", is_flag=True,
    help="Keep consuming a nats:// source as messages are published (stop with SIGTERM/SIGINT).")
max_batch_delay_option = click.option(
    "--max-batch-delay", type=float, default=200.0, show_default=True,
    help="With --follow: milliseconds of wall time after a batch's first record before it is "
         "committed, full or not. 0: no lingering, each batch is what was delivered by the "
         "time the worker took it (lowest latency, more commits at low rates).")
worker_option = click.option(
    "--worker", "worker", default=None, metavar="I/N",
    help="Own the partitions p with p %% N == I of every keyed topic (of a file log, or of a "
         "NATS stream with --follow).")
outage_limit_option = click.option(
    "--outage-limit", type=float, default=30.0, show_default=True,
    help="With --follow: seconds the store or the broker may stay unreachable before the "
         "worker stops (exit 7 store, exit 8 broker).")


def follow_options(fn):
    for opt in reversed((follow_flag, max_batch_delay_option, worker_option,
                         outage_limit_option)):
        fn = opt(fn)
    return fn


def follow_settings(follow: bool, max_batch_delay: float, worker: str | None,
                    outage_limit: float, source: str):
    """FollowSettings when --follow is given, else None (refusing follow-only flags). The
    worker's assignment (--worker) is a run setting (`common.run_settings`): a file log's
    share is read without --follow, a NATS stream's only while following it."""
    from ..host.follow import FollowSettings
    if not follow:
        if worker is not None and source.startswith("nats://"):
            fail("--worker on a NATS stream needs --follow (a file log's share is read "
                 "without it)")
        return None
    if not (0 <= max_batch_delay < float("inf")):
        fail(f"--max-batch-delay must be 0 or more milliseconds, not {max_batch_delay:g}")
    return FollowSettings(max_batch_delay_s=max_batch_delay / 1000.0,
                          outage_limit_s=outage_limit)


def run_follow(spec, settings, follow, quiet: bool = False):
    """Run a follow-mode worker until a signal stops it; refusals and outages exit with their
    documented codes and one line of reason."""
    from ..assignment import AssignmentError
    from ..host.follow import BrokerUnavailable, FollowWorker, StoreUnavailable, status_line
    from ..sources.filelog import SourceError
    from ..store.lease import LeaseHeld, LeaseUnavailable
    from ..host.checkpoints import CheckpointMismatch, SourceMismatch
    # The store's outages are retried, counted and, past the limit, reported in one line:
    # the driver's own warnings about the broken connection would only repeat them.
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    live = None
    update = None
    if not quiet:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text
        console = Console(stderr=True)
        if console.is_terminal and not os.environ.get("CI"):
            live = Live(Text(""), console=console, refresh_per_second=4, transient=True)

            def update(fig: dict) -> None:
                live.update(Text(status_line(fig), overflow="ellipsis", no_wrap=True))
    try:
        worker = FollowWorker(spec, settings, follow, status=update)
    except ValueError as exc:
        fail(str(exc))
    try:
        if live is not None:
            with live:
                return worker.run()
        return worker.run()
    except (CheckpointMismatch, SourceMismatch, AssignmentError, LeaseHeld, LeaseUnavailable,
            StoreUnavailable, BrokerUnavailable) as exc:
        fail(str(exc), exc.exit_code)
    except SourceError as exc:
        fail(str(exc), SOURCE_UNAVAILABLE_EXIT)


def follow_summary(name: str, res) -> str:
    f = res.metrics.get("follow") or {}
    e = f.get("e2e_latency_ms") or {}
    return (f"{name} follow: stopped after {res.records} records in {res.batches} batches "
            f"({res.replayed_batches} replayed from the journal"
            f"{', restored from checkpoint ' + str(res.restored_from) if res.restored_from else ''}"
            f"); facts written {res.facts_written}; checkpoints {res.checkpoints}; worker "
            f"{f.get('worker')}; e2e latency p50/p99 {e.get('p50')}/{e.get('p99')} ms; store "
            f"outages {(f.get('store') or {}).get('outages')}, broker outages "
            f"{(f.get('broker') or {}).get('outages')}")

