"""The compiled core (streaming.native): `make setup` builds it, every module of the set loads
compiled or none does, a source edited after the build falls back to Python, and the compiled
and pure builds write the same facts, byte for byte, on every pipeline."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from streaming import native
from riskstream_tools.benchmarks.scenarios import prepare_input

from .conftest import IN_CI

EVENTS = 4_000
FACT_COLUMNS = ("pipeline, fact_key, kind, logical_key, status, payload_hash, payload, "
                "predecessor_key")


def _child(code: str, pure: bool) -> str:
    env = {**os.environ, native.ENV_VAR: "off" if pure else "auto"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_the_setup_build_is_current_and_loads_whole():
    if native.active.startswith(f"pure: {native.ENV_VAR}="):
        pytest.skip(f"{native.ENV_VAR} is set: this run is the pure build on purpose")
    decision = native.decide("auto")
    if decision != "compiled":
        if IN_CI:
            pytest.fail(f"`make setup` must build the compiled core; it is {decision}")
        pytest.skip(f"compiled core not in use here ({decision}); `make setup` builds it")
    assert native.active == "compiled"
    for name in native.COMPILED:
        assert native.is_compiled(importlib.import_module(name)), name


def test_off_loads_every_module_of_the_set_from_its_source():
    code = ("import importlib, json; from streaming import native; "
            "print(json.dumps([native.active] + [importlib.import_module(m).__file__ "
            "for m in native.COMPILED]))")
    active, *files = json.loads(_child(code, pure=True))
    assert active == f"pure: {native.ENV_VAR}=off"
    assert [f.endswith(".py") for f in files] == [True] * len(native.COMPILED)


def test_a_source_changed_since_the_build_is_named_and_runs_pure(tmp_path, monkeypatch):
    manifest = tmp_path / "build.json"
    recorded = native.source_hashes()
    recorded["streaming.operators.ledger"] = "0" * 64
    manifest.write_text(json.dumps({"sources": recorded}))
    monkeypatch.setattr(native, "MANIFEST", manifest)
    assert native.decide("auto") == (
        "pure: streaming/operators/ledger.py changed since the native build")
    monkeypatch.setattr(native, "MANIFEST", tmp_path / "absent.json")
    assert native.decide("auto") == "pure: not built"
    assert native.decide("off") == f"pure: {native.ENV_VAR}=off"


def test_an_extension_outside_the_set_is_named_and_runs_pure(tmp_path, monkeypatch):
    # Left by an earlier build of a longer list: it would shadow its source if used.
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    stray = tmp_path / "streaming" / "operators" / f"receipts{suffix}"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"")
    monkeypatch.setattr(native, "PACKAGE_DIR", tmp_path / "streaming")
    monkeypatch.setattr(native, "ROOT", tmp_path)
    assert native.decide("auto") == (
        f"pure: streaming/operators/receipts{suffix} is not part of the native build")


def _facts(db: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(f"SELECT {FACT_COLUMNS} FROM facts ORDER BY pipeline, fact_key"
                           ).fetchall()
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["join-sqlite", "ledger-sqlite", "receipts-sqlite"])
def test_compiled_and_pure_builds_write_the_same_facts(tmp_path, scenario):
    if native.decide("auto") != "compiled" and not IN_CI:
        pytest.skip("compiled core not built here; `make setup` builds it")
    src = prepare_input(scenario, str(tmp_path), EVENTS)
    results, facts = {}, {}
    for label, pure in (("compiled", False), ("pure", True)):
        db = tmp_path / f"{label}.sqlite"
        code = ("import json; from streaming import native; "
                "from riskstream_tools.benchmarks import scenarios as s; "
                f"r = s.CHILDREN[{scenario!r}]({str(src)!r}, {f'sqlite:///{db}'!r}, {EVENTS}); "
                "print(json.dumps({'core': native.active, 'equal': r['reference_equal'], "
                "'records': r['records']}))")
        results[label] = json.loads(_child(code, pure))
        facts[label] = _facts(str(db))
    assert results["compiled"]["core"] == "compiled"
    assert results["pure"]["core"].startswith("pure")
    assert results["compiled"]["equal"] is results["pure"]["equal"] is True
    assert results["compiled"]["records"] == results["pure"]["records"] >= EVENTS
    assert len(facts["compiled"]) > EVENTS // 2
    assert facts["compiled"] == facts["pure"]
