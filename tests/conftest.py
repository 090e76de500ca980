"""Shared fixtures. `store_url` runs each store test on SQLite and on PostgreSQL (a fresh
database per test). In CI a missing PostgreSQL or NATS is a failure; elsewhere a printed skip.

`make test` runs the suite in two worker processes (pytest-xdist, whole files per worker):
every test already works in its own temporary directory, PostgreSQL database and JetStream
stream, and each worker gets its own copy of the dbt project (below)."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import tempfile
import uuid
from pathlib import Path

import pytest

PG_ADMIN_DSN = os.environ.get("RISKSTREAM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ROOT = Path(__file__).resolve().parents[1]


def _own_dbt_project() -> None:
    """Under pytest-xdist, point this worker at its own copy of the dbt project. Each worker
    parses the manifest for its own warehouse path (tests/orchestration_helpers.py) and dbt
    writes `target/` in place: two workers sharing one project would rewrite the manifest
    while the other loads it, and each parse would undo the other's partial parse. The copy
    keeps the prepared manifest, so code that loads it at import finds one. Set before any
    test module imports the orchestration code, which reads the variable."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or "RISKSTREAM_DBT_PROJECT_DIR" in os.environ:
        return
    home = Path(tempfile.mkdtemp(prefix=f"riskstream-dbt-{worker}-"))
    atexit.register(shutil.rmtree, home, True)
    project = home / "dbt_project"
    shutil.copytree(ROOT / "dbt_project", project,
                    ignore=shutil.ignore_patterns("logs", ".user.yml"))
    os.environ["RISKSTREAM_DBT_PROJECT_DIR"] = str(project)


_own_dbt_project()

# SIGTERM and SIGINT as this test process started. Dagster, run in-process (a sensor's tick, a
# job), gives SIGTERM whatever SIGINT does and afterwards puts SIGINT's back: in a process
# started with SIGINT ignored (in the background by a shell that is not interactive), SIGTERM is
# then left ignored. Every process a later test starts would inherit that, and a shell script
# (`make dev`) cannot undo an ignored signal: SIGTERM would no longer stop it.
_STARTING_DISPOSITIONS = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}


@pytest.fixture(autouse=True)
def _signal_dispositions_restored():
    """After each test, SIGTERM and SIGINT as the process started (see above)."""
    yield
    for sig, disposition in _STARTING_DISPOSITIONS.items():
        if disposition is not None and signal.getsignal(sig) != disposition:
            signal.signal(sig, disposition)


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def hand_written(module: str):
    """A hand-written C module of the compiled core (streaming.native.HAND_WRITTEN), for the
    tests that hold it to its Python twin: they fail in CI without the build (`make setup`
    makes it) and skip, saying why, elsewhere."""
    import importlib

    from streaming import native

    decision = native.decide("auto")
    if decision != "compiled":
        if IN_CI:
            pytest.fail(f"`make setup` must build the compiled core; it is {decision}")
        pytest.skip(f"compiled core not built here ({decision}); `make setup` builds it")
    return importlib.import_module(module)


def need_service(name: str, host: str, port: int) -> None:
    if _port_open(host, port):
        return
    msg = f"{name} is not reachable on {host}:{port}"
    if IN_CI:
        pytest.fail(f"{msg} (required in CI)")
    print(f"SKIP: {msg}")
    pytest.skip(msg)


@pytest.fixture
def pg_url():
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    need_service("PostgreSQL", "127.0.0.1", 5432)
    import psycopg
    name = f"rs_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"
    yield url
    from sqlalchemy.pool import NullPool  # noqa: F401
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/ops.sqlite"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path}/ops.sqlite"


@pytest.fixture(scope="session")
def seed_dir(tmp_path_factory):
    from riskstream_tools.workloads.join_seed import generate
    out = tmp_path_factory.mktemp("seed")
    manifest = generate(7, str(out), 470)
    return str(out), manifest


@pytest.fixture(scope="session")
def seed_whole(seed_dir, tmp_path_factory):
    """The seed run once, uninterrupted to the end of the stream, into SQLite: the reference
    store (its URL) that recovered or altered runs of the seed are compared with. Read only."""
    from tests.joinutil import run_join
    url = f"sqlite:///{tmp_path_factory.mktemp('seed_whole')}/whole.sqlite"
    run_join(seed_dir[0], url, end_of_stream=True)
    return url


@pytest.fixture(scope="session")
def seed_whole_in_batches(seed_dir, tmp_path_factory):
    """The seed run once, uninterrupted, in batches of 50 with a checkpoint every 100 records
    and the stream left open: the reference for runs with those settings. Read only."""
    from tests.joinutil import run_join
    url = f"sqlite:///{tmp_path_factory.mktemp('seed_whole_batches')}/whole.sqlite"
    run_join(seed_dir[0], url, batch_size=50, checkpoint_every=100)
    return url


class FreshPostgres:
    """Creates throwaway PostgreSQL databases inside one test (e.g. one per hypothesis example)
    and drops them all at the end."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def new_url(self) -> str:
        import psycopg
        name = f"rs_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.names.append(name)
        return PG_ADMIN_DSN.rsplit("/", 1)[0] + f"/{name}"

    def drop_all(self) -> None:
        import psycopg
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            for name in self.names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_factory(request, tmp_path):
    """A callable returning a fresh, empty store URL of the parametrized kind on every call."""
    if request.param == "sqlite":
        counter = iter(range(1_000_000))
        yield lambda: f"sqlite:///{tmp_path}/ops-{next(counter)}.sqlite"
        return
    need_service("PostgreSQL", "127.0.0.1", 5432)
    pg = FreshPostgres()
    yield pg.new_url
    pg.drop_all()


_POSTGRES_FIXTURES = {"pg_url"}
_PARAMETRIZED_STORE_FIXTURES = ("store_url", "store_factory")


def pytest_collection_modifyitems(config, items):
    """Mark by what a test really touches, so `-m "not postgres"` or `-m "not slow"` select
    honestly: a test on the PostgreSQL half of a store fixture is a `postgres` test."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        params = getattr(getattr(item, "callspec", None), "params", {})
        on_pg = bool(names & _POSTGRES_FIXTURES) or any(
            params.get(f) == "postgresql" for f in _PARAMETRIZED_STORE_FIXTURES)
        if on_pg:
            item.add_marker(pytest.mark.postgres)
