"""The temporal lookup rule of `CategoryVersions.effective`, checked against the rule as the
module states it: the version whose half-open range `[from, to)` holds the time, an open
version running until the merchant's next version by `from`."""

from __future__ import annotations

import random

from streaming.operators.ledger_categories import (
    FROM,
    NEW,
    TO,
    VID,
    CategoryVersions,
    VersionRejected,
)
from streaming.timeutil import LAST_FINITE, POS_INF


def _by_rule(versions: list[list], t: int) -> list | None:
    """The version holding `t`, read straight off the rule (no search)."""
    ordered = sorted(versions, key=lambda v: v[FROM])
    for i, v in enumerate(ordered):
        end = v[TO]
        if end is None:
            end = ordered[i + 1][FROM] if i + 1 < len(ordered) else POS_INF
        if v[FROM] <= t < end:
            return v
    return None


def _version(vid: str, start: int, end: int | None) -> list:
    return [start, end, vid, f"cat-{vid}", vid.endswith("7"), f"hash-{vid}", 100]


def test_effective_equals_the_rule_at_every_edge():
    rng = random.Random(20261205)
    for case in range(300):
        cats = CategoryVersions()
        kept: list[list] = []
        # Versions in a random order, some closed, some open; those the rules refuse are
        # left out, as the operator leaves them out.
        for n in range(rng.randint(1, 9)):
            start = rng.randrange(0, 100) * 10
            end = None if rng.random() < 0.5 else start + rng.randrange(1, 8) * 10
            v = _version(f"v{case}-{n}", start, end)
            try:
                if cats.check("m", v) == NEW:
                    cats.add("m", v)
                    kept.append(v)
            except VersionRejected:
                pass
        edges = {e for v in kept for e in (v[FROM], v[TO]) if e is not None}
        times = sorted({-5, 0, 1_005, *edges, *(e - 1 for e in edges), *(e + 1 for e in edges),
                        *(rng.randrange(-20, 1_100) for _ in range(20))})
        for t in times:
            want = _by_rule(kept, t)
            got = cats.effective("m", t)
            assert (got[VID] if got else None) == (want[VID] if want else None), (case, t)
    assert cats.effective("unknown merchant", 10) is None


def test_latest_open_version_holds_every_later_time_and_an_earlier_one_ends_at_the_next():
    cats = CategoryVersions()
    for v in (_version("a", 100, None), _version("b", 300, None), _version("c", 200, 250)):
        assert cats.check("m", v) == NEW
        cats.add("m", v)
    assert cats.effective("m", 99) is None
    assert [cats.effective("m", t)[VID] for t in (100, 199, 200, 249)] == ["a", "a", "c", "c"]
    assert cats.effective("m", 250) is None  # after the closed version, before the next
    assert [cats.effective("m", t)[VID] for t in (300, 10**15)] == ["b", "b"]
    # The open version's end is the end of time: the last finite instant is in it, the end of
    # the stream and anything past it are not (compared as machine integers when compiled).
    assert cats.effective("m", LAST_FINITE)[VID] == "b"
    assert [cats.effective("m", t) for t in (POS_INF, POS_INF + 1, 2**70)] == [None] * 3
