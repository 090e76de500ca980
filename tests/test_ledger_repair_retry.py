"""Ledger repairs fail closed: a held request makes `ledger repair` exit non-zero and can be
retried (`--retry-held [--id ID]`, every attempt recorded); the signature protects the amount
(the archived payload is checked against the signed subject_hash); a key-less run never
verifies a request signed under a configured key and says on its first line that it uses the
development key; open ledger blockers hold every repair. SQLite and PostgreSQL."""

from __future__ import annotations

import os
import orjson
import pytest
from sqlalchemy import select, update

from streaming.repairs.ledger import DEV_KEY, RepairKey, run_ledger_repairs
from streaming.store import schema as S
from streaming.store.ops import Store
from streaming.store.tables_ledger import ledger_repair_attempts as RA
from streaming.store.tables_ledger import ledger_repair_requests as RR
from riskstream_tools.workloads.ledger_seed import generate

from .ledgerutil import cli, run_ledger, windows
from .storeutil import write_conflicting_copy

H10 = ("acct-8", "2026-10-06T10:00Z")
K1 = RepairKey(b"k1", "env")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    out = tmp_path_factory.mktemp("ledger_retry_seed")
    generate(4, str(out), payments=120)
    return str(out)


def _no_key_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "RISKSTREAM_REPAIR_KEY"}


def _requests(url) -> dict[str, dict]:
    store = Store(url)
    try:
        return {r["subject_id"]: r for r in store.rows(RR.select())}
    finally:
        store.dispose()


def _attempts(url) -> list[tuple[str, str, int, str]]:
    store = Store(url)
    try:
        return [(r["request_id"].split("|")[0], r["result"], r["retry"], r["key_source"])
                for r in store.rows(select(RA).order_by(RA.c.id))]
    finally:
        store.dispose()


def _h10_total(url) -> tuple[int, str]:
    [row] = [r for r in windows(url) if (r["account_id"], r["event_hour"]) == H10]
    return row["total_cents"], row["status"]


def test_held_requests_fail_the_command_and_can_be_retried(source, store_url):
    run_ledger(source, store_url, key=K1, end_of_stream=True)
    wrong = cli("repair", "--store", store_url, env={"RISKSTREAM_REPAIR_KEY": "k2"})
    assert wrong.returncode == 1, wrong.stdout
    assert "held 2" in wrong.stdout and wrong.stdout.count("bad_signature") == 2
    assert "2 repair requests are held" in wrong.stderr
    # With the right key nothing is pending, but the held requests still fail the command.
    right = cli("repair", "--store", store_url, env={"RISKSTREAM_REPAIR_KEY": "k1"})
    assert right.returncode == 1 and "0 pending" in right.stdout
    assert "2 repair requests are held" in right.stderr
    reqs = _requests(store_url)
    pay = reqs["pay-106"]["request_id"]
    # A retry with the wrong key keeps them held; each attempt is recorded.
    still = cli("repair", "--store", store_url, "--retry-held",
                env={"RISKSTREAM_REPAIR_KEY": "k2"})
    assert still.returncode == 1 and "2 held retried" in still.stdout
    assert {r["status"] for r in _requests(store_url).values()} == {"held"}
    # --id retries one request; the other stays held.
    bad_id = cli("repair", "--store", store_url, "--retry-held", "--id", "nope",
                 env={"RISKSTREAM_REPAIR_KEY": "k1"})
    assert bad_id.returncode == 2 and "not held: nope (unknown)" in bad_id.stderr
    one = cli("repair", "--store", store_url, "--retry-held", "--id", pay,
              env={"RISKSTREAM_REPAIR_KEY": "k1"})
    assert one.returncode == 1 and "repaired 1, held 0" in one.stdout
    assert "1 repair request is held" in one.stderr
    reqs = _requests(store_url)
    assert reqs["pay-106"]["status"] == "repaired" and reqs["cv-merch-4-crypto"]["status"] == "held"
    assert _h10_total(store_url) == (7350, "corrected")
    rest = cli("repair", "--store", store_url, "--retry-held",
               env={"RISKSTREAM_REPAIR_KEY": "k1"})
    assert rest.returncode == 0, rest.stderr
    assert {r["status"] for r in _requests(store_url).values()} == {"repaired"}
    attempts = _attempts(store_url)
    assert [a for a in attempts if a[0] == "payment"] == [
        ("payment", "held", 0, "env"), ("payment", "held", 1, "env"),
        ("payment", "verified", 1, "env")]
    assert [a[1:3] for a in attempts if a[0] == "category"] == [
        ("held", 0), ("held", 1), ("verified", 1)]


def test_signature_protects_the_archived_amount(source, store_url):
    run_ledger(source, store_url, key=K1, end_of_stream=True)
    store = Store(store_url)
    try:
        a = S.archive.c
        [row] = store.rows(select(S.archive).where(a.pipeline == "ledger",
                                                   a.event_id == "pay-106"))
        forged = {**orjson.loads(row["payload"]), "amount_cents": 99_999_999}
        with store.engine.begin() as conn:
            conn.execute(update(S.archive).where(a.pipeline == "ledger", a.event_id == "pay-106")
                         .values(payload=orjson.dumps(forged, option=orjson.OPT_SORT_KEYS)
                                 .decode()))
        s = run_ledger_repairs(store, K1)
    finally:
        store.dispose()
    held = {h["request_id"].split("|")[0]: h["reason"] for h in s["held"]}
    assert held["payment"].startswith("subject_changed: the archived payload at payments:")
    assert s["published"] == [] or all("acct-8|2026-10-06T10:00Z" not in k
                                      for k in s["published"])
    assert _h10_total(store_url) == (6950, "final")
    assert _requests(store_url)["pay-106"]["status"] == "held"


def test_a_changed_archived_payment_in_the_window_holds_the_rebuild(source, store_url):
    run_ledger(source, store_url, key=K1, end_of_stream=True)
    store = Store(store_url)
    try:
        a = S.archive.c
        pay = _requests(store_url)["pay-106"]
        others = [r for r in store.rows(select(S.archive).where(
            a.pipeline == "ledger", a.topic == "payments", a.event_id != "pay-106",
            a.disposition == "accepted"))
            if orjson.loads(r["payload"])["account_id"] == "acct-8"
            and r["event_us"] // 3_600_000_000 == pay["hour_us"] // 3_600_000_000]
        victim = others[0]
        forged = {**orjson.loads(victim["payload"]), "amount_cents": 99_999_999}
        with store.engine.begin() as conn:
            conn.execute(update(S.archive).where(
                a.pipeline == "ledger", a.topic == "payments", a.partition == victim["partition"],
                a.offset == victim["offset"]).values(payload=orjson.dumps(
                    forged, option=orjson.OPT_SORT_KEYS).decode()))
        s = run_ledger_repairs(store, K1)
    finally:
        store.dispose()
    reasons = [h["reason"] for h in s["held"] if h["request_id"] == pay["request_id"]]
    assert reasons and reasons[0].startswith(f"archive_changed: the archived payment "
                                             f"{victim['event_id']}")
    assert _h10_total(store_url) == (6950, "final")


def test_keyless_run_never_uses_the_dev_key_on_configured_key_requests(source, sqlite_url):
    env = _no_key_env()
    assert cli("run", "--source", source, "--store", sqlite_url, "--quiet", "--end-of-stream",
               env=env).returncode == 0
    # A forged request claiming a configured key, signed with the public development key
    # (key_source is bookkeeping, not part of the signed body).
    store = Store(sqlite_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(update(RR).where(RR.c.subject_id == "cv-merch-4-crypto")
                         .values(key_source="env"))
    finally:
        store.dispose()
    out = cli("repair", "--store", sqlite_url, env=env)
    first = out.stdout.splitlines()[0]
    assert first == ("ledger repair uses the development key (dev (RISKSTREAM_REPAIR_KEY "
                     "unset)): it applies only requests signed with that key")
    assert out.returncode == 1
    reqs = _requests(sqlite_url)
    assert reqs["cv-merch-4-crypto"]["status"] == "held"
    assert reqs["cv-merch-4-crypto"]["status_reason"].startswith("dev_key_refused")
    assert reqs["pay-106"]["status"] == "repaired"  # the dev-signed one: the demo path works


def test_keyless_run_on_a_configured_key_store_applies_nothing(source, tmp_path):
    url = f"sqlite:///{tmp_path}/ops.sqlite"
    run_ledger(source, url, key=K1, end_of_stream=True)
    store = Store(url)
    try:  # forge: re-sign one request with the development key and claim it
        from streaming.repairs.ledger import RepairKey as RK
        row = store.rows(RR.select().where(RR.c.subject_id == "pay-106"))[0]
        sig = RK(DEV_KEY, "dev").sign(row)
        with store.engine.begin() as conn:
            conn.execute(update(RR).where(RR.c.subject_id == "pay-106")
                         .values(key_source="dev", signature=sig))
    finally:
        store.dispose()
    out = cli("repair", "--store", url, env=_no_key_env())
    assert out.returncode == 1
    reqs = _requests(url)
    assert {r["status"] for r in reqs.values()} == {"held"}
    assert reqs["pay-106"]["status_reason"].startswith(
        "dev_key_refused: a ledger run of this store signed with a configured key")
    assert _h10_total(url) == (6950, "final")


def test_keyless_demo_path_repairs(source, sqlite_url):
    env = _no_key_env()
    assert cli("run", "--source", source, "--store", sqlite_url, "--quiet", "--end-of-stream",
               env=env).returncode == 0
    out = cli("repair", "--store", sqlite_url, env=env)
    assert out.returncode == 0, out.stderr
    assert "repaired 2, held 0" in out.stdout
    assert _h10_total(sqlite_url) == (7350, "corrected")


def test_open_ledger_blocker_holds_the_repair_and_a_never_run_ledger_fails(source, store_url,
                                                                          tmp_path):
    empty = f"sqlite:///{tmp_path}/empty.sqlite"
    Store(empty).dispose()
    never = cli("repair", "--store", empty, env={"RISKSTREAM_REPAIR_KEY": "k1"})
    assert never.returncode == 1 and "the ledger has committed no batch" in never.stderr
    run_ledger(source, store_url, key=K1, end_of_stream=True)
    store = Store(store_url)
    try:
        assert write_conflicting_copy(store, "ledger", "window").rejected == 1
    finally:
        store.dispose()
    out = cli("repair", "--store", store_url, env={"RISKSTREAM_REPAIR_KEY": "k1"})
    assert out.returncode == 1
    assert "no repair applied: hold:open-exceptions: 1 open blocker (sx-" in out.stderr
    assert {r["status"] for r in _requests(store_url).values()} == {"pending"}
    rec = cli("reconcile", "--store", store_url)
    assert rec.returncode == 1 and "hold:open-exceptions" in rec.stderr
