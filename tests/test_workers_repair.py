"""Repairs over scaled-out workers: the ledger and the receipt scorer run as two follow-mode
workers (`--worker 0/2`, `1/2`) on one PostgreSQL store, each journaling, checkpointing and
writing metrics under its own key. `ledger repair` and `receipts reconcile` read every
worker's rows (the pipeline ran, every worker is checkpointed, the watermark is the minimum
over the workers) and give the same report and outcome as after one worker on another store;
the receipts incident report shows both workers."""

from __future__ import annotations

import pytest

from streaming.store.ops import Store
from streaming.workers import input_watermark, progress
from tests.conftest import need_service
from tests.followutil import NATS_HOST, NATS_PORT, cli, comparable, current_rows, new_stream_url, \
    publish

pytestmark = pytest.mark.nats

def outcome(store_url: str, pipeline: str):
    """What the pipeline decided: the ledger's current windows; a receipt's final decision and
    features (how many rescorings led there depends on the interleaving the workers saw, so
    the revision count and its reason chain are left out)."""
    rows = comparable(current_rows(store_url, pipeline), pipeline)
    if pipeline != "receipts":
        return rows
    import orjson
    keep = ("receipt_id", "decision", "score", "feature_count_7m", "feature_amount_7m",
            "amount_cents", "model_revision")
    return sorted(tuple(orjson.loads(r[4]).get(k) for k in keep) for r in rows)


REPAIR = {"ledger": ["ledger", "repair"], "receipts": ["receipts", "reconcile"]}
TOPIC = {"ledger": "payments", "receipts": "receipts"}


@pytest.mark.parametrize("pipeline", ["ledger", "receipts"])
def test_repair_after_two_workers_equals_repair_after_one(pipeline, pg_url, sqlite_url,
                                                          tmp_path):
    need_service("NATS", NATS_HOST, NATS_PORT)
    need_service("PostgreSQL", "127.0.0.1", 5432)
    from streaming.sources.nats_publish import delete_stream
    extra = ["--model-dir", str(tmp_path / "models")] if pipeline == "receipts" else []
    rec = tmp_path / "rec"
    cli(pipeline, "generate", "--seed", "11", "--out", str(rec))
    url = new_stream_url("workers")
    try:
        publish(str(rec), url, "--pipeline", pipeline, "--partitions", "4")
        for store_url, workers in ((sqlite_url, [[]]), (pg_url, [["--worker", "0/2"],
                                                              ["--worker", "1/2"]])):
            for w in workers:
                cli(pipeline, "run", "--source", url, "--store", store_url, "--follow",
                    "--end-of-stream", "--quiet", *extra, *w)
    finally:
        delete_stream(url)
    st = Store(pg_url)
    try:
        assert [w.key for w in progress(st, pipeline)] == [f"{pipeline}@0/2",
                                                            f"{pipeline}@1/2"]
        marks = [w.metrics["input_wm"][TOPIC[pipeline]] for w in progress(st, pipeline)]
        assert input_watermark(st, pipeline, TOPIC[pipeline]) == min(marks)
    finally:
        st.dispose()
    before = outcome(sqlite_url, pipeline)
    assert outcome(pg_url, pipeline) == before
    outputs = []
    for store_url in (sqlite_url, pg_url):
        res = cli(*REPAIR[pipeline], "--store", store_url, *extra, check=False)
        assert res.returncode in (0, 1), res.stdout + res.stderr
        outputs.append((res.returncode, res.stdout.replace(store_url, "STORE")))
    assert outputs[0] == outputs[1]
    after = outcome(sqlite_url, pipeline)
    assert after != before  # the repair changed something
    assert outcome(pg_url, pipeline) == after
    if pipeline == "receipts":
        from riskstream_tools.incidents.receipts import incident_packet
        st = Store(pg_url)
        try:
            state = incident_packet(st)["state"]
            workers = progress(st, pipeline)
        finally:
            st.dispose()
        assert state["workers"] == ["receipts@0/2", "receipts@1/2"]
        assert state["checkpoint_id"] in {w.checkpoint["id"] for w in workers}
        assert state["watermark"] is not None


def test_join_rebuild_watermarks_are_the_minimum_over_workers(pg_url, tmp_path):
    need_service("NATS", NATS_HOST, NATS_PORT)
    need_service("PostgreSQL", "127.0.0.1", 5432)
    from streaming.join_rebuild import live_watermarks
    from streaming.sources.nats_publish import delete_stream
    rec = tmp_path / "rec"
    cli("join", "generate", "--seed", "11", "--out", str(rec))
    url = new_stream_url("workers")
    try:
        publish(str(rec), url, "--pipeline", "join", "--partitions", "4")
        for i in range(2):
            cli("join", "run", "--source", url, "--store", pg_url, "--follow",
                "--end-of-stream", "--quiet", "--worker", f"{i}/2")
    finally:
        delete_stream(url)
    st = Store(pg_url)
    try:
        workers = progress(st, "join")
        got = live_watermarks(st)
    finally:
        st.dispose()
    assert len(workers) == 2
    for topic in ("payments", "risk_signals"):
        marks = [w.metrics["input_wm"][topic] for w in workers]
        assert got[topic] == min(marks) and got[topic] is not None
