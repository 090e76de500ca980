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
