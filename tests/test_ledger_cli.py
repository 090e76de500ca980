"""The `riskstream ledger` command line: generate, run, windows, repair, reconcile (and its
non-zero exit when the accounting does not close)."""

from __future__ import annotations

import csv
import io

import orjson
from sqlalchemy import delete

from streaming.store import schema as S
from streaming.store.ops import Store

from .ledgerutil import cli


def test_cli_round_trip_and_reconcile_exit(tmp_path, sqlite_url):
    src = str(tmp_path / "src")
    gen = cli("generate", "--seed", "4", "--out", src, "--payments", "120")
    assert gen.returncode == 0 and "9 named cases" in gen.stdout
    run = cli("run", "--source", src, "--store", sqlite_url, "--quiet",
              "--sink-rate", "0.05", "--backlog-limit", "40")
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "process: healthy (fresh start)" in out and "freshness: current" in out
    assert "policy: watermark delay 5m, retention 1h00m, max backlog age 15m" in out
    assert "backlog: sink 0.05 rec/s until the backlog reaches 40, then unlimited" in out
    win = cli("windows", "--store", sqlite_url)
    rows = list(csv.DictReader(io.StringIO(win.stdout)))
    assert list(rows[0])[:7] == ["account_id", "event_hour", "revision", "total_cents",
                                 "payment_count", "risk_count", "status"]
    acct8 = [r for r in rows if (r["account_id"], r["event_hour"]) ==
             ("acct-8", "2026-10-06T10:00Z")]
    assert [(r["revision"], r["status"], r["total_cents"]) for r in acct8] == \
        [("4", "final", "6950")]
    rep = cli("repair", "--store", sqlite_url)
    assert rep.returncode == 0 and "repaired 2, held 0" in rep.stdout
    hist = orjson.loads(cli("windows", "--store", sqlite_url, "--all", "--format", "json").stdout)
    assert [(h["revision"], h["status"]) for h in hist
            if (h["account_id"], h["event_hour"]) == ("acct-8", "2026-10-06T10:00Z")] == \
        [(1, "provisional"), (2, "revised"), (3, "revised"), (4, "final"), (5, "corrected")]
    ok = cli("reconcile", "--store", sqlite_url)
    assert ok.returncode == 0 and ok.stdout.count("-> closes") == 3
    store = Store(sqlite_url)
    try:  # lose one archived record: the equation no longer closes
        with store.engine.begin() as conn:
            conn.execute(delete(S.archive).where(S.archive.c.pipeline == "ledger",
                                                 S.archive.c.topic == "payments",
                                                 S.archive.c.partition == 0,
                                                 S.archive.c.offset == 3))
    finally:
        store.dispose()
    bad = cli("reconcile", "--store", sqlite_url)
    assert bad.returncode == 1 and "payments:0" in bad.stdout
    assert "DOES NOT CLOSE" in bad.stdout and "does not close" in bad.stderr
