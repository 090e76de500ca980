"""The compiled core: the pure state machines built as C extension modules by mypyc.

The Python sources stay the one definition of every rule. `make setup` compiles the modules in
`COMPILED` in place (`python -m riskstream_tools.native_build`): each gets a C extension next to its
source, which Python imports in preference to the `.py`, and the build records a hash of every
source it compiled. The compiled modules call one another natively (a compiled operator reads a
compiled `TimeQueue`'s fields as C struct members), so the set is used whole or not at all.

On import the package checks the recorded hashes (`select`, called by `streaming/__init__`).
The compiled set is used only when every source is unchanged since the build; otherwise every
module of the set loads from its source:
- sources edited after the build: pure Python, with a warning naming the first changed file
  (a stale extension must never shadow the code a developer just changed);
- `RISKSTREAM_NATIVE=off`: pure Python, on purpose (debugging, or the equality test that runs
  both builds on one recording);
- no build: pure Python, silently (a checkout that never ran `make setup`).
Both builds give the same facts, byte for byte (tests/test_native.py)."""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# The pure core that is compiled: keyed state, keys, times and the three operators. Hosts,
# sources and sinks stay interpreted (they spend their time in I/O, SQLite and msgspec).
COMPILED: tuple[str, ...] = (
    "streaming.state",
    "streaming.keys",
    "streaming.timeutil",
    "streaming.operators.base",
    "streaming.operators.identity",
    "streaming.operators.changes",
    "streaming.operators.interval_join",
    "streaming.operators.ledger_categories",
    "streaming.operators.ledger",
    "streaming.operators.receipts",
)
# The shared library mypyc builds for the group lives inside the package, so it imports from
# wherever the package does (an editable install maps packages, not the project root).
GROUP = "streaming._native"
ENV_VAR = "RISKSTREAM_NATIVE"
PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent
MANIFEST = PACKAGE_DIR / "_native_build.json"

# What `select` decided for this process: "compiled", or "pure: <why>".
active = "pure: not selected yet"


def source_path(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes(modules: Sequence[str] = COMPILED) -> dict[str, str]:
    return {m: hashlib.sha256(source_path(m).read_bytes()).hexdigest() for m in modules}


def extension_paths() -> list[Path]:
    """Every compiled file of the set that is on disk (modules and the group library)."""
    found: list[Path] = []
    for module in (*COMPILED, GROUP):
        parent = ROOT.joinpath(*module.split(".")[:-1])
        stem = module.rsplit(".", 1)[-1] + ("__mypyc" if module == GROUP else "")
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = parent / f"{stem}{suffix}"
            if path.exists():
                found.append(path)
    return found


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Loads every module of the compiled set from its `.py`, ahead of the extensions."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in COMPILED:
            return importlib.util.spec_from_file_location(fullname, source_path(fullname))
        return None


def decide(setting: str) -> str:
    if setting.strip().lower() in ("off", "0", "false", "no"):
        return f"pure: {ENV_VAR}={setting}"
    if not MANIFEST.exists():
        return "pure: not built"
    recorded = json.loads(MANIFEST.read_text()).get("sources", {})
    current = source_hashes()
    changed = [m for m in COMPILED if recorded.get(m) != current[m]]
    if changed:
        return f"pure: {source_path(changed[0]).relative_to(ROOT)} changed since the native build"
    if len(extension_paths()) != len(COMPILED) + 1:
        return "pure: native build incomplete"
    return "compiled"


def select(environ: dict[str, str] | None = None) -> str:
    """Decide, once per process and before any module of the set is imported, whether the
    compiled set is used. Returns (and records in `active`) the decision."""
    global active
    env = os.environ if environ is None else environ
    decision = decide(env.get(ENV_VAR, "auto"))
    if decision != "compiled" and not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())
        if "changed since" in decision or "incomplete" in decision:
            warnings.warn(f"riskstream core runs as {decision}; `make setup` rebuilds it",
                          RuntimeWarning, stacklevel=2)
    active = decision
    return decision


def is_compiled(module: ModuleType) -> bool:
    """Whether a loaded module is a compiled extension (not its source)."""
    return not str(getattr(module, "__file__", "")).endswith(".py")
