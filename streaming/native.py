"""The compiled core: the pure state machines built as C extension modules by mypyc.

The Python sources stay the one definition of every rule. `make setup` compiles the modules in
`COMPILED` in place (`python -m riskstream_tools.native_build ensure`): each gets a C extension
next to its source, which Python imports in preference to the `.py`, and the build records a
hash of every source it compiled. The compiled modules call one another natively (a compiled
operator reads a compiled `TimeQueue`'s fields as C struct members), so the set is used whole
or not at all. Five modules beside them are C written by hand (`HAND_WRITTEN`): the content
hash, the hot path's texts (a decoded payload, instants, IDs, JSON strings, the source's
plain-line guard), the state rows taken out of the cyclic collector's sight, the JetStream
reader's frames and the state's heap of times; built with them, hashed into the same record of
the build and used only with them.

On import the package decides (`select`, called by `streaming/__init__`). The compiled set is
used only when every source is unchanged since the build; otherwise every module of the set
loads from its source:
- a source edited after the build: pure Python, with a warning naming the file (a stale
  extension must never shadow the code a developer just changed);
- an extension of a module outside the set (left by an earlier build): pure Python, with a
  warning, that module included;
- `RISKSTREAM_NATIVE=off`: pure Python, on purpose (debugging, or the equality test that runs
  both builds on one recording);
- no build: pure Python, silently (a checkout that never ran `make setup`).
Both builds write the same facts, byte for byte (tests/test_native.py)."""

from __future__ import annotations

import hashlib
import importlib
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
from typing import Any

# The pure core that is compiled: keyed state, watermarks, keys, times, the decoder's record
# building, the receipt model's score, the three operators and the worker's per-record loop
# (host/drive.py). The rest of the hosts, the sources and the sinks stay interpreted (their
# time goes to I/O, SQLite and msgspec). Two things compiled code does
# differently from the interpreter matter here (docs/performance.md, "the compiled core" and
# the sixteenth round): it unboxes an int it is handed and boxes a new object wherever it
# stores one (so times that state keeps are typed Any, to share the caller's object), and
# mypyc 1.19's `bytes + bytes` never releases its left operand (so compiled modules join bytes
# instead; tests/test_native.py checks that no operator leaves objects behind).
COMPILED: tuple[str, ...] = (
    "streaming.state",
    "streaming.watermarks",
    "streaming.keys",
    "streaming.hashing",
    "streaming.timeutil",
    "streaming.contracts.record",
    "streaming.sources.raw",
    "streaming.contracts.canonical",
    "streaming.operators.base",
    "streaming.operators.identity",
    "streaming.operators.changes",
    "streaming.operators.interval_join",
    "streaming.operators.ledger_categories",
    "streaming.operators.ledger",
    "streaming.models.logistic",
    "streaming.operators.receipts",
    "streaming.host.drive",
)
# Written in C by hand, not compiled from Python: the content hash (`streaming.hashing` uses it
# when the compiled set is in use, hashlib otherwise), the hot path's texts: a decoded
# payload, instants, IDs, JSON strings and the source's plain-line guard
# (`streaming.contracts.canonical`, `streaming.timeutil`, `streaming.operators.base` and
# `streaming.sources.records` use them when it is in use, their Python twins otherwise), the
# collector's untracking (`streaming.collector`), the JetStream reader's frames
# (`streaming.sources.nats_wire`) and the heaps of a `TimeQueue` (`streaming.state`: its pairs
# out of order in a `TimeHeap`, otherwise a heapq list and a dictionary). Module name -> its C
# source.
HAND_WRITTEN: dict[str, str] = {"streaming._blake2b": "streaming/_blake2b.c",
                                "streaming._texts": "streaming/_texts.c",
                                "streaming._collector": "streaming/_collector.c",
                                "streaming._wire": "streaming/_wire.c",
                                "streaming._heap": "streaming/_heap.c"}
# The shared library mypyc builds for the group lives inside the package, so it imports from
# wherever the package does (an editable install maps packages, not the project root).
GROUP = "streaming._native"
GROUP_LIBRARY = f"{GROUP}__mypyc"
ENV_VAR = "RISKSTREAM_NATIVE"
PACKAGE_DIR = Path(__file__).resolve().parent
ROOT = PACKAGE_DIR.parent
MANIFEST = PACKAGE_DIR / "_native_build.json"

# What `select` decided for this process: "compiled", or "pure: <why>".
active = "pure: not selected yet"


def source_path(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes(modules: Sequence[str] = (*COMPILED, *HAND_WRITTEN)) -> dict[str, str]:
    return {m: hashlib.sha256(_source_file(m).read_bytes()).hexdigest() for m in modules}


def _source_file(module: str) -> Path:
    """The file a module of the build is made from: its `.py`, or the C of a hand-written one."""
    c_source = HAND_WRITTEN.get(module)
    return ROOT / c_source if c_source else source_path(module)


def built_modules() -> tuple[str, ...]:
    """Every extension module a whole build leaves in the package."""
    return (*COMPILED, *HAND_WRITTEN, GROUP_LIBRARY)


def hand_written(module: str, name: str) -> Any:
    """`name` of the hand-written C module `module` (one of HAND_WRITTEN) when the compiled
    set is in use in this process, else None: the caller's Python twin serves then. The one
    place that choice is made, once per caller at its import (`select` runs before)."""
    if module not in HAND_WRITTEN:
        raise ValueError(f"{module} is not a hand-written module of the core")
    if active != "compiled":
        return None
    return getattr(importlib.import_module(module), name)


def extension_files() -> dict[str, Path]:
    """Every extension module file in the package, by module name: the build's, and any left
    by an earlier build of a longer list (which would otherwise shadow its source)."""
    found: dict[str, Path] = {}
    for path in PACKAGE_DIR.rglob("*.so"):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if path.name.endswith(suffix):
                rel = path.relative_to(ROOT).as_posix()[:-len(suffix)]
                found[rel.replace("/", ".")] = path
                break
    return found


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Loads the named modules from their `.py`, ahead of any extension module."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = frozenset(modules)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in self.modules:
            return importlib.util.spec_from_file_location(fullname, source_path(fullname))
        return None


def _strays(found: dict[str, Path]) -> list[str]:
    return sorted(m for m in found if m not in built_modules())


def decide(setting: str, found: dict[str, Path] | None = None) -> str:
    """"compiled" when the compiled set is current and whole, else "pure: <why>". `found`:
    the package's extension files when the caller has them already (`extension_files`)."""
    if setting.strip().lower() in ("off", "0", "false", "no"):
        return f"pure: {ENV_VAR}={setting}"
    found = extension_files() if found is None else found
    strays = _strays(found)
    if strays:
        return f"pure: {found[strays[0]].relative_to(ROOT)} is not part of the native build"
    if not MANIFEST.exists():
        return "pure: not built"
    recorded = json.loads(MANIFEST.read_text()).get("sources", {})
    current = source_hashes()
    changed = [m for m in current if recorded.get(m) != current[m]]
    if changed:
        return f"pure: {_source_file(changed[0]).relative_to(ROOT)} changed since the native build"
    if any(m not in found for m in built_modules()):
        return "pure: native build incomplete"
    return "compiled"


def select(environ: dict[str, str] | None = None) -> str:
    """Decide, once per process and before any module of the set is imported, whether the
    compiled set is used. Returns (and records in `active`) the decision."""
    global active
    env = os.environ if environ is None else environ
    found = extension_files()  # one walk of the package, for the decision and the finder
    decision = decide(env.get(ENV_VAR, "auto"), found)
    if decision != "compiled" and not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sources = [m for m in (*COMPILED, *_strays(found)) if source_path(m).exists()]
        sys.meta_path.insert(0, _SourceFinder(sources))
        # A build that is there but unusable (changed, stray or incomplete) is worth a warning;
        # no build, or the switch set on purpose, is not.
        on_purpose = decision.startswith(f"pure: {ENV_VAR}=")
        if decision != "pure: not built" and not on_purpose:
            warnings.warn(f"riskstream core runs as {decision}; `make setup` rebuilds it",
                          RuntimeWarning, stacklevel=2)
    active = decision
    return decision


def is_compiled(module: ModuleType) -> bool:
    """Whether a loaded module is a compiled extension (not its source)."""
    return not str(getattr(module, "__file__", "")).endswith(".py")
