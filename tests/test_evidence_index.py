"""The evidence index: each seed claim is PASS only when its packet's result check holds; a
missing or failing check is a FAIL, the index says so, and `all_pass` is false."""

from __future__ import annotations

import orjson

from riskstream_tools.evidence.index import (join_claims, ledger_claims, other_checks,
                                             receipts_claims, write_index)

JOIN_CHECKS = ("endpoints", "asymmetric_arrival", "idle_partition", "hot_key", "checkpoint",
               "crash_replay", "provisional_retractions", "ttl", "replay_queue", "accounting",
               "historical_rebuild", "drain_then_finalize_equals_one_pass")


def join_packet(**overrides) -> dict:
    checks = {name: True for name in JOIN_CHECKS}
    checks.update(overrides)
    return {"checks": checks,
            "checkpoint": {"drained": {"meta": {"code_revision": "abc123",
                                                "positions": {"payments/0": 10}}}},
            "historical_rebuild": {"statement": "generation g_1 published",
                                   "diff_counts": {"added": 2, "retired": 1}}}


def receipts_packet(result: str = "accept:reconciled") -> dict:
    return {"release_gate": {"result": result, "eligible_receipts": 10, "live_outputs": 10,
                             "repaired_outputs": 2, "duplicate_outputs": []},
            "output_gaps": {"missing_live": [], "extra_live": []},
            "repaired_decisions": [{"fact_key": "r1|2", "predecessor_key": "r1|1"}],
            "store_disconnects": [{"store_id": "s-3", "offline_from": "2026-10-06T10:00:00Z"}],
            "state": {"code_revision": "abc123"}, "input_ranges": [{"partition": 0}],
            "reference_check": {"receipts": 10, "equal": 10, "differ": [], "missing": [],
                                "extra": []}}


def ledger_packet(**overrides) -> dict:
    checks = {"backlog_drained": True, "oracle_agrees": True, "scenario_reconciles": True,
              "pressure_reconciles": True, "named_windows_corrected": True,
              "crash_replay_idempotent": True, **overrides}
    return {"checks": checks, "checkpoint": {"scenario": {"code_revision": "abc123",
                                                          "positions": {"payments/0": 5}}}}


def claims_of(join, ledger, receipts):
    return (join_claims(join, "join") + ledger_claims(ledger, "ledger")
            + receipts_claims(receipts, "receipts", ["incident_timeline.png"]))


def test_all_checks_holding_make_every_claim_pass(tmp_path):
    claims = claims_of(join_packet(), ledger_packet(), receipts_packet())
    index = write_index(str(tmp_path), claims, ["ui/3-live-generations.png"])
    assert index["all_pass"] and index["failed"] == 0 and index["passed"] == len(claims)
    assert {c["seed"] for c in index["claims"]} == {"000", "001", "004"}
    stored = orjson.loads((tmp_path / "index.json").read_bytes())
    assert stored == index
    page = (tmp_path / "index.html").read_text()
    assert page.count("<td>PASS</td>") == len(claims) and "<td>FAIL</td>" not in page
    assert "href='join/idle_partition.png'" in page and "ui/3-live-generations.png" in page


def test_a_failing_or_missing_check_fails_its_claim_and_the_index(tmp_path):
    join = join_packet(ttl=False)
    del join["checks"]["crash_replay"]
    claims = claims_of(join, ledger_packet(), receipts_packet("hold:missing-or-extra-output"))
    index = write_index(str(tmp_path), claims, [])
    failed = {c["claim_id"] for c in index["claims"] if not c["passed"]}
    assert failed == {"join.ttl", "join.crash_replay", "receipts.release_gate"}
    assert not index["all_pass"] and index["failed"] == 3
    assert (tmp_path / "index.html").read_text().count("<td>FAIL</td>") == 3


def test_checks_no_claim_names_are_listed_not_hidden():
    extra = other_checks("ledger", "001", {"sink_idempotent": False, "backlog_drained": True},
                         {"backlog_drained"}, "ledger/evidence.md")
    assert [(c.claim_id, c.passed) for c in extra] == [("ledger.sink_idempotent", False)]


def test_receipts_incident_packet_from_a_real_run_decides_its_claims(tmp_path):
    """The receipts seed scenario runs (crash, moved model pointer, replay, reconciliation);
    the packet written from its store holds every receipts claim, with its files on disk."""
    from riskstream_tools.demos.receipts import run_demo
    from riskstream_tools.evidence.receipts import write_incident_packet
    url = f"sqlite:///{tmp_path}/receipts.sqlite"
    run_demo(str(tmp_path / "work"), url)
    out = tmp_path / "packet"
    packet = write_incident_packet(url, str(out))
    assert packet["pictures"] == ["backlog.png", "incident_timeline.png"]
    for name in ("incident.json", "incident.txt", *packet["pictures"]):
        assert (out / name).stat().st_size > 0, name
    stored = orjson.loads((out / "incident.json").read_bytes())
    assert stored["release_gate"]["result"] == "accept:reconciled"
    claims = {c.claim_id: c for c in receipts_claims(packet, "receipts", packet["pictures"])}
    assert all(c.passed for c in claims.values()), [c for c in claims.values() if not c.passed]
    assert claims["receipts.incident"].result.startswith(
        packet["store_disconnects"][0]["store_id"] + " offline from ")
