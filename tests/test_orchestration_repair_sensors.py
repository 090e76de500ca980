"""Item 7: the ledger's signed repair requests and the receipts' reconciliation records become
sensor-driven runs of jobs that call the worker-side repair functions. One run key per pending
set; the next tick with the cursor requests nothing; the run settles every pending item."""

from __future__ import annotations

import pytest

from streaming.store.ops import Store
from streaming.store.tables_ledger import ledger_repair_requests as RR
from tests.ledgerutil import ENV_KEY, run_ledger
from tests.orchestration_helpers import resources
from tests.receiptsutil import run_scorer

pytestmark = pytest.mark.dagster


@pytest.fixture
def instance(tmp_path):
    from dagster import instance_for_test
    (tmp_path / "home").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "home")) as inst:
        yield inst


def tick(sensor_def, inst, res, cursor=None):
    from dagster import build_sensor_context
    return sensor_def(build_sensor_context(instance=inst, cursor=cursor,
                                           resources={"store": res["store"]}))


def run_request(sensor_def, job_name, inst, res):
    from dagster import SensorResult, SkipReason

    from orchestration.definitions import build_defs
    first = tick(sensor_def, inst, res)
    assert isinstance(first, SensorResult)
    [req] = first.run_requests
    assert isinstance(tick(sensor_def, inst, res, first.cursor), SkipReason)
    assert [r.run_key for r in tick(sensor_def, inst, res).run_requests] == [req.run_key]
    result = build_defs(res).resolve_job_def(job_name).execute_in_process(
        instance=inst, tags={"dagster/run_key": req.run_key})
    assert result.success
    assert isinstance(tick(sensor_def, inst, res), SkipReason)  # nothing pending any more
    return result


def test_ledger_repair_requests_run_through_the_sensor(tmp_path, instance, monkeypatch):
    from orchestration.sensors import ledger_repair_sensor
    from riskstream_tools.workloads.ledger_seed import generate
    monkeypatch.setenv("RISKSTREAM_REPAIR_KEY", ENV_KEY["RISKSTREAM_REPAIR_KEY"])
    src = tmp_path / "ledger"
    generate(11, str(src), payments=300)
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    run_ledger(str(src), url, end_of_stream=True, checkpoint_every=200)
    res = resources(url, str(tmp_path / "warehouse.duckdb"))
    result = run_request(ledger_repair_sensor, "ledger_repair", instance, res)
    meta = [e for e in result.get_asset_materialization_events()][0].materialization.metadata
    assert meta["published"].value == ["acct-8|2026-10-06T10:00Z|5",
                                       "acct-9|2026-10-06T09:00Z|3"]
    store = Store(url)
    reqs = store.rows(RR.select().order_by(RR.c.request_id))
    assert [(r["subject_id"], r["status"]) for r in reqs] == [
        ("cv-merch-4-crypto", "repaired"), ("pay-106", "repaired")]
    store.dispose()


def test_receipt_reconciliation_records_run_through_the_sensor(tmp_path, instance):
    from orchestration.sensors import receipt_repair_sensor
    from riskstream_tools.workloads.receipts_seed import generate
    src = tmp_path / "receipts"
    generate(7, str(src))
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    run_scorer(str(src), url, tmp_path / "models", end_of_stream=True, checkpoint_every=200,
               batch_size=100)
    store = Store(url)
    pending = store.queue("receipts", "pending")
    assert pending
    res = resources(url, str(tmp_path / "warehouse.duckdb"))
    result = run_request(receipt_repair_sensor, "receipt_repair", instance, res)
    meta = [e for e in result.get_asset_materialization_events()][0].materialization.metadata
    assert meta["records"].value == len(pending)
    assert meta["repaired"].value > 0
    assert store.queue("receipts", "pending") == []
    assert {q["status"] for q in store.queue("receipts")} <= {"processed", "held"}
    store.dispose()
