"""The join's evidence packet on the seed: every section is checked against the stores the
packet ran (not against its own verdicts), and the pictures and page exist."""

from __future__ import annotations

import os

import orjson
import pytest
from click.testing import CliRunner

from riskstream_tools.evidence import join_rebuild
from riskstream_tools.evidence.join import SECTIONS, run_evidence
from riskstream_tools.evidence.join_markdown import TITLES
from riskstream_tools.evidence.join_runs import EvidenceSettings, checkpoint_batches
from riskstream_tools.evidence.join_sections import signed_offset
from streaming.cli.join import pair_rows
from streaming.cli.main import cli
from streaming.store.ops import Store


@pytest.fixture(scope="module")
def packet(seed_dir, tmp_path_factory):
    src, manifest = seed_dir
    out = str(tmp_path_factory.mktemp("evidence"))
    ev = run_evidence(src, out)
    return ev, manifest, out


def open_run(out: str, name: str) -> Store:
    return Store(f"sqlite:///{os.path.join(out, 'stores', name + '.sqlite')}")


def store_pairs(out: str, name: str) -> dict[tuple[str, str], str]:
    st = open_run(out, name)
    try:
        return {(r["payment_id"], r["signal_id"]): r["pair_id"] for r in pair_rows(st, False)}
    finally:
        st.dispose()


def test_written_json_is_the_returned_evidence(packet):
    ev, _, out = packet
    with open(os.path.join(out, "evidence.json"), "rb") as fh:
        disk = orjson.loads(fh.read())
    assert disk["checks"] == ev["checks"] and set(SECTIONS) <= set(disk)
    assert ev["all_hold"], ev["checks"]


def test_endpoint_pair_ids_equal_the_store_rows(packet):
    ev, manifest, out = packet
    live = store_pairs(out, "default")
    cases = {c["case"]: c for c in ev["endpoints"]["cases"]}
    assert {c["order"] for c in cases.values()} == {"payment-first", "signal-first"}
    for label in ("A", "B"):
        want = manifest["cases"][f"endpoint_{label}"]
        case = cases[f"endpoint_{label}"]
        pid = want["payment_id"]
        shown = {s["signal_id"]: s for s in case["signals"]}
        assert set(shown) == set(want["match"]) | set(want["no_match"])
        for sid in want["match"]:
            assert shown[sid]["present"] and shown[sid]["pair_id"] == live[(pid, sid)]
        for sid in want["no_match"]:
            assert not shown[sid]["present"] and (pid, sid) not in live
        offsets = sorted(s["offset_from_payment"] for s in case["signals"])
        assert offsets == ["+8m00s", "+8m01s", "-47m00s", "-47m01s"]
        pay_arrival = case["payment"]["arrival_time"]
        if want["order"] == "payment-first":
            assert all(pay_arrival < s["arrival_time"] for s in case["signals"])
        else:
            assert all(s["arrival_time"] < pay_arrival for s in case["signals"])


def test_asymmetric_trace_publishes_each_pair_when_its_second_side_arrives(packet):
    ev, manifest, _ = packet
    for trace in ev["asymmetric_arrival"]["traces"]:
        consumed = trace["consumed"]
        assert [c["arrival_time"] for c in consumed] == sorted(c["arrival_time"] for c in consumed)
        batch_of = {c["step"]: c["batch_seq"] for c in consumed}
        case = manifest["cases"][trace["case"]]
        mine = [p for p in trace["pairs_published"] if p["payment_id"] == case["payment_id"]]
        assert {p["signal_id"] for p in mine} == set(case["match"])
        for p in mine:
            assert p["batch_seq"] == batch_of[max(p["payment_step"], p["signal_step"])]
            second = "signal" if case["order"] == "payment-first" else "payment"
            assert p["arrived_second"] == second


def test_ttl_section_names_the_missing_valid_match(packet):
    ev, manifest, out = packet
    ttl = ev["ttl"]
    case = manifest["cases"]["ttl"]
    key = (case["payment_id"], case["signal_id"])
    assert key == ("pay-ttl", "risk-ttl")
    default, short = store_pairs(out, "default"), store_pairs(out, "ttl")
    assert key in default and key not in short
    named = ttl["named_case"]
    assert (named["payment_id"], named["signal_id"]) == key
    assert named["pair_id_default_run"] == default[key]
    assert not named["present_in_ttl_run"] and named["outcome_ttl_run"]["match_count"] == 0
    assert {(m["payment_id"], m["signal_id"]) for m in ttl["missing_in_ttl_run"]} == \
        set(default) - set(short)
    assert ttl["ttl_minutes"] == 5


def test_crash_section_one_current_row_per_pair_and_equal_facts(packet):
    ev, _, out = packet
    c = ev["crash_replay"]
    assert c["crash_exit_code"] == 137 and c["rerun_exit_code"] == 0
    assert c["one_current_row_per_logical_pair"] and c["fact_set_equals_uninterrupted"]
    crash, base = open_run(out, "crash"), open_run(out, "uninterrupted")
    try:
        facts = {(f["fact_key"], f["payload_hash"]) for f in crash.facts("join")}
        assert facts == {(f["fact_key"], f["payload_hash"]) for f in base.facts("join")}
        current = [r for r in crash.current("join", "pair") if r["status"] == "current"]
        logical = [r["logical_key"] for r in current]
        assert len(logical) == len(set(logical)) == c["current_pairs"]
        assert crash.sink_exception_rows("join") == []
    finally:
        crash.dispose()
        base.dispose()
    # The crashed batch's pairs reached the sink before the crash, outside any checkpoint,
    # and each still has exactly one current row after the replay.
    k = int(c["crash_at"].rsplit(":", 1)[1])
    assert k in c["uncheckpointed_batches"]
    before = {p["pair_id"] for p in c["pairs_written_before_crash"]}
    after = {p["pair_id"] for p in c["pairs_after_rerun"]}
    crashed = {p["pair_id"] for p in c["pairs_in_crashed_batch"]}
    assert crashed and crashed <= before <= after
    assert all(r["current_rows"] == 1 and r["live_publish_facts"] == 1
               for r in c["crashed_batch_current_rows"])
    assert c["rerun_facts_noop"] >= len(crashed)


def test_idle_partition_trace_and_state(packet):
    ev, manifest, _ = packet
    idle = ev["idle_partition"]
    assert idle["partition"] == "risk_signals:2"
    assert idle["default"]["idleness_decisions"] == []
    assert any(d["partition"] == 2 and d["idle"] for d in idle["idle_after"]["idleness_decisions"])
    assert idle["default"]["peak_state_records"] > idle["idle_after"]["peak_state_records"]
    for series in idle["series"].values():
        clocks = [p["clock_us"] for p in series]
        assert clocks == sorted(clocks)
        wms = [p["risk_wm_us"] for p in series if p["risk_wm_us"] is not None]
        assert wms == sorted(wms)  # a watermark never moves back
    hot = ev["hot_key"]
    assert hot["peak"]["hot_key"] == manifest["hot_merchant"]
    assert 0 < hot["peak"]["hot_key_records"] < hot["peak"]["records"]


def test_checkpoint_metadata_of_the_drained_run(packet, seed_dir):
    ev, _, _ = packet
    src, _ = seed_dir
    meta = ev["checkpoint"]["drained"]["meta"]
    for tp, off in meta["positions"].items():
        topic, part = tp.rsplit(":", 1)
        with open(os.path.join(src, topic, f"p{part}.jsonl"), "rb") as fh:
            assert off == sum(1 for _ in fh)
    assert meta["state_records"] > 0 and not meta["end_of_stream"]
    assert meta["size_bytes"] == ev["checkpoint"]["drained"]["size_bytes"] > 0
    assert ev["checkpoint"]["final"]["meta"]["state_records"] == 0


def test_retractions_queue_accounting_and_rebuild(packet):
    ev, manifest, _ = packet
    retracted = {r["payment_id"]: r for r in ev["provisional_retractions"]["retracted"]}
    assert retracted["pay-ep-a"]["statuses"][:2] == ["provisional", "retracted"]
    assert "pay-ep-b" not in retracted  # signal-first: matched on arrival, never provisional
    old = manifest["cases"]["old_correction"]
    entry = ev["replay_queue"]["old_correction"]["entry"]
    assert (entry["event_id"], entry["revision"], entry["status"]) == (
        old["payment_id"], old["revision"], "pending")
    assert all(r["closes"] for r in ev["accounting"]["default_run"])
    reb = ev["historical_rebuild"]
    assert reb["published"] and reb["mode"] == "dagster"
    assert old["gains"] in reb["old_correction"]["gained"]
    assert old["loses"] in reb["old_correction"]["lost"]
    assert [q["status"] for q in reb["queue_after"]] == ["processed"]
    assert reb["old_correction"]["outcome"]["after"]["status"] == "corrected_final"


def test_pictures_and_page(packet):
    ev, _, out = packet
    for name in ("watermarks.png", "state.png", "idle_partition.png"):
        path = os.path.join(out, name)
        with open(path, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
        assert os.path.getsize(path) > 20_000
    with open(os.path.join(out, "evidence.md"), encoding="utf-8") as fh:
        page = fh.read()
    for title in TITLES.values():
        assert f"## {title}" in page
    for name in ("watermarks.png", "state.png", "idle_partition.png", "pay-ttl", "risk-ttl"):
        assert name in page


def test_rebuild_section_without_generations(monkeypatch):
    monkeypatch.setattr(join_rebuild, "generations_module", lambda: None)
    sec = join_rebuild.historical_rebuild(None, {}, EvidenceSettings(), "unused.duckdb")
    assert not sec["published"] and sec["holds"] is None
    assert sec["statement"].startswith("no generation was published in this run")


def test_helpers():
    assert signed_offset(-(47 * 60 + 1) * 1_000_000) == "-47m01s"
    assert signed_offset(8 * 60 * 1_000_000) == "+8m00s"
    journal = [{"seq": i, "records": 5} for i in range(1, 12)]
    assert checkpoint_batches(journal, 25) == [5, 10]
    with pytest.raises(ValueError):
        EvidenceSettings(repair="later")


def test_cli_is_registered_and_refuses_a_source_without_scenario(tmp_path):
    runner = CliRunner()
    res = runner.invoke(cli, ["join", "evidence", "--help"])
    assert res.exit_code == 0 and "--store-dir" in res.output
    (tmp_path / "src").mkdir()
    res = runner.invoke(cli, ["join", "evidence", "--source", str(tmp_path / "src"),
                              "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "scenario.json" in res.output
