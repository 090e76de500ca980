"""The ledger's seed scenario, written as a file log (same layout as the join).

Routing: payments are partitioned by account (the ledger's key), p0/p1 by crc32(account) % 2;
merchant_categories has one partition. Background payments arrive at a steady rate with an
event time up to 90 s before arrival (inside the 5-minute watermark delay, so never late), on
merchants that the named cases do not touch.

Named cases (all on 2026-10-06, listed in scenario.json):
  provisional      acct-8 10:00 gets revision 1 (provisional) once payments_wm >= 11:00
  late_payment     pay-105 (10:45) arrives 11:15, before the 12:00 cutoff: revision 2
  category_change  merch-1 becomes high-risk gambling from 10:15, delivered 11:20, after the
                   payments pay-102 (10:10, stays grocery) and pay-103 (10:20, turns high risk):
                   revision 3
  correction       pay-104 revision 2 replaces its amount while the window is open
  duplicates       pay-101 again with the same content (no effect) and pay-102 with other
                   content at the same revision (quarantined)
  beyond_retention pay-106 (10:50) arrives 12:30, after acct-8 10:00 is final: a signed repair
  final_category   merch-4 becomes high-risk from 09:30, delivered 13:20 after acct-9 09:00 is
                   final: a signed category repair request
  overlapping      merch-3 gets an overlapping closed range and a version with an equal `from`
                   and other content: both quarantined
  newer_version    merch-1 back to grocery from 13:00 (delivered 13:10): pay-107 at 13:30 is low
                   risk while acct-8 10:00 keeps the version effective at 10:20
"""

from __future__ import annotations

import os
import random
import zlib
from datetime import UTC, datetime, timedelta

import orjson

from streaming.timeutil import iso

from .recording import Recording

DAY = datetime(2026, 10, 6, tzinfo=UTC)
BACKGROUND_START = DAY + timedelta(hours=9)
BACKGROUND_END = DAY + timedelta(hours=14, minutes=30)
BACKGROUND_MERCHANTS = {f"merch-{i}": (cat, risk) for i, (cat, risk) in enumerate(
    [("grocery", False), ("travel", False), ("electronics", False), ("gaming", True),
     ("fuel", False), ("crypto", True), ("pharmacy", False), ("books", False)], start=10)}


def at(h: int, m: int = 0, s: int = 0) -> datetime:
    return DAY + timedelta(hours=h, minutes=m, seconds=s)


def account_partition(account: str) -> int:
    return zlib.crc32(account.encode()) % 2


def payment(pid: str, account: str, merchant: str, t: datetime, arrival: datetime, cents: int,
            rev: int = 1) -> dict:
    return {"payment_id": pid, "revision": rev, "merchant_id": merchant, "account_id": account,
            "amount_cents": cents, "event_time": iso(t), "arrival_time": iso(arrival)}


def version(vid: str, merchant: str, category: str, high_risk: bool, start: datetime,
            end: datetime | None, arrival: datetime) -> dict:
    return {"version_id": vid, "merchant_id": merchant, "category": category,
            "high_risk": high_risk, "effective_from": iso(start),
            "effective_to": iso(end) if end else None, "arrival_time": iso(arrival)}


def generate(seed: int, out: str, payments: int = 400, rate: float | None = None,
             scenario: bool = True, accounts: int = 20) -> dict:
    """Write the log. `payments` background payments arrive at `rate` per second of source time
    (default: spread evenly over 09:00-14:30). With scenario=False only the background and the
    background merchants' categories are written (pressure and benchmark workloads)."""
    rng = random.Random(seed)
    log = Recording()
    pay = lambda obj, arr: log.add("payments", account_partition(obj["account_id"]), arr, obj)  # noqa: E731
    cat = lambda obj, arr: log.add("merchant_categories", 0, arr, obj)  # noqa: E731
    # Published with the first payments (the log merges categories first at equal arrival).
    for m, (name, risk) in BACKGROUND_MERCHANTS.items():
        cat(version(f"cv-{m}-1", m, name, risk, DAY, None, BACKGROUND_START), BACKGROUND_START)
    span_s = (BACKGROUND_END - BACKGROUND_START).total_seconds()
    step = 1.0 / rate if rate else span_s / max(1, payments)
    names = list(BACKGROUND_MERCHANTS)
    acct_names = [f"acct-{100 + i}" for i in range(accounts)]
    for i in range(payments):
        arrival = BACKGROUND_START + timedelta(seconds=i * step)
        t = arrival - timedelta(seconds=rng.randint(0, 90))
        pay(payment(f"pay-bg-{i:06d}", rng.choice(acct_names), rng.choice(names), t, arrival,
                    rng.randint(100, 50_000)), arrival)
    cases: dict = {}
    if scenario:
        cases = _scenario(pay, cat)
    log.write(out, {"payments": 2, "merchant_categories": 1})
    manifest = {"seed": seed, "background_payments": payments, "rate": rate,
                "lines": log.n, "cases": cases}
    with open(os.path.join(out, "scenario.json"), "wb") as fh:
        fh.write(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    return manifest


def _scenario(pay, cat) -> dict:
    early = at(7)
    cat(version("cv-merch-1-grocery", "merch-1", "grocery", False, DAY, None, early), early)
    cat(version("cv-merch-2-travel", "merch-2", "travel", False, DAY, DAY + timedelta(days=1),
                early), early)
    cat(version("cv-merch-3-fuel", "merch-3", "fuel", False, DAY, at(12), early), early)
    cat(version("cv-merch-4-books", "merch-4", "books", False, DAY, None, early), early)
    # acct-9 09:00 (final from payments_wm >= 11:00)
    pay(payment("pay-201", "acct-9", "merch-4", at(9, 40), at(9, 40, 20), 5000), at(9, 40, 20))
    pay(payment("pay-202", "acct-9", "merch-2", at(9, 50), at(9, 50, 20), 300), at(9, 50, 20))
    # acct-8 10:00
    pay(payment("pay-101", "acct-8", "merch-2", at(10, 5), at(10, 5, 30), 2600), at(10, 5, 30))
    pay(payment("pay-102", "acct-8", "merch-1", at(10, 10), at(10, 10, 30), 900), at(10, 10, 30))
    pay(payment("pay-103", "acct-8", "merch-1", at(10, 20), at(10, 20, 30), 1500), at(10, 20, 30))
    pay(payment("pay-101", "acct-8", "merch-2", at(10, 5), at(10, 30), 2600), at(10, 30))
    pay(payment("pay-102", "acct-8", "merch-1", at(10, 10), at(10, 35), 999), at(10, 35))
    pay(payment("pay-104", "acct-8", "merch-2", at(10, 40), at(10, 41), 700), at(10, 41))
    pay(payment("pay-104", "acct-8", "merch-2", at(10, 40), at(10, 50), 750, rev=2), at(10, 50))
    pay(payment("pay-105", "acct-8", "merch-2", at(10, 45), at(11, 15), 1200), at(11, 15))
    cat(version("cv-merch-1-gambling", "merch-1", "gambling", True, at(10, 15), None,
                at(11, 20)), at(11, 20))
    pay(payment("pay-106", "acct-8", "merch-3", at(10, 50), at(12, 30), 400), at(12, 30))
    cat(version("cv-merch-3-fuel-hr", "merch-3", "fuel", True, at(11), DAY + timedelta(days=1),
                at(12, 40)), at(12, 40))
    cat(version("cv-merch-3-pharmacy", "merch-3", "pharmacy", False, DAY, None, at(12, 45)),
        at(12, 45))
    cat(version("cv-merch-1-grocery-2", "merch-1", "grocery", False, at(13), None, at(13, 10)),
        at(13, 10))
    cat(version("cv-merch-4-crypto", "merch-4", "crypto", True, at(9, 30), None, at(13, 20)),
        at(13, 20))
    pay(payment("pay-107", "acct-8", "merch-1", at(13, 30), at(13, 30, 30), 800), at(13, 30, 30))
    return {
        "provisional": {"window": "acct-8|2026-10-06T10:00Z"},
        "late_payment": {"payment_id": "pay-105", "window": "acct-8|2026-10-06T10:00Z"},
        "category_change": {"version_id": "cv-merch-1-gambling", "stays_low": "pay-102",
                            "turns_high": "pay-103"},
        "correction": {"payment_id": "pay-104", "revision": 2},
        "duplicates": {"same_content": "pay-101", "conflicting": "pay-102"},
        "beyond_retention": {"payment_id": "pay-106", "window": "acct-8|2026-10-06T10:00Z"},
        "final_category": {"version_id": "cv-merch-4-crypto",
                           "window": "acct-9|2026-10-06T09:00Z"},
        "overlapping": {"overlap": "cv-merch-3-fuel-hr", "equal_from": "cv-merch-3-pharmacy"},
        "newer_version": {"version_id": "cv-merch-1-grocery-2", "payment_id": "pay-107"},
    }
