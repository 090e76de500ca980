"""The Dagster repair assets fail closed like the commands: the ledger_repair job fails and
applies nothing while the ledger has an open sink exception, and runs once it is resolved."""

from __future__ import annotations

import pytest

from streaming.gates import resolve
from streaming.store.ops import Store
from streaming.store.tables_ledger import ledger_repair_requests as RR
from tests.ledgerutil import ENV_KEY, run_ledger
from tests.orchestration_helpers import resources
from tests.storeutil import write_conflicting_copy

pytestmark = pytest.mark.dagster


def test_ledger_repair_job_holds_on_an_open_sink_exception(tmp_path, monkeypatch):
    from dagster import instance_for_test
    from orchestration.definitions import build_defs
    from riskstream_tools.workloads.ledger_seed import generate
    monkeypatch.setenv("RISKSTREAM_REPAIR_KEY", ENV_KEY["RISKSTREAM_REPAIR_KEY"])
    src = tmp_path / "ledger"
    generate(11, str(src), payments=300)
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    run_ledger(str(src), url, end_of_stream=True)
    store = Store(url)
    assert write_conflicting_copy(store, "ledger", "window").rejected == 1
    job = build_defs(resources(url, str(tmp_path / "wh.duckdb"))).resolve_job_def("ledger_repair")
    (tmp_path / "home").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        failed = job.execute_in_process(instance=instance, raise_on_error=False)
        assert not failed.success
        assert {r["status"] for r in store.rows(RR.select())} == {"pending"}
        [exc] = store.sink_exception_rows("ledger")
        resolve(store, f"sx-{exc['id']}", "keep-existing", "ops", "a test's second writer")
        passed = job.execute_in_process(instance=instance)
        assert passed.success
    assert {r["status"] for r in store.rows(RR.select())} == {"repaired"}
    store.dispose()
