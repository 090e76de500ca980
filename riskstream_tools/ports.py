"""Ports for the servers that tests and benchmarks start of their own (a private PostgreSQL,
NATS server or Dagster webserver).

Each port is chosen below the kernel's ephemeral range. A port in that range can be handed to
any outgoing connection while nothing listens on it: in the moment between choosing it and the
server starting, and above all while a server is down for a restart (the worker's own
reconnect attempts to that very port included: a socket connected to itself). A server then
cannot listen there again. Below the range only an explicit bind can take a port."""

from __future__ import annotations

import random
import socket

PORT_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST_PORT = 10_000


def ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (32768 when unknown)."""
    try:
        with open(PORT_RANGE_FILE) as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A port on 127.0.0.1 that nothing holds, below the ephemeral range."""
    high = max(ephemeral_low(), LOWEST_PORT + 1)
    for _ in range(200):
        port = random.randrange(LOWEST_PORT, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 between {LOWEST_PORT} and {high}")
