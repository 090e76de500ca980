"""Credentials in locations are parsed at the last `@` and never shown: run settings, error
lines and the store connection itself."""

from __future__ import annotations


import pytest

from streaming.redaction import connect_url, redact_text, redact_url

NATS = "nats://user:p@ssSECRETX@127.0.0.1:4222?stream=S"
PG = "postgresql://user:p@ssSECRETX@127.0.0.1:5432/rs_db"


@pytest.mark.parametrize("url, shown", [
    (NATS, "nats://***@127.0.0.1:4222?stream=S"),
    (PG, "postgresql://***@127.0.0.1:5432/rs_db"),
    ("postgresql://u:a/b?c#d@h:5432/db", "postgresql://***@h:5432/db"),
    ("postgresql://h/db?user=u&password=SECRETX&x=1", "postgresql://h/db?user=u&password=***&x=1"),
    ("nats://127.0.0.1:4222?stream=S", "nats://127.0.0.1:4222?stream=S"),
    ("sqlite:////tmp/a@b/ops.sqlite", "sqlite:////tmp/a@b/ops.sqlite"),
    ("/data/log", "/data/log"),
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown
    assert "SECRETX" not in redact_url(url) and "ssSECRET" not in redact_url(url)


def test_redact_text_finds_every_location_in_a_message():
    msg = f"cannot open {PG!r}; source '{NATS}' and \"{PG}\"\n  File x, line 3: {NATS}"
    out = redact_text(msg)
    assert "SECRETX" not in out and "p@ss" not in out
    assert out.count("***@127.0.0.1") == 4


def test_connect_url_hands_the_driver_the_whole_password():
    from sqlalchemy.engine import make_url
    u = make_url(connect_url(PG.replace("postgresql", "postgresql+psycopg")))
    assert (u.username, u.password, u.host, u.port, u.database) == \
        ("user", "p@ssSECRETX", "127.0.0.1", 5432, "rs_db")
    assert connect_url("sqlite:////tmp/a@b/x.sqlite") == "sqlite:////tmp/a@b/x.sqlite"
