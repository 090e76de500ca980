"""The content hash: the compiled core's hand-written blake2b (streaming/_blake2b.c) gives the
text hashlib gives, for every length around the 128-byte blocks, for texts as their UTF-8, and
fails as `str.encode` does; `digest` uses it exactly when the compiled set is in use."""

from __future__ import annotations

import hashlib
import importlib
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming import hashing, native

from .conftest import hand_written


def _hashlib(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@pytest.fixture(scope="module")
def hex128():
    return hand_written("streaming._blake2b").hex128


def test_every_length_through_three_blocks_and_around_larger_ones(hex128):
    rng = random.Random(29)
    lengths = [*range(0, 3 * 128 + 2), 1023, 1024, 1025, 65_535, 65_536, 65_537, 1_000_003]
    for n in lengths:
        data = rng.randbytes(n)
        assert hex128(data) == _hashlib(data), n


def test_the_empty_input_and_known_answers(hex128):
    # blake2b-128 of nothing and of "abc", as hashlib (and every BLAKE2 implementation) gives.
    assert hex128(b"") == "cae66941d9efbd404e4d88758ea67670"
    assert hex128(b"abc") == "cf4ab791c62b8d2b2109c90275287816"
    assert hex128("abc") == hex128(b"abc")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_a_text_is_hashed_as_its_utf8(text):
    want = _hashlib(text.encode())
    assert hashing.digest(text) == want
    if native.active == "compiled":
        assert importlib.import_module("streaming._blake2b").hex128(text) == want


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=700))
def test_bytes_and_other_buffers_hash_alike(data):
    assert hashing.digest(data) == _hashlib(data)
    if native.active == "compiled":
        hex128 = importlib.import_module("streaming._blake2b").hex128
        assert hex128(bytearray(data)) == hex128(memoryview(data)) == _hashlib(data)


def test_what_cannot_be_hashed_fails_as_encoding_would(hex128):
    with pytest.raises(UnicodeEncodeError):
        "\ud800".encode()
    with pytest.raises(UnicodeEncodeError):
        hex128("lone \ud800 surrogate")
    with pytest.raises(TypeError):
        hex128(128)
    with pytest.raises(TypeError):
        hex128(None)


def test_digest_uses_the_c_hash_exactly_when_the_core_is_compiled():
    if native.active == "compiled":
        assert hashing._HEX128 is importlib.import_module("streaming._blake2b").hex128
    else:
        assert hashing._HEX128 is hashing._hashlib_hex128


def test_a_pure_run_hashes_with_hashlib_alone():
    from .test_native import _child

    code = ("import json, sys; from streaming import hashing, native; "
            "print(json.dumps([native.active, hashing._HEX128.__name__, "
            "'streaming._blake2b' in sys.modules, hashing.digest('riskstream')]))")
    active, chosen, loaded, text = json.loads(_child(code, pure=True))
    assert active == f"pure: {native.ENV_VAR}=off"
    assert (chosen, loaded) == ("_hashlib_hex128", False)
    assert text == _hashlib(b"riskstream")


def _mixed_items(seed: int) -> list:
    """Bytes around every block boundary up to ten blocks (past the longest grouped length),
    the empty input, and texts with characters past ASCII: more of each block count than one
    group of lanes holds, so both grouped and left-over messages are hashed."""
    rng = random.Random(seed)
    items: list = [b"", ""]
    for blocks in range(1, 11):
        for delta in (-1, 0, 1):
            n = blocks * 128 + delta
            items += [rng.randbytes(n) for _ in range(9)]
    items += ["".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(200)))
              for _ in range(40)]
    rng.shuffle(items)
    return items


def test_many_at_once_in_every_width_this_processor_runs():
    module = hand_written("streaming._blake2b")
    items = _mixed_items(40)
    want = [_hashlib(x.encode() if isinstance(x, str) else x) for x in items]
    widths = [w for w in (1, 4, 8) if w <= module.widest_lanes()]
    for lanes in [0, *widths]:
        assert module.hex128_many(items, lanes) == want, lanes
    assert module.hex128_many([]) == []
    assert module.hex128_many(items[:3]) == want[:3]  # fewer than a group: one at a time


def test_many_at_once_refuses_what_it_cannot_hash():
    module = hand_written("streaming._blake2b")
    with pytest.raises(TypeError, match="an item is int, not str or bytes"):
        module.hex128_many([b"a", 7])
    with pytest.raises(ValueError, match="lanes must be 0, 1, 4 or 8, not 3"):
        module.hex128_many([b"a"], 3)
    if module.widest_lanes() < 8:
        with pytest.raises(ValueError, match="runs at most"):
            module.hex128_many([b"a"], 8)
    with pytest.raises(UnicodeEncodeError):
        module.hex128_many(["ok", "\ud800"])


def test_digests_is_digest_of_every_item():
    items = _mixed_items(41)
    assert hashing.digests(items) == [hashing.digest(x) for x in items]


def test_lanes_is_the_compiled_cores_width_or_one():
    if native.active == "compiled":
        widest = importlib.import_module("streaming._blake2b").widest_lanes()
        assert hashing.lanes() == widest in (1, 4, 8)
    else:
        assert hashing.lanes() == 1
