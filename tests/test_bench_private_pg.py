"""The private PostgreSQL that the restart tests and `follow-pg-restart` stop and start: a
server that does not start says why, from its own log, and restarts on its port."""

from __future__ import annotations

import socket

import pytest

from riskstream_tools.benchmarks.private_pg import PrivatePostgres
from tests.conftest import IN_CI


def _private_pg_or_skip() -> PrivatePostgres:
    """A private server, or (its binaries missing) a failure in CI and a printed skip
    elsewhere; PrivatePostgres itself says which binaries are missing."""
    try:
        return PrivatePostgres()
    except RuntimeError as exc:
        if IN_CI:
            pytest.fail(f"{exc} (required in CI)")
        print(f"SKIP: {exc}")
        pytest.skip(str(exc))


def test_a_server_that_cannot_listen_names_the_cause_from_its_log():
    """A listener already on the port: start fails with the server's own reason, not only
    pg_ctl's exit status; once the port is free the same server starts and restarts there."""
    pg = _private_pg_or_skip()
    try:
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", pg.port))
            squatter.listen()
            with pytest.raises(RuntimeError) as err:
                pg.start()
        message = str(err.value)
        assert f"did not start on port {pg.port}" in message
        assert "could not bind" in message or "already in use" in message, message
        pg.start()
        back = pg.restart_after(0.1)
        assert back > 0
        import psycopg
        with psycopg.connect(pg.url, connect_timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pg.destroy()
