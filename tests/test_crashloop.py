"""The crash loop in the suite: 30 SIGKILLs across the three pipelines' follow-mode workers on
JetStream and PostgreSQL while a paced producer publishes; the sink must equal the reference
with nothing missing, nothing extra, nothing repeated and accounting closed; then 10 kills of
join workers whose batches do not linger (`--max-batch-delay 0`), so commit far more often
(tests/crashloop.py has the procedure; `python -m tests.crashloop --kills 30` runs it alone)."""

from __future__ import annotations

import pytest

import os

from tests.conftest import need_service
from tests.crashloop import crash_loop

pytestmark = [pytest.mark.nats, pytest.mark.postgres, pytest.mark.slow]


def _assert_matches(outcomes, kills: int, pipelines: list[str]) -> None:
    assert sum(o.kills for o in outcomes) >= kills
    assert [o.pipeline for o in outcomes] == pipelines
    for o in outcomes:
        assert o.missing == [] and o.extra == [], o.line()
        assert o.repeated_facts == 0 and o.sink_exceptions == 0, o.line()
        assert o.repeated_positions == 0 and o.unread_positions == 0, o.line()
        assert o.accounting_closes, o.line()
        assert o.reference_rows > 0


def test_crash_loop_30_kills_matches_the_reference(pg_url, monkeypatch):
    need_service("NATS", "127.0.0.1", 4222)
    monkeypatch.setenv("RISKSTREAM_REPAIR_KEY", os.environ.get("RISKSTREAM_REPAIR_KEY",
                                                                "crashloop-key"))
    _assert_matches(crash_loop(30, pg_url, seed=7), 30, ["join", "ledger", "receipts"])


def test_crash_loop_without_lingering_matches_the_reference(pg_url, monkeypatch):
    # Batches that do not linger (--max-batch-delay 0) commit several times as often: more
    # kills land between a batch's records and its commit, or inside the commit. The join
    # alone: the host loop and the sink are the three pipelines' own.
    need_service("NATS", "127.0.0.1", 4222)
    monkeypatch.setenv("RISKSTREAM_REPAIR_KEY", os.environ.get("RISKSTREAM_REPAIR_KEY",
                                                                "crashloop-key"))
    _assert_matches(crash_loop(10, pg_url, seed=8, pipelines=["join"], max_batch_delay_ms=0),
                    10, ["join"])
