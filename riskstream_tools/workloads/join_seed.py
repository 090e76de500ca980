"""The interval join's seed scenario, written as a file log.

Routing (the inputs are partitioned by merchant, the join key):
  payments      p0 / p1 by crc32(merchant) % 2. p1 is a slow transport: +10 min on every record.
  risk_signals  p0 / p1 by (crc32(merchant) >> 1) % 2; p1 is delayed +50 min on every record.
                p2 carries merchant-61 only: a few signals, then silence for over two hours,
                then its buffered backlog arrives in one burst (the idle partition).
Within a partition, records are written in arrival order; event-time jitter stays below the
3-minute lateness, so a record is late only where the scenario says so.

Named hard cases (listed in scenario.json next to the log):
  endpoints A (payment-first) and B (signal-first): signals at t-47m and t+8m, and one second
  outside each; the too-short-TTL pair; a live signal revision; a live payment revision and a
  stale redelivery of its first revision; a duplicate and a conflicting duplicate; malformed
  lines; and a correction for a payment older than the horizon, delivered after its state
  expired."""

from __future__ import annotations

import os
import random
import zlib
from datetime import UTC, datetime, timedelta

import orjson

from streaming.timeutil import iso

from .recording import Recording

T0 = datetime(2026, 10, 6, 9, 0, tzinfo=UTC)
HOT = "merchant-29"
IDLE_MERCHANT = "merchant-61"
PAY_DELAY = {0: timedelta(0), 1: timedelta(minutes=10)}
RISK_DELAY = {0: timedelta(0), 1: timedelta(minutes=50), 2: timedelta(0)}
SPAN_MIN = 180


def pay_partition(merchant: str) -> int:
    return zlib.crc32(merchant.encode()) % 2


def risk_partition(merchant: str) -> int:
    if merchant == IDLE_MERCHANT:
        return 2
    return (zlib.crc32(merchant.encode()) >> 1) % 2


def _pick(merchants: list[str], want_pay: int, want_risk: int, taken: set[str]) -> str:
    for m in merchants:
        if m not in taken and pay_partition(m) == want_pay and risk_partition(m) == want_risk:
            taken.add(m)
            return m
    raise RuntimeError("no merchant with the wanted routing")


def payment(pid: str, merchant: str, t: datetime, arrival: datetime, cents: int, rev: int = 1,
            account: str | None = None) -> dict:
    return {"payment_id": pid, "revision": rev, "merchant_id": merchant,
            "account_id": account or f"acct-{zlib.crc32(pid.encode()) % 40:02d}",
            "amount_cents": cents, "event_time": iso(t), "arrival_time": iso(arrival)}


def signal(sid: str, merchant: str, s: datetime, arrival: datetime, score: float,
           rev: int = 1) -> dict:
    return {"signal_id": sid, "revision": rev, "merchant_id": merchant, "score": score,
            "event_time": iso(s), "arrival_time": iso(arrival)}


def generate(seed: int, out: str, events: int = 470, merchants: int = 14,
             hard_cases: bool = True) -> dict:
    rng = random.Random(seed)
    log = Recording()
    names = [f"merchant-{i:02d}" for i in range(1, 100)]
    pool = [m for m in names if m not in (HOT, IDLE_MERCHANT)]
    taken: set[str] = set()
    cases: dict = {}
    jitter = lambda: timedelta(seconds=rng.randint(0, 90))  # noqa: E731

    def pay_arrival(m: str, t: datetime) -> datetime:
        return t + PAY_DELAY[pay_partition(m)] + jitter()

    def risk_arrival(m: str, s: datetime) -> datetime:
        return s + RISK_DELAY[risk_partition(m)] + jitter()

    def add_pay(obj: dict, arrival: datetime) -> None:
        obj["arrival_time"] = iso(arrival)
        log.add("payments", pay_partition(obj["merchant_id"]), arrival, obj)

    def add_sig(obj: dict, arrival: datetime) -> None:
        obj["arrival_time"] = iso(arrival)
        log.add("risk_signals", risk_partition(obj["merchant_id"]), arrival, obj)

    end = T0 + timedelta(minutes=SPAN_MIN)
    if hard_cases:
        # Endpoints. A: payments prompt, signals 50 min late -> payment-first for all four.
        #            B: payments 10 min late, signals prompt -> signal-first for all four.
        for label, want in (("A", (0, 1)), ("B", (1, 0))):
            m = _pick(pool, want[0], want[1], taken)
            t = T0 + timedelta(minutes=90 if label == "A" else 100)
            pid = f"pay-ep-{label.lower()}"
            add_pay(payment(pid, m, t, t, 4700), pay_arrival(m, t))
            sigs = {"lo": t - timedelta(minutes=47), "lo_out": t - timedelta(minutes=47, seconds=1),
                    "hi": t + timedelta(minutes=8), "hi_out": t + timedelta(minutes=8, seconds=1)}
            ids = {}
            for name, s in sigs.items():
                sid = f"risk-ep-{label.lower()}-{name.replace('_', '-')}"
                ids[name] = sid
                add_sig(signal(sid, m, s, s, 0.5), risk_arrival(m, s))
            cases[f"endpoint_{label}"] = {
                "merchant": m, "payment_id": pid, "order": "payment-first" if label == "A"
                else "signal-first",
                "match": [ids["lo"], ids["hi"]], "no_match": [ids["lo_out"], ids["hi_out"]]}
        # Too-short TTL: a signal 40 min before its payment, both prompt.
        m = _pick(pool, 0, 0, taken)
        tc = T0 + timedelta(minutes=120)
        sc = tc - timedelta(minutes=40)
        add_sig(signal("risk-ttl", m, sc, sc, 0.91), sc + timedelta(seconds=5))
        add_pay(payment("pay-ttl", m, tc, tc, 12000), tc + timedelta(seconds=5))
        cases["ttl"] = {"merchant": m, "payment_id": "pay-ttl", "signal_id": "risk-ttl",
                        "signal_minutes_before_payment": 40}
        # Live revisions on merchant D (prompt on both inputs).
        m = _pick(pool, 0, 0, taken)
        td = T0 + timedelta(minutes=60)
        s_rev = td - timedelta(minutes=5)
        add_sig(signal("risk-rev", m, s_rev, s_rev, 0.30), s_rev + timedelta(seconds=20))
        add_pay(payment("pay-rev-sig", m, td, td, 2500), td + timedelta(seconds=20))
        add_sig(signal("risk-rev", m, s_rev, s_rev, 0.85, rev=2), td + timedelta(seconds=60))
        tp2 = td + timedelta(minutes=2)
        add_pay(payment("pay-rev-pay", m, tp2, tp2, 1000), tp2 + timedelta(seconds=10))
        add_pay(payment("pay-rev-pay", m, tp2, tp2, 1100, rev=2), tp2 + timedelta(seconds=50))
        add_pay(payment("pay-rev-pay", m, tp2, tp2, 1000), tp2 + timedelta(seconds=100))
        cases["signal_revision"] = {"merchant": m, "signal_id": "risk-rev",
                                    "payment_id": "pay-rev-sig"}
        cases["payment_revision"] = {"merchant": m, "payment_id": "pay-rev-pay",
                                     "stale_redelivery_revision": 1}
        # Duplicate and conflicting duplicate on the hot merchant.
        tdup = T0 + timedelta(minutes=70)
        dup = payment("pay-dup", HOT, tdup, tdup, 777)
        a1 = pay_arrival(HOT, tdup)
        add_pay(dict(dup), a1)
        add_pay(dict(dup), a1 + timedelta(seconds=30))
        add_pay({**dup, "amount_cents": 778}, a1 + timedelta(seconds=45))
        cases["duplicates"] = {"payment_id": "pay-dup", "duplicate": 1, "conflicting": 1}
        # Malformed lines, each with a specific reason, all on payments p0.
        tq = T0 + timedelta(minutes=30)
        qp = pay_partition(HOT)
        bad_arrival = tq + PAY_DELAY[qp]
        log.add("payments", qp, bad_arrival, b'{"payment_id": "pay-bad-json", "revision": 1,')
        naive = payment("pay-naive", HOT, tq, tq, 100)
        naive["event_time"] = "2026-10-06T09:30:00"
        log.add("payments", qp, bad_arrival, {**naive, "arrival_time": iso(bad_arrival)})
        cents = payment("pay-float", HOT, tq, tq, 100)
        cents["amount_cents"] = 12.5
        log.add("payments", qp, bad_arrival, {**cents, "arrival_time": iso(bad_arrival)})
        fut = payment("pay-future", HOT, tq + timedelta(minutes=20), tq, 100)
        log.add("payments", qp, bad_arrival, {**fut, "arrival_time": iso(bad_arrival)})
        miss = payment("pay-missing", HOT, tq, tq, 100)
        del miss["merchant_id"]
        log.add("payments", qp, bad_arrival, {**miss, "arrival_time": iso(bad_arrival)})
        cases["quarantine"] = {"malformed_json": 1, "naive_time": 1, "non_integer_cents": 1,
                               "event_time_after_arrival": 1, "missing_field": 1}
        # A correction for a payment older than the horizon, delivered after its state expired.
        told = T0 + timedelta(minutes=20)
        add_pay(payment("pay-old", HOT, told, told, 5000), pay_arrival(HOT, told))
        tnew = told + timedelta(minutes=6)
        corr_arrival = end + timedelta(minutes=30)
        add_pay(payment("pay-old", HOT, tnew, tnew, 5400, rev=2), corr_arrival)
        cases["old_correction"] = {"payment_id": "pay-old", "merchant": HOT,
                                   "old_event_time": iso(told), "new_event_time": iso(tnew),
                                   "revision": 2}
        # A signal just after pay-old's look-ahead that only the corrected revision matches,
        # and one just inside the old look-back that only the original matches.
        s_new = told + timedelta(minutes=8, seconds=30)
        add_sig(signal("risk-old-new", HOT, s_new, s_new, 0.7), risk_arrival(HOT, s_new))
        s_old = told - timedelta(minutes=46)
        add_sig(signal("risk-old-only", HOT, s_old, s_old, 0.6), risk_arrival(HOT, s_old))
        cases["old_correction"]["gains"] = "risk-old-new"
        cases["old_correction"]["loses"] = "risk-old-only"
    hard = log.n
    # The idle partition: merchant-61's signals. A few early, then nothing until a burst.
    idle_first = [T0 + timedelta(minutes=m) for m in (2, 6, 11)]
    for i, s in enumerate(idle_first):
        add_sig(signal(f"risk-idle-{i:02d}", IDLE_MERCHANT, s, s, 0.4), s + jitter())
    burst_at = T0 + timedelta(minutes=150)
    backlog = [T0 + timedelta(minutes=m) for m in (25, 60, 95, 120, 140)]
    for i, s in enumerate(backlog):
        add_sig(signal(f"risk-idle-b{i:02d}", IDLE_MERCHANT, s, s, 0.45),
                burst_at + timedelta(seconds=i))
    cases["idle_partition"] = {"topic": "risk_signals", "partition": 2,
                               "merchant": IDLE_MERCHANT, "quiet_from": iso(idle_first[-1]),
                               "burst_at": iso(burst_at)}
    base = max(0, events - log.n)
    others = [m for m in pool if m not in taken][:max(1, merchants - len(taken) - 2)]
    choices = [HOT] * 3 + others * 1 + [IDLE_MERCHANT]
    n_pay = int(base * 0.55)
    for i in range(n_pay):
        m = rng.choice(choices)
        t = T0 + timedelta(seconds=rng.randint(0, SPAN_MIN * 60))
        add_pay(payment(f"pay-{i:05d}", m, t, t, rng.randint(100, 250_000)), pay_arrival(m, t))
    for i in range(base - n_pay):
        m = rng.choice(choices[:-1])
        s = T0 + timedelta(seconds=rng.randint(0, SPAN_MIN * 60))
        add_sig(signal(f"risk-{i:05d}", m, s, s, round(rng.random(), 3)), risk_arrival(m, s))
    log.write(out, {"payments": 2, "risk_signals": 3})
    manifest = {"seed": seed, "events": log.n, "hard_case_lines": hard, "t0": iso(T0),
                "hot_merchant": HOT, "cases": cases,
                "routing": {"payments": "crc32(merchant) % 2; p1 +10 min transport delay",
                            "risk_signals": "merchant-61 -> p2 (idle then burst); others "
                                            "(crc32(merchant) >> 1) % 2; p1 +50 min delay"}}
    with open(os.path.join(out, "scenario.json"), "wb") as fh:
        fh.write(orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    return manifest


def generate_bulk(seed: int, out: str, events: int, merchants: int = 1000,
                  hot_share: float = 0.05, events_per_minute: int = 10,
                  ordered_ids: bool = False) -> dict:
    """A benchmark workload: `events` payments and signals over many merchants, one hot,
    in-order per partition within the lateness bound (4 payment and 4 risk partitions).

    IDs are numbered in the order the events are drawn, which is unrelated to their event
    times (as random IDs, UUIDs, are). With `ordered_ids` the same events are numbered in
    event-time order instead (as sequence-numbered or time-prefixed IDs are): every time,
    merchant, amount and score is the one the default draws, so the two workloads make the
    same pairs under other names (and other accounts, which follow from the payment ID)."""
    rng = random.Random(seed)
    names = [f"merchant-{i:04d}" for i in range(merchants)]
    # Event-time span in minutes. The density decides the pair count: at 10 events a minute over
    # 1,000 merchants with a 5% hot merchant, 100,000 events give about half as many pairs.
    span = max(60, events // events_per_minute)
    # (merchant, event time, arrival, amount or score), in draw order: event i is a payment
    # when i is even, a signal when odd.
    drawn: list[tuple[str, datetime, datetime, float]] = []
    for i in range(events):
        m = names[0] if rng.random() < hot_share else rng.choice(names)
        t = T0 + timedelta(seconds=rng.randint(0, span * 60))
        a = t + timedelta(seconds=rng.randint(0, 90))
        drawn.append((m, t, a, rng.randint(100, 250_000) if i % 2 == 0
                      else round(rng.random(), 3)))
    number = list(range(events))
    if ordered_ids:
        for rank, i in enumerate(sorted(range(events), key=lambda j: (drawn[j][1], j))):
            number[i] = rank
    rows: dict[tuple[str, int], list] = {}
    for i, (m, t, a, value) in enumerate(drawn):
        part = zlib.crc32(m.encode()) % 4
        if i % 2 == 0:
            obj = payment(f"pay-{number[i]:07d}", m, t, a, int(value))
            rows.setdefault(("payments", part), []).append((a, i, orjson.dumps(obj)))
        else:
            obj = signal(f"risk-{number[i]:07d}", m, t, a, value)
            rows.setdefault(("risk_signals", part), []).append((a, i, orjson.dumps(obj)))
    for topic in ("payments", "risk_signals"):
        os.makedirs(os.path.join(out, topic), exist_ok=True)
        for p in range(4):
            with open(os.path.join(out, topic, f"p{p}.jsonl"), "wb") as fh:
                for _, _, line in sorted(rows.get((topic, p), []), key=lambda r: (r[0], r[1])):
                    fh.write(line + b"\n")
    return {"events": events, "merchants": merchants, "span_minutes": span}
