"""Commands registered from outside the runtime: where the entry points are read from, what a
missing plugin or a missing extra does, and the command tree the user sees."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from streaming.cli.common import needs_extra
from streaming.cli.main import cli
from streaming.cli.plugins import GROUP, command_entry_points, load_plugins


def write_pyproject(path, name: str, entry_points: dict[str, str]) -> None:
    eps = "".join(f'{k} = "{v}"\n' for k, v in entry_points.items())
    path.write_text(f'[project]\nname = "{name}"\nversion = "0"\n\n'
                    f'[project.entry-points."{GROUP}"]\n{eps}')


def test_a_source_checkout_reads_its_own_pyproject(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    write_pyproject(pyproject, "riskstream", {"tools": "some.module:register"})
    assert command_entry_points(pyproject) == {"tools": "some.module:register"}


def test_another_projects_pyproject_is_not_read(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    write_pyproject(pyproject, "someone-else", {"rogue": "rogue.module:register"})
    assert "rogue" not in command_entry_points(pyproject)


def test_this_checkout_registers_the_tooling_and_orchestration_commands():
    assert command_entry_points() == {"tools": "riskstream_tools.cli:register",
                                      "orchestration": "orchestration.commands:register"}


def test_a_plugin_that_is_not_installed_is_skipped_with_one_line(capsys):
    @click.group()
    def root() -> None:
        pass

    loaded = load_plugins(root, {"absent": "no_such_package_xyz.cli:register",
                                 "orchestration": "orchestration.commands:register"})
    assert loaded == ["orchestration"]
    assert "repair" in root.commands
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["riskstream: absent commands not available "
                   "(no_such_package_xyz is not installed)"]


def _command_raising(missing: str) -> click.Command:
    @click.command()
    def draw() -> None:
        with needs_extra("evidence"):
            raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)
    return draw


def test_a_missing_extra_ends_the_command_with_the_extra_to_install():
    res = CliRunner().invoke(_command_raising("matplotlib.figure"))
    assert res.exit_code == 2
    assert ("this command needs the [evidence] extra (matplotlib.figure is not installed): "
            "pip install 'riskstream[evidence]'") in res.output


def test_a_missing_module_that_no_extra_provides_is_not_disguised():
    res = CliRunner().invoke(_command_raising("not_an_extra_module"))
    assert isinstance(res.exception, ModuleNotFoundError)
    assert res.exception.name == "not_an_extra_module"


def command_tree(group: click.Group, prefix: str = "") -> set[str]:
    out = set()
    for name, cmd in group.commands.items():
        out.add(prefix + name)
        if isinstance(cmd, click.Group):
            out |= command_tree(cmd, prefix + name + " ")
    return out


@pytest.mark.parametrize("path", [
    "join generate", "join run", "join pairs", "join outcomes", "join evidence",
    "ledger generate", "ledger run", "ledger windows", "ledger repair", "ledger reconcile",
    "ledger schemas", "ledger evidence",
    "receipts generate", "receipts run", "receipts decisions", "receipts reconcile",
    "receipts release", "receipts incident", "receipts rescore",
    "repair run", "generations list", "queue list", "metrics", "nats publish", "model"])
def test_the_command_tree_is_whole(path):
    assert path in command_tree(cli)
