"""The project's content hash: blake2b-128 as hex (payload hashes, pair IDs, fact hashes).

A module of its own so that the compiled core (streaming.native) calls it as a C function; the
contracts re-export it as `streaming.contracts.digest`.

`digests` hashes a list at once: the compiled core hashes several messages side by side in
vector registers (`hex128_many`), so a batch's texts hashed together cost a third of what one
call each does (docs/performance.md, fortieth round).

Two implementations give the same text (tests/test_hashing.py): the core's hand-written C
(`streaming/_blake2b.c`, one call per digest) where the compiled set is in use, and hashlib's
blake2b where the package runs as Python, so a pure run uses no C of the project's own."""

from __future__ import annotations

from collections.abc import Callable
from hashlib import blake2b
from typing import Final

from . import native

# A hasher at its initial state, copied for every digest: a copy is a copy of the state, where
# the constructor parses its keyword arguments and sets up the parameter block each time.
_INITIAL: Final = blake2b(digest_size=16)


def _hashlib_hex128(raw: bytes | str) -> str:
    h = _INITIAL.copy()
    h.update(raw.encode() if isinstance(raw, str) else raw)
    return h.hexdigest()


# Decided once, when the package's build is (streaming.native.select runs before this import).
_HEX128: Final[Callable[[bytes | str], str]] = (
    native.hand_written("streaming._blake2b", "hex128") or _hashlib_hex128)


def _hashlib_many(items: list[bytes | str]) -> list[str]:
    return [_hashlib_hex128(raw) for raw in items]


_HEX128_MANY: Final[Callable[[list[bytes | str]], list[str]]] = (
    native.hand_written("streaming._blake2b", "hex128_many") or _hashlib_many)


def lanes() -> int:
    """How many messages `digests` hashes side by side: 8 (AVX-512) or 4 (AVX2) in the
    compiled core, as the processor allows; 1 otherwise (hashlib, one at a time)."""
    widest = native.hand_written("streaming._blake2b", "widest_lanes")
    return int(widest()) if widest is not None else 1


def digests(items: list[bytes | str]) -> list[str]:
    """`digest` of every item, in order."""
    return _HEX128_MANY(items)


def digest(raw: bytes | str) -> str:
    """blake2b-128 of `raw` (a text is hashed as its UTF-8), as 32 hex digits."""
    return _HEX128(raw)
