"""Commands registered from outside the runtime.

The worker package never imports its tooling or Dagster. Commands that need them (`join|ledger
evidence`, `join|ledger|receipts generate`, `receipts incident`, `repair run`) live in
`riskstream_tools` and `orchestration` and are named by entry points in the group
`riskstream.commands`; each entry point is a `register(cli)` function that adds its commands to
the root group. The entry points are read from the source tree's pyproject.toml when the runtime
runs from a source checkout (so a checkout never depends on how it was installed), else from the
installed distribution's metadata."""

from __future__ import annotations

import importlib
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import click

GROUP = "riskstream.commands"
DISTRIBUTION = "riskstream"
SOURCE_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _from_source_tree(pyproject: Path) -> dict[str, str] | None:
    """name -> "module:attr" from a checkout's pyproject.toml; None when there is none."""
    if not pyproject.is_file():
        return None
    with pyproject.open("rb") as fh:
        project = tomllib.load(fh).get("project", {})
    if project.get("name") != DISTRIBUTION:
        return None
    return dict(project.get("entry-points", {}).get(GROUP, {}))


def _from_metadata() -> dict[str, str]:
    return {ep.name: ep.value for ep in metadata.entry_points(group=GROUP)}


def command_entry_points(pyproject: Path = SOURCE_PYPROJECT) -> dict[str, str]:
    found = _from_source_tree(pyproject)
    return found if found is not None else _from_metadata()


def load_plugins(cli: click.Group, entry_points: dict[str, str] | None = None) -> list[str]:
    """Register every plugin's commands; returns the names of the plugins that loaded. A plugin
    whose package is not installed is skipped with one line on stderr."""
    loaded = []
    for name, target in sorted((entry_points or command_entry_points()).items()):
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            print(f"riskstream: {name} commands not available ({exc.name} is not installed)",
                  file=sys.stderr)
            continue
        getattr(module, attr or "register")(cli)
        loaded.append(name)
    return loaded
