"""Shared CLI plumbing: store option, output formats, progress bars, error exits."""

from __future__ import annotations

import csv
import importlib.util
import io
import os
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import click
import orjson

from ..store.ops import DEFAULT_STORE_URL

if TYPE_CHECKING:
    from ..store.ops import Store

# A source that cannot be opened (missing, unreachable, malformed) ends a run with this code.
SOURCE_UNAVAILABLE_EXIT = 5

store_option = click.option(
    "--store", "store_url", envvar="RISKSTREAM_STORE_URL", default=DEFAULT_STORE_URL,
    show_default=True, help="Operational store URL (sqlite:///... or postgresql://...).")


class SourceLocation(click.ParamType):
    """A source location: an existing file-log directory, or `nats://HOST:PORT?stream=NAME`
    (checked when the source is opened)."""

    name = "source"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.startswith("nats://"):
            return value
        if not os.path.isdir(value):
            # A source that cannot be opened, not a usage error: the same exit as every other.
            fail(f"source {value!r} is neither a file-log directory nor a nats:// location",
                 SOURCE_UNAVAILABLE_EXIT)
        return value


source_option = click.option(
    "--source", required=True, type=SourceLocation(),
    help="File-log directory (DIR/<topic>/p<N>.jsonl) or nats://HOST:PORT?stream=NAME.")

max_arrival_jump_option = click.option(
    "--max-arrival-jump", "max_arrival_jump", type=click.FloatRange(min=0), default=60.0,
    show_default=True, envvar="RISKSTREAM_MAX_ARRIVAL_JUMP",
    help="Minutes a record's arrival time may run ahead of its partition's latest arrival "
         "before it is quarantined as arrival_time_jump, unless later records of its "
         "partition follow it or (for a partition's last record) another partition's "
         "arrivals confirm it; see docs/sources.md. 0 turns the check off.")

overlap_commits_option = click.option(
    "--overlap-commits/--serial-commits", "overlap_commits", default=True, show_default=True,
    envvar="RISKSTREAM_OVERLAP_COMMITS",
    help="Commit each batch in a writer process while the next batch is read and run (one in "
         "flight, or a checkpoint and the batches queued behind it: "
         "--batches-behind-checkpoint; docs/architecture.md). Follow mode always commits "
         "serially.")

batches_behind_checkpoint_option = click.option(
    "--batches-behind-checkpoint", "batches_behind_checkpoint", type=click.IntRange(min=0),
    default=4, show_default=True, envvar="RISKSTREAM_BATCHES_BEHIND_CHECKPOINT",
    help="With overlapped commits, hand up to this many batches to the writer process behind a "
         "checkpoint it is still writing instead of waiting for it; they commit after it, in "
         "order. 0 waits. Runs with --crash-at always wait (docs/architecture.md).")

full_checkpoint_after_option = click.option(
    "--full-checkpoint-after", "full_checkpoint_after", type=click.FloatRange(min=0),
    default=1.0, show_default=True, envvar="RISKSTREAM_FULL_CHECKPOINT_AFTER",
    help="Write a full checkpoint once the last full one and the delta checkpoints since add "
         "up to more than 1 + this many times the state (restore reads at most about 1 + this "
         "many states); 0 writes every checkpoint full. See docs/architecture.md, delta "
         "checkpoints.")

format_option = click.option("--format", "fmt", type=click.Choice(["csv", "json"]),
                             default="csv", show_default=True)


def open_store(url: str) -> Store:
    """The existing store at `url`: every command that reads, judges or repairs refuses a
    missing or uninitialized store (exit 7) and creates nothing."""
    from ..store.presence import StoreMissing, open_existing
    try:
        return open_existing(url)
    except StoreMissing as exc:
        fail(str(exc), exc.exit_code)


# The top-level modules each optional extra brings, for `needs_extra`'s message.
EXTRA_MODULES = {
    "orchestration": {"dagster", "dagster_dbt", "dagster_postgres", "dagster_webserver", "dbt",
                      "duckdb"},
    "evidence": {"matplotlib", "duckdb"},
}


def require_extra(extra: str, *modules: str) -> None:
    """Before a command starts work: end it with one clear line when a module it will need
    (one of the extra's) is not installed."""
    for name in modules:
        if importlib.util.find_spec(name) is None:
            fail(f"this command needs the [{extra}] extra ({name} is not installed): "
                 f"pip install 'riskstream[{extra}]'")


@contextmanager
def needs_extra(extra: str):
    """Turn a missing optional dependency into one clear line and exit code 2, naming the extra
    that installs it; any other import error propagates unchanged."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in EXTRA_MODULES[extra]:
            raise
        fail(f"this command needs the [{extra}] extra ({exc.name} is not installed): "
             f"pip install 'riskstream[{extra}]'")


def emit_rows(rows: list[dict], columns: list[str], fmt: str) -> None:
    if fmt == "json":
        click.echo(orjson.dumps([{c: r.get(c) for c in columns} for r in rows],
                                option=orjson.OPT_INDENT_2).decode())
        return
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
    click.echo(buf.getvalue(), nl=False)


@contextmanager
def progress_bar(label: str, enabled: bool | None = None):
    """A rich progress bar on stderr; yields a callback (done, total)."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    console = Console(stderr=True)
    if enabled is None:
        enabled = console.is_terminal and not os.environ.get("CI")
    if not enabled:
        yield lambda done, total: None
        return
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                  transient=False) as prog:
        task = prog.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            prog.update(task, completed=done, total=max(total, done))

        yield update


def fail(message: str, code: int = 2) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def echo_json(obj) -> None:
    click.echo(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())


def run_settings(source: str, store_url: str, crash_at: str | None, checkpoint_every: int,
                 batch_size: int, *, idle_after: float | None = None,
                 ttl_minutes: float | None = None, end_of_stream: bool = False,
                 max_arrival_jump: float = 60.0, overlap_commits: bool = True,
                 worker: str | None = None, **more):
    """RunSettings from a `run` command's shared flags (minutes -> microseconds); a bad
    --crash-at or --worker exits with its reason."""
    from ..assignment import Assignment, AssignmentError
    from ..host.crash import parse_crash_at
    from ..host.settings import RunSettings
    from ..timeutil import US_PER_MIN
    try:
        crash = parse_crash_at(crash_at)
        assignment = Assignment.parse(worker)
    except (ValueError, AssignmentError) as exc:
        fail(str(exc))
    return RunSettings(
        source=source, store_url=store_url, checkpoint_every=checkpoint_every,
        batch_size=batch_size, crash_at=crash,
        idle_after_us=int(idle_after * US_PER_MIN) if idle_after is not None else None,
        ttl_us=int(ttl_minutes * US_PER_MIN) if ttl_minutes is not None else None,
        end_of_stream=end_of_stream,
        max_arrival_jump_us=int(max_arrival_jump * US_PER_MIN) if max_arrival_jump else None,
        overlap_commits=overlap_commits, assignment=assignment, **more)
