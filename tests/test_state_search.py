"""The searches of sorted int times (`streaming.state.first_at_or_after` and
`first_at_or_after_near`: what a key's time index and the receipt scorer search with) against
the bisect module's."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.state import first_at_or_after, first_at_or_after_near


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62), max_size=40).map(sorted), st.data())
def test_the_search_finds_what_bisect_left_finds(times, data):
    """The state's own search (C integers when compiled) against the bisect module's, on
    sorted times with repeats, from every start."""
    pool = times + [t + d for t in times for d in (-1, 1)] + [-(2**62) - 1, 2**62 + 1]
    t = data.draw(st.sampled_from(pool))
    lo = data.draw(st.integers(0, len(times)))
    assert first_at_or_after(times, t, lo) == bisect_left(times, t, lo)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62), max_size=60).map(sorted), st.data())
def test_the_search_from_a_nearby_index_finds_what_bisect_left_finds(times, data):
    """The search that starts from the index of the lookup before (`near`) against the bisect
    module's: the same answer from every start and every `near`, including indexes outside the
    list (a hint a cut or an insert has moved)."""
    pool = times + [t + d for t in times for d in (-1, 1)] + [-(2**62) - 1, 2**62 + 1]
    t = data.draw(st.sampled_from(pool))
    lo = data.draw(st.integers(0, len(times)))
    near = data.draw(st.integers(-3, len(times) + 3))
    assert first_at_or_after_near(times, t, lo, near) == bisect_left(times, t, lo)
