"""`riskstream ledger evidence`: the packet's JSON is checked against the stores it was read
from, and through the CLI commands a reviewer would use on those stores."""

from __future__ import annotations

import os

import orjson
import pytest
from sqlalchemy import select

from streaming.store import schema as S
from streaming.store.ops import loads

from .ledgerutil import cli
from .storeutil import with_store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def packet(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ledger_evidence"))
    proc = cli("evidence", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ledger evidence: all checks hold" in proc.stdout
    with open(os.path.join(out, "evidence.json"), "rb") as fh:
        ev = orjson.loads(fh.read())
    urls = {name: f"sqlite:///{os.path.join(out, path)}"
            for name, path in ev["packet"]["stores"].items()}
    return out, ev, urls


def test_backlog_matches_the_pressure_store(packet):
    out, ev, urls = packet
    b = ev["backlog"]

    def read(store):
        runs = store.rows(select(S.runs).where(S.runs.c.pipeline == "ledger"))
        return [loads(r["result"]) for r in runs], store.metrics_trace("ledger")

    results, trace = with_store(urls["pressure"], read)
    (result,) = results
    # The peak is the throttle report's, as the run stored it: the limit of the workload.
    assert b["report"]["peak_backlog"] == result["backlog"]["peak_backlog"] == 240
    assert b["report"]["drained_at"] == result["backlog"]["drained_at"] == "2026-10-06T09:01:56Z"
    # The trace is the metrics trace's backlog snapshots, at the reader's clock.
    throttled = [m for m in trace if m.get("backlog")]
    assert [p["seq"] for p in b["trace"]] == [m["seq"] for m in throttled]
    assert [p["backlog_records"] for p in b["trace"]] == \
        [m["backlog"]["backlog_records"] for m in throttled]
    assert b["trace_max_backlog"] == max(m["backlog"]["backlog_records"] for m in trace) == 236
    first_capacity = next(p for p in b["trace"] if p["sink_phase"] == "capacity")
    assert (first_capacity["clock"], first_capacity["backlog_records"]) == \
        ("2026-10-06T09:01:17Z", 230)
    assert any("net drain 6.115 rec/s" in line for line in b["lines"])


def test_revision_history_equals_ledger_windows_all(packet):
    out, ev, urls = packet
    assert ev["named_windows"] == ["acct-8|2026-10-06T10:00Z", "acct-9|2026-10-06T09:00Z"]
    proc = cli("windows", "--store", urls["scenario"], "--all", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    listed = [r for r in orjson.loads(proc.stdout)
              if f"{r['account_id']}|{r['event_hour']}" in ev["named_windows"]]
    columns = list(listed[0])
    assert [{c: r[c] for c in columns} for r in ev["revisions"]] == listed
    acct8 = [(r["status"], r["total_cents"], r["risk_count"]) for r in ev["revisions"]
             if r["account_id"] == "acct-8"]
    assert acct8 == [("provisional", 5750, 0), ("revised", 6950, 0), ("revised", 6950, 1),
                     ("final", 6950, 1), ("corrected", 7350, 1)]
    assert [r["fact_key"] for r in ev["revisions"] if r["account_id"] == "acct-9"][-1] == \
        "acct-9|2026-10-06T09:00Z|3"


def test_reconciliation_and_checkpoint_meta(packet):
    out, ev, urls = packet
    proc = cli("reconcile", "--store", urls["scenario"])
    assert proc.returncode == 0, proc.stderr
    assert ev["reconciliation"]["scenario"]["equations"] == proc.stdout.splitlines()
    ck = ev["checkpoint"]["scenario"]
    lines = {}
    for topic in ("payments", "merchant_categories"):
        tdir = os.path.join(out, "logs", "scenario", topic)
        for name in os.listdir(tdir):
            with open(os.path.join(tdir, name), "rb") as fh:
                lines[f"{topic}:{name[1:-len('.jsonl')]}"] = sum(1 for _ in fh)
    assert ck["positions"] == lines
    stored = with_store(urls["scenario"], lambda s: s.latest_checkpoint("ledger"))
    assert ck["id"] == stored["id"]
    assert ck["code_revision"] == loads(stored["meta"])["code_revision"]
    md = open(os.path.join(out, "evidence.md"), encoding="utf-8").read()
    assert f"code revision `{ck['code_revision']}`" in md
    assert ev["reconciliation"]["scenario"]["equations"][0] in md
    assert ev["backlog"]["lines"][2] in md
    assert "| acct-8\\|2026-10-06T10:00Z\\|5 | corrected | 7350 |" in md


def test_pictures_are_written(packet):
    out, ev, _ = packet
    for name in ("backlog_drain", "revisions"):
        path = os.path.join(out, f"{name}.png")
        with open(path, "rb") as fh:
            head = fh.read(24)
        assert head[:8] == PNG_MAGIC
        width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
        assert width >= 1000 and height >= 480
        assert os.path.getsize(path) == ev["pictures"][name]["bytes"] > 30_000


def test_crash_replay_transcript_and_sink_idempotency(packet):
    out, ev, urls = packet
    c = ev["crash_replay"]
    assert ev["checks"]["crash_replay_idempotent"] and c["holds"]
    uninterrupted, crashed, rerun = c["transcript"]
    assert crashed["command"].endswith(f"--crash-at {c['crash_at']}")
    assert uninterrupted["exit_code"] == 0 and crashed["exit_code"] == 137
    assert rerun["exit_code"] == 0
    said = " ".join(rerun["stdout"])
    assert f"no-op {c['rerun_noop']}, rejected 0" in said
    assert c["rerun_noop"] >= c["crashed_batch_facts"] > 0
    assert c["restored_from_checkpoint"]["journal_seq"] == c["checkpointed_batch"]
    # Read back from the two stores the transcript names.
    stores = os.path.join(out, "stores")

    def facts(name):
        return with_store(f"sqlite:///{os.path.join(stores, name + '.sqlite')}",
                           lambda s: ({(f["fact_key"], f["payload_hash"])
                                       for f in s.facts("ledger")},
                                      s.sink_exception_rows("ledger")))
    crash_facts, crash_exc = facts("crash")
    base_facts, _ = facts("uninterrupted")
    assert crash_facts == base_facts and crash_exc == []
    assert len(crash_facts) == c["facts"]["uninterrupted"]
    md = open(os.path.join(out, "evidence.md"), encoding="utf-8").read()
    assert f"no-op {c['rerun_noop']}, rejected 0" in md
    assert "$ riskstream ledger run --source" in md and "(exit 137)" in md
