"""Every gate fails closed: it holds with nothing to judge, on a store its pipeline never
wrote, and while an open blocker (sink exception, accounting gap, unexplained quarantine row)
has no recorded decision. Real stores on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from streaming.gates import blockers, hold_reason, resolve, DecisionRefused
from riskstream_tools.incidents.receipts import incident_packet
from streaming.pipelines.receipts_release import release_gate
from streaming.store import schema as S
from streaming.store.ops import Store
from riskstream_tools.workloads.receipts_seed import generate

from .receiptsutil import riskstream, run_scorer, with_store


@pytest.fixture(scope="module")
def receipts_seed(tmp_path_factory):
    out = tmp_path_factory.mktemp("gates_receipts_seed")
    generate(7, str(out))
    return str(out)


def test_release_on_a_missing_store_holds_and_creates_nothing(tmp_path):
    path = tmp_path / "no-such-store.sqlite"
    cli = riskstream("receipts", "release", "--store", f"sqlite:///{path}", check=False)
    assert cli.returncode != 0
    assert f"no riskstream store at sqlite:///{path}" in cli.stderr
    assert "accept" not in cli.stdout
    assert not path.exists()


def test_release_on_a_store_the_scorer_never_wrote_holds(store_url):
    Store(store_url).dispose()  # an initialized store: the join could have written it
    gate = with_store(store_url, release_gate)
    assert gate["result"] == "hold:nothing-to-judge"
    assert "committed no batch" in gate["hold_reason"]
    cli = riskstream("receipts", "release", "--store", store_url, check=False)
    assert cli.returncode == 1
    assert cli.stdout.splitlines()[0] == "hold:nothing-to-judge"


def test_receipt_repairs_on_a_store_the_scorer_never_wrote_refuse(store_url, tmp_path):
    Store(store_url).dispose()
    for args in (("reconcile",), ("rescore", "--model", "m0")):
        cli = riskstream("receipts", *args, "--store", store_url, "--model-dir",
                         str(tmp_path / "models"), check=False)
        assert cli.returncode == 6, cli.stderr
        assert "hold:nothing-to-judge: the receipts pipeline has committed no batch" in cli.stderr


def test_release_with_an_empty_log_holds(store_url, tmp_path):
    (tmp_path / "log" / "receipts").mkdir(parents=True)
    (tmp_path / "log" / "receipts" / "p0.jsonl").write_bytes(b"")
    run_scorer(tmp_path / "log", store_url, tmp_path / "models", end_of_stream=True)
    gate = with_store(store_url, release_gate)
    assert gate["result"] == "hold:nothing-to-judge", gate


def _tamper_one_decision_hash(url) -> str:
    """Change the stored payload_hash of one decision of the last committed batch (the one the
    restart replays from the journal): the issue's reproduction."""
    def go(store):
        f = S.facts.c
        last = store.last_journal_seq("receipts")
        row = store.rows(S.facts.select().where(f.pipeline == "receipts", f.kind == "decision",
                                                f.batch_seq == last)
                         .order_by(f.id).limit(1))[0]
        with store.engine.begin() as conn:
            conn.execute(update(S.facts).where(f.id == row["id"]).values(payload_hash="0" * 64))
        return row["fact_key"]
    return with_store(url, go)


def test_open_sink_exception_holds_release_until_a_recorded_decision(receipts_seed, store_url,
                                                                     tmp_path):
    models = str(tmp_path / "models")
    crashed = riskstream("receipts", "run", "--source", receipts_seed, "--store", store_url,
                         "--model-dir", models, "--batch-size", "50", "--checkpoint-every", "100",
                         "--crash-at", "after-sink-write:3", "--quiet", check=False)
    assert crashed.returncode != 0
    victim = _tamper_one_decision_hash(store_url)
    rerun = riskstream("receipts", "run", "--source", receipts_seed, "--store", store_url,
                       "--model-dir", models, "--batch-size", "50", "--checkpoint-every", "100",
                       "--end-of-stream", "--quiet")
    assert "rejected 1" in rerun.stdout
    # The open exception holds the repair too: nothing is published past it.
    refused = riskstream("receipts", "reconcile", "--store", store_url, "--model-dir", models,
                         check=False)
    assert refused.returncode == 6 and "hold:open-exceptions: 1 open blocker (sx-" in \
        refused.stderr
    gate = riskstream("receipts", "release", "--store", store_url, check=False)
    assert gate.returncode == 1, gate.stdout
    # Unreconciled as well as blocked: the output hold comes first, the blocker is named.
    assert gate.stdout.splitlines()[0] == "hold:missing-or-extra-output"
    assert gate.stdout.splitlines()[1].startswith("  hold:open-exceptions: 1 open blocker")
    [b] = with_store(store_url, lambda s: blockers(s, "receipts"))
    assert b.kind == "sink_exception" and victim in b.detail and b.open
    listed = riskstream("exceptions", "list", "--store", store_url, "--open")
    assert b.blocker_id in listed.stdout and "open" in listed.stdout
    # A decision needs a known decision, who and why; an unknown ID is refused.
    bad = riskstream("exceptions", "resolve", "--store", store_url, "--id", "sx-999",
                     "--decision", "keep-existing", "--by", "ops", "--reason", "x", check=False)
    assert bad.returncode == 2 and "no blocker 'sx-999'" in bad.stderr
    riskstream("exceptions", "resolve", "--store", store_url, "--id", b.blocker_id,
               "--decision", "keep-existing", "--by", "ops@example", "--reason",
               "the stored hash was altered by hand; the committed decision stands")
    again = riskstream("exceptions", "resolve", "--store", store_url, "--id", b.blocker_id,
                       "--decision", "keep-existing", "--by", "ops", "--reason", "x",
                       check=False)
    assert again.returncode == 2 and "already resolved" in again.stderr
    riskstream("receipts", "reconcile", "--store", store_url, "--model-dir", models)
    gate = riskstream("receipts", "release", "--store", store_url)
    assert gate.stdout.splitlines()[0] == "accept:reconciled"
    packet = with_store(store_url, incident_packet)
    [shown] = packet["exceptions"]["blockers"]
    assert shown["status"] == "resolved"
    assert shown["decision"]["decided_by"] == "ops@example"
    text = riskstream("receipts", "incident", "--store", store_url).stdout
    assert f"{b.blocker_id} sink_exception resolved" in text and "ops@example" in text


def test_accounting_gap_and_unexplained_quarantine_block_until_explained(store_url, tmp_path):
    from .receiptsutil import rcpt, write_log
    src = write_log(tmp_path / "log", {0: [rcpt("a", "m1", 1), rcpt("b", "m1", 3)]})
    (tmp_path / "log" / "receipts" / "p0.jsonl").open("ab").write(b"not json\n")
    run_scorer(src, store_url, tmp_path / "models", end_of_stream=True)
    assert with_store(store_url, lambda s: hold_reason(s, "receipts")) is None

    def break_accounting(store):
        a, q = S.archive.c, S.quarantine.c
        with store.engine.begin() as conn:
            conn.execute(S.archive.delete().where(a.pipeline == "receipts", a.event_id == "b"))
            conn.execute(update(S.quarantine).where(q.pipeline == "receipts").values(reason=""))
    with_store(store_url, break_accounting)
    found = with_store(store_url, lambda s: blockers(s, "receipts"))
    assert sorted(b.kind for b in found) == ["accounting_gap", "unexplained_quarantine"]
    gap = next(b for b in found if b.kind == "accounting_gap")
    assert gap.blocker_id == "gap:receipts:0:3:2"
    gate = with_store(store_url, release_gate)
    assert gate["result"].startswith("hold:")
    assert gate["hold_reason"].startswith("hold:open-exceptions: 2 open blockers")
    with pytest.raises(DecisionRefused):
        with_store(store_url, lambda s: resolve(s, gap.blocker_id, "ignore", "ops", "x"))
    for b in found:
        with_store(store_url, lambda s, b=b: resolve(s, b.blocker_id, "explained", "ops",
                                                     "archive row removed in a test"))
    assert with_store(store_url, lambda s: hold_reason(s, "receipts")) is None


def test_repair_run_on_a_store_no_pipeline_wrote_fails(store_url, tmp_path):
    Store(store_url).dispose()
    out = riskstream("repair", "run", "--store", store_url, "--warehouse",
                     str(tmp_path / "wh.duckdb"), check=False)
    assert out.returncode == 1
    assert "nothing to repair: no pipeline has committed a batch" in out.stderr
    assert not (tmp_path / "wh.duckdb").exists()


def test_rescore_refuses_while_a_sink_exception_is_open(store_url, tmp_path):
    from .receiptsutil import rcpt, write_log
    from .storeutil import write_conflicting_copy
    models = tmp_path / "models"
    src = write_log(tmp_path / "log", {0: [rcpt("a", "m1", 1), rcpt("b", "m1", 3)]})
    run_scorer(src, store_url, models, end_of_stream=True)
    assert with_store(store_url,
                      lambda s: write_conflicting_copy(s, "receipts").rejected) == 1
    from streaming.models.registry import Registry
    from .receiptsutil import stricter_artifact
    stricter = Registry(str(models)).register(stricter_artifact())
    out = riskstream("receipts", "rescore", "--model", stricter, "--store", store_url,
                     "--model-dir", str(models), check=False)
    assert out.returncode == 6 and "hold:open-exceptions: 1 open blocker" in out.stderr
    assert with_store(store_url, lambda s: len(s.facts("receipts"))) == 2
