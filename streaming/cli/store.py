"""`riskstream store upgrade` and `store revision`: the operational store's schema version."""

from __future__ import annotations

import click

from ..store.ops import Store
from ..store.versions import head_revision, store_revision
from .common import store_option


@click.group()
def store() -> None:
    """The operational store's schema (Alembic revisions)."""


@store.command("upgrade")
@store_option
def store_upgrade(store_url):
    """Create an empty store or migrate an older one to this release's revision."""
    st = Store(store_url, schema="upgrade")
    try:
        with st.engine.connect() as conn:
            now = store_revision(conn)
    finally:
        st.dispose()
    click.echo(f"store upgrade: {st.engine.url.render_as_string(hide_password=True)} is at "
               f"revision {now} (head {head_revision()})")


@store.command("revision")
@store_option
def store_revision_cmd(store_url):
    """The store's schema revision and this release's head."""
    st = Store(store_url, schema="existing")
    try:
        with st.engine.connect() as conn:
            now = store_revision(conn)
    finally:
        st.dispose()
    click.echo(f"{now} (head {head_revision()})")

