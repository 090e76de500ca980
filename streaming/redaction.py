"""Credentials in locations (`scheme://user:password@host...`): one parser for connecting and
for showing.

A password may hold a raw `@` (`nats://user:p@ss@host`), so the user information ends at the
LAST `@` of the authority, not the first. Everything shown or stored (run settings, error
lines, tracebacks the CLI prints) goes through `redact_url` / `redact_text`, which replace the
whole user information with `***` and blank credential query parameters."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

MASK = "***"
# Query parameters that carry a secret in some drivers' URLs (libpq accepts `password=`).
SECRET_PARAMS = ("password", "pass", "passwd", "pwd", "secret", "token", "sslpassword")
_SECRET_PARAM_RE = re.compile(r"(?i)([?&](?:" + "|".join(SECRET_PARAMS) + r")=)[^&#]*")
# A location inside free text: scheme://, then anything up to whitespace or a quote.
_URL_IN_TEXT_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")


def split_location(url: str) -> tuple[str, str | None, str] | None:
    """`scheme://userinfo@rest` -> (scheme, userinfo or None, rest); None when not a URL.

    The user information runs to the last `@` of the location. A password may hold `@`, `/`,
    `?` or `#` unencoded; an `@` in a path or query (rare in store and broker locations) makes
    the split err towards hiding more, never less."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme:
        return None
    at = rest.rfind("@")
    if at < 0 or rest.startswith("/"):  # no authority (sqlite:///path): nothing to hide
        return scheme, None, rest
    return scheme, rest[:at], rest[at + 1:]


def redact_url(url: str) -> str:
    """The location with its user information and secret query parameters masked."""
    if not isinstance(url, str):
        return url
    parts = split_location(url)
    if parts is None:
        return url
    scheme, userinfo, rest = parts
    shown = f"{scheme}://{MASK}@{rest}" if userinfo is not None else f"{scheme}://{rest}"
    return _SECRET_PARAM_RE.sub(lambda m: m.group(1) + MASK, shown)


def redact_text(text: str) -> str:
    """Every location inside a message (an error, a traceback line) redacted."""
    if not text or "://" not in text:
        return text
    return _URL_IN_TEXT_RE.sub(lambda m: redact_url(m.group(0)), text)


def connect_url(url: str) -> str:
    """The URL with its user name and password percent-encoded, so a driver's URL parser (which
    stops the password at the first `@`) reads the credentials and host that were meant."""
    parts = split_location(url)
    if parts is None or parts[1] is None:
        return url
    scheme, userinfo, rest = parts
    assert userinfo is not None  # checked above
    user, colon, password = userinfo.partition(":")
    enc = quote(unquote(user), safe="")
    if colon:
        enc += ":" + quote(unquote(password), safe="")
    return f"{scheme}://{enc}@{rest}"
