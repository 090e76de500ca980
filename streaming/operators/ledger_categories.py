"""Effective-dated merchant category versions and the temporal lookup rule.

Ranges are half-open `[effective_from, effective_to)`. An open version (effective_to null) runs
until the merchant's next version by `effective_from`: a new version closes the open one at its
`from`. A closed version must not overlap another version's range, and two versions of a
merchant must not share a `from` unless they carry the same content. The category of a payment
is the version whose range holds the payment's event time, among the versions known.

One implementation serves the live operator and the repair rebuild."""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Final

from ..contracts import Record
from ..timeutil import LAST_FINITE, us_to_iso

# A version as kept in state (JSON-able): [from_us, to_us|None, version_id, category, high_risk,
# payload_hash, source bytes]. Versions built outside the live operator (the repair rebuild,
# checkpoints from before the bytes were kept) may end at payload_hash.
FROM: Final = 0
TO: Final = 1
VID: Final = 2
CATEGORY: Final = 3
HIGH_RISK: Final = 4
HASH: Final = 5
SIZE: Final = 6

NEW: Final = "new"
DUPLICATE: Final = "duplicate"


class VersionRejected(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _rng(v: list[Any]) -> str:
    return f"[{us_to_iso(v[FROM])}, {us_to_iso(v[TO]) if v[TO] is not None else 'open'})"


class CategoryVersions:
    def __init__(self) -> None:
        self.by_merchant: dict[str, list[list[Any]]] = {}
        # Per merchant, its versions' `from` in the same order: the lookup of every payment
        # bisects plain ints rather than calling a key function per probe (derived).
        self._froms: dict[str, list[int]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_merchant.values())

    def check(self, merchant: str, v: list[Any]) -> str:
        """NEW or DUPLICATE; raises VersionRejected with the reason otherwise."""
        f, t = v[FROM], v[TO]
        if t is not None and t <= f:
            raise VersionRejected("category_empty_range",
                                  f"version {v[VID]} of {merchant}: effective_to {us_to_iso(t)} "
                                  f"is not after effective_from {us_to_iso(f)}")
        for e in self.by_merchant.get(merchant, ()):
            if e[VID] == v[VID]:
                if e[HASH] == v[HASH]:
                    return DUPLICATE
                raise VersionRejected("conflicting_duplicate",
                                      f"version {v[VID]} of {merchant} was seen with other content")
            if e[FROM] == f:
                if (e[TO], e[CATEGORY], e[HIGH_RISK]) == (t, v[CATEGORY], v[HIGH_RISK]):
                    return DUPLICATE
                raise VersionRejected("category_equal_from",
                                      f"version {v[VID]} of {merchant} starts at {us_to_iso(f)} "
                                      f"like version {e[VID]} with other content")
            if t is not None:
                if e[TO] is not None and e[FROM] < t and f < e[TO]:
                    raise VersionRejected("overlapping_versions",
                                          f"version {v[VID]} {_rng(v)} of {merchant} overlaps "
                                          f"version {e[VID]} {_rng(e)}")
                if e[TO] is None and f < e[FROM] < t:
                    raise VersionRejected("overlapping_versions",
                                          f"version {v[VID]} {_rng(v)} of {merchant} covers the "
                                          f"start of open version {e[VID]} {_rng(e)}")
            elif e[TO] is not None and e[FROM] < f < e[TO]:
                raise VersionRejected("overlapping_versions",
                                      f"open version {v[VID]} {_rng(v)} of {merchant} starts "
                                      f"inside version {e[VID]} {_rng(e)}")
        return NEW

    def add(self, merchant: str, v: list[Any]) -> None:
        versions = self.by_merchant.setdefault(merchant, [])
        versions.append(v)
        versions.sort(key=lambda x: x[FROM])
        self._froms[merchant] = [x[FROM] for x in versions]

    def effective(self, merchant: str, t: int) -> list[Any] | None:
        froms = self._froms.get(merchant)
        if not froms:
            return None
        # The latest version first: most payments fall in it, and its start compared as a
        # native int (compiled) costs a fraction of `bisect_right`'s call on a boxed time.
        last = len(froms) - 1
        i = last if froms[last] <= t else bisect_right(froms, t) - 1
        if i < 0:
            return None
        versions = self.by_merchant[merchant]
        v = versions[i]
        end = v[TO]
        if end is None:
            if i == last:
                return v if t <= LAST_FINITE else None  # t < POS_INF (timeutil)
            end = versions[i + 1][FROM]
        return v if t < end else None

    def snapshot(self) -> dict[str, Any]:
        return self.by_merchant

    @classmethod
    def restore(cls, snap: dict[str, Any]) -> CategoryVersions:
        c = cls()
        c.by_merchant = {m: [list(v) for v in vs] for m, vs in snap.items()}
        c._froms = {m: [v[FROM] for v in vs] for m, vs in c.by_merchant.items()}
        return c


def version_from_record(rec: Record) -> tuple[str, list[Any]]:
    """(merchant, version) from a validated merchant_categories record."""
    p = rec.payload
    return p["merchant_id"], [rec.times["effective_from"], rec.times.get("effective_to"),
                              p["version_id"], p["category"], p["high_risk"], rec.payload_hash,
                              rec.size]
