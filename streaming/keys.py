"""Unambiguous composite keys. Business IDs are free text, so a key built by joining parts with a
separator must escape the separator inside each part: otherwise payment `a|b` with signal `c`
and payment `a` with signal `b|c` would share one key. IDs without the separator or a backslash
compose exactly as a plain join, so ordinary keys stay readable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from . import native

SEP: Final = "|"


def escape(part: object, sep: str = SEP) -> str:
    text = str(part)
    if "\\" in text or sep in text:
        text = text.replace("\\", "\\\\").replace(sep, "\\" + sep)
    return text


# `_texts.plain_key_part` where the compiled core is in use, else None: the text itself when
# escaping leaves it unchanged, else None.
_PLAIN_KEY_PART: Final[Callable[[str], str | None] | None] = native.hand_written(
    "streaming._texts", "plain_key_part")


def key_part(text: str) -> str:
    """`escape(text)` with the default separator, for a text: one C scan where the compiled
    core is in use, as nearly every text is returned as it is (the contracts' ID alphabet has
    neither the separator nor a backslash). `escape`'s conversion and two searches cost about
    380 instructions an entry of the join (docs/performance.md, fifty-sixth round)."""
    plain = _PLAIN_KEY_PART
    if plain is not None:
        got = plain(text)
        if got is not None:
            return got
    return escape(text)


def compose(*parts: object, sep: str = SEP) -> str:
    """Join parts with `sep`, escaping backslashes and `sep` inside each part."""
    return sep.join(escape(p, sep) for p in parts)


def split(key: str, sep: str = SEP) -> list[str]:
    """The inverse of `compose` (every part comes back as text)."""
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(key):
        c = key[i]
        if c == "\\" and i + 1 < len(key):
            cur.append(key[i + 1])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts
