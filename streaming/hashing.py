"""The project's content hash: blake2b-128 as hex (payload hashes, pair IDs, fact hashes).

A module of its own so that the compiled core (streaming.native) calls it as a C function; the
contracts re-export it as `streaming.contracts.digest`."""

from __future__ import annotations

from hashlib import blake2b
from typing import Final

# A hasher at its initial state, copied for every digest: a copy is a copy of the state, where
# the constructor parses its keyword arguments and sets up the parameter block each time.
_INITIAL: Final = blake2b(digest_size=16)


def digest(raw: bytes) -> str:
    """blake2b-128 of `raw`, as 32 hex digits."""
    h = _INITIAL.copy()
    h.update(raw)
    return h.hexdigest()
