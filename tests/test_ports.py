"""Ports for the servers tests and benchmarks start of their own: free, and below the kernel's
ephemeral range, so no outgoing connection is handed one while its server is down."""

from __future__ import annotations

import socket

import pytest

from riskstream_tools import ports


def test_the_port_is_free_and_below_the_ephemeral_range(tmp_path, monkeypatch):
    low = ports.ephemeral_low()
    for _ in range(20):
        port = ports.free_port()
        assert ports.LOWEST_PORT <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # nothing holds it
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("12000\t60999\n")
    monkeypatch.setattr(ports, "PORT_RANGE_FILE", str(ranges))
    assert ports.ephemeral_low() == 12_000
    assert {ports.free_port() for _ in range(50)} <= set(range(10_000, 12_000))
    monkeypatch.setattr(ports, "PORT_RANGE_FILE", str(tmp_path / "missing"))
    assert ports.ephemeral_low() == 32_768


def test_a_held_port_is_never_returned(monkeypatch):
    """With the range narrowed to one port and that port held, there is no free port: a clear
    error, not the held one."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        monkeypatch.setattr(ports, "LOWEST_PORT", taken)
        monkeypatch.setattr(ports, "ephemeral_low", lambda: taken + 1)
        with pytest.raises(RuntimeError, match=f"no free port on 127.0.0.1 between {taken} "
                                               f"and {taken + 1}"):
            ports.free_port()
