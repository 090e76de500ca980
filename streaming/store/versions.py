"""Schema versions of the operational store, kept by Alembic (migrations in `migrations/`).

Opening a store reads its revision (one query) instead of creating tables:
  - an empty store is created by running the migrations to head (`create` and `upgrade`);
    a reader (`existing`) never creates one and says there is no store;
  - a store at an older revision is migrated by `upgrade` (`riskstream store upgrade` and the
    run commands) and refused otherwise, naming both revisions;
  - a store at a revision this code does not know (written by a newer release) is always
    refused, naming both revisions.
A store created before versioning (its tables but no version row) counts as revision 0001, the
first versioned schema.

Migrations run in one transaction that holds the store's migration lock: `BEGIN IMMEDIATE` on
SQLite, a transaction-scoped advisory lock on PostgreSQL, so two first starts on an empty store
create it once; the second reads the revision again under the lock and finds nothing to do."""

from __future__ import annotations

import logging
from functools import lru_cache

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine

from .bootstrap import LOCK_NAMESPACE, SCHEMA_LOCK

log = logging.getLogger(__name__)

VERSION_TABLE = "riskstream_store_version"
FIRST_REVISION = "0001"
MODES = ("create", "upgrade", "existing")
UPGRADE_HINT = "riskstream store upgrade"


class StoreVersionError(RuntimeError):
    """The store cannot be used by this code as it is: missing, older or newer."""

    exit_code = 9


def alembic_config():
    from alembic.config import Config
    cfg = Config()
    cfg.set_main_option("script_location", "streaming.store:migrations")
    return cfg


@lru_cache(maxsize=1)
def _script():
    from alembic.script import ScriptDirectory
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    head = _script().get_current_head()
    assert head is not None
    return head


def known_revisions() -> set[str]:
    return {s.revision for s in _script().walk_revisions()}


def store_revision(conn: Connection) -> str | None:
    """The store's revision; FIRST_REVISION for a store created before versioning; None for
    an empty one.

    The tables are looked for before the version is read. Outside a transaction each
    statement sees what was committed when it began (PostgreSQL's read committed), and a first
    start commits the tables and the version row together: read the other way round, a store
    created between the two reads had no version row yet and its tables already, and counted
    as created before versioning (one of six first starts at once was refused as "revision
    0001, older than this release's")."""
    from alembic.runtime.migration import MigrationContext
    has_facts = inspect(conn).has_table("facts")
    rev = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}
                                     ).get_current_revision()
    if rev is None and has_facts:
        return FIRST_REVISION
    return rev


def _describe(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def _refuse_unknown(engine: Engine, rev: str) -> None:
    if rev not in known_revisions():
        raise StoreVersionError(
            f"the store {_describe(engine)} is at schema revision {rev}, which this release "
            f"does not know (its newest is {head_revision()}): use the release that wrote it "
            f"or a newer one")


def prepare(engine: Engine, mode: str = "create") -> None:
    """Check (and where the mode allows, create or migrate) the store's schema; see the
    module docstring for what each mode does."""
    if mode not in MODES:
        raise ValueError(f"schema mode {mode!r} is not one of {MODES}")
    with engine.connect() as conn:
        rev = store_revision(conn)
    head = head_revision()
    if rev == head:
        return
    if rev is not None:
        _refuse_unknown(engine, rev)
    if rev is None and mode == "existing":
        raise StoreVersionError(f"there is no store at {_describe(engine)} (it is empty): run "
                                f"a pipeline or `{UPGRADE_HINT}` to create it")
    if rev is not None and mode != "upgrade":
        raise StoreVersionError(
            f"the store {_describe(engine)} is at schema revision {rev}, older than this "
            f"release's {head}: run `{UPGRADE_HINT}` (or a pipeline's run command)")
    upgrade(engine)


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Migrate the store to head under the migration lock; returns (from, to) revisions."""
    from alembic import command
    with engine.begin() as conn:  # SQLite: BEGIN IMMEDIATE, the one writer
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(CAST(:ns AS integer), "
                              "CAST(:id AS integer))"), {"ns": LOCK_NAMESPACE, "id": SCHEMA_LOCK})
        rev = store_revision(conn)
        head = head_revision()
        if rev == head:
            return rev, head
        if rev is not None:
            _refuse_unknown(engine, rev)
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        if rev == FIRST_REVISION and not inspect(conn).has_table(VERSION_TABLE):
            command.stamp(cfg, FIRST_REVISION)  # created before versioning
        if rev is None:
            log.info("creating the store schema at revision %s in %s", head, _describe(engine))
        else:
            log.info("migrating the store %s from revision %s to %s", _describe(engine), rev,
                     head)
        command.upgrade(cfg, "head")
    return rev, head
