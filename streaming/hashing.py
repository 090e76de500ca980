"""The project's content hash: blake2b-128 as hex (payload hashes, pair IDs, fact hashes).

A module of its own so that the compiled core (streaming.native) calls it as a C function; the
contracts re-export it as `streaming.contracts.digest`."""

from __future__ import annotations

from hashlib import blake2b


def digest(raw: bytes) -> str:
    """blake2b-128 of `raw`, as 32 hex digits."""
    return blake2b(raw, digest_size=16).hexdigest()
