"""`riskstream store upgrade` and `store revision`: the operational store's schema version."""

from __future__ import annotations

import click

from ..store.ops import Store
from ..store.versions import head_revision, store_revision
from .common import store_option


@click.group()
def store() -> None:
    """The operational store's schema (Alembic revisions)."""


def _open_and_read_revision(store_url: str, schema: str) -> tuple[str, str | None]:
    """Open the store in `schema` mode (Store's: "upgrade" creates or migrates it, "existing"
    refuses a missing or older one), read its revision and close it. Returns the store's URL
    with any password hidden, and the revision."""
    st = Store(store_url, schema=schema)
    try:
        with st.engine.connect() as conn:
            return st.engine.url.render_as_string(hide_password=True), store_revision(conn)
    finally:
        st.dispose()


@store.command("upgrade")
@store_option
def store_upgrade(store_url):
    """Create an empty store or migrate an older one to this release's revision."""
    where, now = _open_and_read_revision(store_url, "upgrade")
    click.echo(f"store upgrade: {where} is at revision {now} (head {head_revision()})")


@store.command("revision")
@store_option
def store_revision_cmd(store_url):
    """The store's schema revision and this release's head."""
    _, now = _open_and_read_revision(store_url, "existing")
    click.echo(f"{now} (head {head_revision()})")
