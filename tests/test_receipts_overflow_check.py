"""The receipt scorer's overflow check (a receipt whose own 7-minute window, or the window of
a later receipt it would join, would leave the signed 64-bit range) against a brute-force
reference over the merchant's receipts: huge and negative amounts, equal times, receipts just
inside and outside the window. Most states take the fast bound, the rest the exact walk."""

from __future__ import annotations

import random


from streaming.models.registry import INITIAL_ARTIFACT, Model
from streaming.operators.base import fits_int64
from streaming.operators.receipts import AMOUNT, T, WINDOW_US, ReceiptScorer

from .receiptsutil import rcpt, record

MODEL = Model.from_artifact(INITIAL_ARTIFACT)
BIG = 2**63 - 1


def reference(entries: list[list], t: int, amount: int) -> bool:
    """The rule spelled out: the new receipt's own window [t - W, t), and for every receipt
    at s in (t, t + W] the receipts before it (in the merchant's order) from s - W on, plus
    the new amount."""
    if not fits_int64(amount):
        return True
    near = [e for e in entries if t - WINDOW_US <= e[T] <= t + WINDOW_US]
    if not fits_int64(sum(e[AMOUNT] for e in near if e[T] < t)):
        return True
    for i, e in enumerate(near):
        if t < e[T]:
            earlier = sum(x[AMOUNT] for x in near[:i] if x[T] >= e[T] - WINDOW_US)
            if not fits_int64(earlier + amount):
                return True
    return False


def test_overflow_check_equals_the_reference():
    rng = random.Random(11)
    amounts = [BIG, BIG // 2, -BIG, -(BIG // 2) - 7, 1, -1, 10**12, 0]
    checked = overflowing = 0
    for trial in range(300):
        op = ReceiptScorer(MODEL)
        for i in range(rng.randint(0, 12)):
            rec = record(rcpt(f"r{trial}-{i}", "m1", rng.choice([0, 1, 3.5, 7, 7, 10, 14])), 0, i)
            rec = rec.replace(payload={**rec.payload, "amount_cents": rng.choice(amounts)})
            op._insert(rec, 0, rec.event_us)
        entries = op.live_entries("m1")
        for _ in range(10):
            t = int(rng.choice([0, 2, 7, 8.5, 14, 21]) * 60_000_000)
            amount = rng.choice(amounts + [BIG + 1, -BIG - 2])
            got = op._overflows("m1", t, amount)
            assert got == reference(entries, t, amount), (trial, t, amount)
            checked += 1
            overflowing += got
    assert checked == 3000 and 300 < overflowing < 2700
