"""The compiled core (streaming.native): `make setup` builds it, every module of the set loads
compiled or none does, a source edited after the build falls back to Python, and the compiled
and pure builds write the same facts, byte for byte, on every pipeline."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import gc
import json
import os
import subprocess
import sys
from itertools import islice

import pytest

from streaming import native
from streaming.store.sqlite_driver import dbapi
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


def test_the_hand_written_c_is_part_of_the_build(tmp_path, monkeypatch):
    # Its source is hashed with the Python ones, and its extension is required with theirs.
    recorded = native.source_hashes()
    assert set(recorded) == {*native.COMPILED, *native.HAND_WRITTEN}
    manifest = tmp_path / "build.json"
    manifest.write_text(json.dumps({"sources": {**recorded, "streaming._blake2b": "0" * 64}}))
    monkeypatch.setattr(native, "MANIFEST", manifest)
    assert native.decide("auto") == "pure: streaming/_blake2b.c changed since the native build"
    manifest.write_text(json.dumps({"sources": recorded}))
    found = native.extension_files()
    if native.decide("auto", found) != "compiled":
        if IN_CI:
            pytest.fail("`make setup` must build the compiled core")
        pytest.skip("compiled core not built here; `make setup` builds it")
    found.pop("streaming._blake2b")
    assert native.decide("auto", found) == "pure: native build incomplete"


def test_an_extension_outside_the_set_is_named_and_runs_pure(tmp_path, monkeypatch):
    # Left by an earlier build of a longer list: it would shadow its source if used.
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    stray = tmp_path / "streaming" / "pipelines" / f"receipts{suffix}"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"")
    monkeypatch.setattr(native, "PACKAGE_DIR", tmp_path / "streaming")
    monkeypatch.setattr(native, "ROOT", tmp_path)
    assert native.decide("auto") == (
        f"pure: streaming/pipelines/receipts{suffix} is not part of the native build")


def _facts(db: str) -> list[tuple]:
    con = dbapi().connect(db)
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


def _drive(spec, settings, src: str, recs: list, counts: dict) -> int:
    """A fresh operator of `spec` over `recs` batch by batch with per-topic watermarks, as the
    host drives it; returns how many facts it emitted. Everything it made is dropped on return."""
    from streaming.models.registry import Registry
    from streaming.operators.base import Emit
    from streaming.watermarks import InputWatermark

    op = spec.make_operator(settings)
    if spec.name == "receipts":
        op.pin(Registry(os.path.join(src, "models")).current(), 1)
    wms = {t: InputWatermark(t, counts[t], spec.lateness_us[t]) for t in counts}
    facts = 0
    for i in range(0, len(recs), 500):
        emit = Emit()
        for r in recs[i:i + 500]:
            op.on_record(r, emit)
            w = wms[r.topic]
            if w.observe(r.partition, r.event_us, r.arrival_us):
                op.on_watermark(r.topic, w.wm, emit)
        facts += len(emit.facts)
    emit = Emit()
    for w in wms.values():
        w.end_of_stream()
    op.on_end_of_stream(emit)
    return facts + len(emit.facts)


def _left_behind(spec, settings, src: str, recs: list, counts: dict) -> tuple[int, int]:
    """(facts, memory blocks still allocated once the operator and all it emitted are dropped)
    of the second of two runs over `recs`: the first fills the caches a run fills (the receipt
    scorer's last 64 watermark tails, say) with what the second will look up. Blocks, net of
    what was freed: a bounded cache that replaces entries stays level."""
    _drive(spec, settings, src, recs, counts)
    gc.collect()
    before = sys.getallocatedblocks()
    facts = _drive(spec, settings, src, recs, counts)
    gc.collect()
    return facts, sys.getallocatedblocks() - before


@pytest.mark.parametrize("scenario", ["join-sqlite", "ledger-sqlite", "receipts-sqlite"])
def test_compiled_operators_leave_nothing_behind_that_grows_with_the_run(tmp_path, scenario):
    """Compiled code counts references itself: one it never releases keeps its object alive
    after the operator is gone (mypyc 1.19's `bytes + bytes` did, a decision's JSON per
    decision: 66 MiB at 200,000 receipts). A fresh operator over all the records must leave no
    more behind than one over the first half: a leak per fact or record grows with the run,
    while what a run leaves in bounded caches does not."""
    if native.decide("auto") != "compiled":
        if IN_CI:
            pytest.fail("`make setup` must build the compiled core")
        pytest.skip("compiled core not built here; `make setup` builds it")
    from streaming.contracts import InvalidRecord, decode
    from streaming.host.settings import RunSettings
    from streaming.pipelines import join, ledger, receipts
    from streaming.repairs.ledger import DEV_KEY, RepairKey
    from streaming.sources.filelog import FileLog

    spec = {"join": join.SPEC, "ledger": ledger.make_spec(RepairKey(DEV_KEY, "dev")),
            "receipts": receipts.SPEC}[scenario.split("-")[0]]
    src = prepare_input(scenario, str(tmp_path), EVENTS)
    log = FileLog(src, spec.topics)
    recs = []
    for raw in islice(log.merged({}), EVENTS):
        try:
            recs.append(decode(spec.contracts[raw.topic], raw.line, raw.partition, raw.offset))
        except InvalidRecord:
            continue
    settings = RunSettings(source=src, store_url="sqlite:///:memory:", end_of_stream=True,
                           extra={"model_dir": os.path.join(src, "models")})
    counts = dict(log.partition_counts)
    assert native.is_compiled(sys.modules[type(spec.make_operator(settings)).__module__])
    half_facts, half_left = _left_behind(spec, settings, src, recs[:len(recs) // 2], counts)
    facts, left = _left_behind(spec, settings, src, recs, counts)
    assert facts - half_facts > EVENTS // 8
    # A leak of one object per fact would leave hundreds more blocks here.
    assert left - half_left < 50, (
        f"{left} blocks left behind by {facts} facts, {half_left} by {half_facts}")


def test_hand_written_names_only_the_cores_own_c_and_only_when_compiled():
    with pytest.raises(ValueError, match="not a hand-written module"):
        native.hand_written("streaming.hashing", "digest")
    chosen = native.hand_written("streaming._texts", "iso_utc")
    if native.active == "compiled":
        assert chosen(0) == "1970-01-01T00:00:00Z"
    else:
        assert chosen is None


def _module_constants_not_final(module: str) -> list[str]:
    """The module-level names of `module` bound without a `Final` (or `TypeAlias`) annotation:
    plain assignments (unpacking included) and other annotations."""
    tree = ast.parse(native.source_path(module).read_text())
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            found += [f"{module}:{node.lineno} {n.id}" for target in node.targets
                      for n in ast.walk(target) if isinstance(n, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            annotation = ast.unparse(node.annotation)
            if not annotation.startswith(("Final", "TypeAlias")):
                found.append(f"{module}:{node.lineno} {ast.unparse(node.target)}")
    return found


def test_compiled_modules_bind_their_constants_final():
    # Compiled, a module-level name without Final is a lookup in the module's dictionary at
    # every use; a Final one is a constant or a static (the receipt scorer's entry slots, bound
    # by unpacking, were about forty lookups per receipt; docs/performance.md, thirty-second
    # round). Type aliases are TypeAlias.
    found = [f for module in native.COMPILED for f in _module_constants_not_final(module)]
    assert found == []


def test_the_constant_check_finds_an_unpacked_or_plain_binding(tmp_path, monkeypatch):
    src = tmp_path / "sample.py"
    src.write_text("from typing import Final\nA, B = range(2)\nC: int = 3\nD: Final = 4\n"
                   "E: TypeAlias = int\nF: Final[int] = 5\n")
    monkeypatch.setattr(native, "source_path", lambda module: src)
    assert _module_constants_not_final("sample") == ["sample:2 A", "sample:2 B", "sample:3 C"]
