"""Follow mode refuses a restart whose stream no longer holds what the journal consumed: a
worker ends (an injected crash) before its first checkpoint, the stream is recreated with one
journaled message rewritten, and the restart exits 4 before it writes anything (no run row, no
state): every table but the worker lease is exactly as the crash left it."""

from __future__ import annotations

import os

import orjson
import pytest
from sqlalchemy import select

from streaming.store import schema as S
from streaming.store.ops import Store
from tests.conftest import need_service
from tests.followutil import NATS_HOST, NATS_PORT, cli, new_stream_url, publish

pytestmark = pytest.mark.nats

# One batch of 20 records per commit, no checkpoint before the crash at the third commit.
RUN = ["--batch-size", "20", "--checkpoint-every", "100000", "--max-batch-delay", "100"]


def snapshot(store_url: str) -> dict:
    """Every row of every table, except the lease the restart takes over from the dead worker."""
    store = Store(store_url)
    try:
        with store.engine.connect() as conn:
            return {name: sorted(map(repr, conn.execute(select(table)).all()))
                    for name, table in S.metadata.tables.items() if name != "worker_leases"}
    finally:
        store.dispose()


def rewrite_first_payment(root: str) -> None:
    path = os.path.join(root, "payments", "p0.jsonl")
    with open(path, "rb") as fh:
        lines = fh.read().splitlines()
    rec = orjson.loads(lines[0])
    rec["amount_cents"] += 1
    lines[0] = orjson.dumps(rec)
    with open(path, "wb") as fh:
        fh.write(b"".join(line + b"\n" for line in lines))


@pytest.mark.parametrize("store", ["sqlite_url", "pg_url"])
def test_rewritten_journaled_message_is_refused_before_any_write(store, request, tmp_path):
    need_service("NATS", NATS_HOST, NATS_PORT)
    from streaming.sources.nats_publish import delete_stream
    store_url = request.getfixturevalue(store)
    rec = tmp_path / "rec"
    cli("join", "generate", "--seed", "11", "--out", str(rec))
    url = new_stream_url("restore")
    try:
        publish(str(rec), url)
        res = cli("join", "run", "--source", url, "--store", store_url, "--follow",
                  "--end-of-stream", "--quiet", "--crash-at", "after-sink-write:3", *RUN,
                  check=False)
        assert res.returncode == 137, res.stdout + res.stderr
        st = Store(store_url)
        try:
            assert st.latest_checkpoint("join") is None
            assert st.last_journal_seq("join") >= 2
        finally:
            st.dispose()
        before = snapshot(store_url)
        assert len(before["runs"]) == 1
        # The same stream name and offsets, one journaled payment with another amount.
        delete_stream(url)
        rewrite_first_payment(str(rec))
        publish(str(rec), url)
        res = cli("join", "run", "--source", url, "--store", store_url, "--follow",
                  "--end-of-stream", "--quiet", *RUN, check=False)
        assert res.returncode == 4, res.stdout + res.stderr
        assert "payments:0" in res.stderr and "Traceback" not in res.stderr
        assert snapshot(store_url) == before
    finally:
        delete_stream(url)
