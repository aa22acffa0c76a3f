"""``windowsmith migrate``: apply a PostgreSQL store's migrations as the role that owns its tables, grant the
application role rows only, and pin login roles to tenants (``docs/guides/tenants-security.md``)."""

from __future__ import annotations

import click

from ..errors import UsageError
from .helpers import clean_errors


@click.command()
@click.option("--store", required=True,
              help="The store URL the application connects with: postgresql://APP_ROLE@HOST/DB?schema=NAME.")
@click.option("--owner-url", required=True,
              help="The same database as the role that owns the tables (it applies the migrations and grants).")
@click.option("--pin", "pins", multiple=True, metavar="ROLE=TENANT",
              help="Pin the login ROLE to TENANT: its connections see only the tenants pinned to it (repeatable).")
@clean_errors
def migrate(store: str, owner_url: str, pins: tuple[str, ...]) -> None:
    """Apply a PostgreSQL store's migrations as the owner of its tables (--owner-url) and grant the role of
    --store only reading and writing rows, so the application role cannot switch row-level security off.
    A SQLite store migrates itself when it opens."""
    if not store.startswith(("postgresql://", "postgres://")):
        raise UsageError("migrate is for PostgreSQL stores (--store postgresql://...); a SQLite store migrates "
                         "itself when it opens")
    pairs = []
    for pin in pins:
        role, sep, tenant = pin.partition("=")
        if not sep or not role or not tenant:
            raise UsageError(f"--pin takes ROLE=TENANT, got {pin!r}")
        pairs.append((role, tenant))
    from ..store.postgres import PostgresStore

    with PostgresStore(store, owner_url=owner_url, create=True) as app:
        role = app.role
        applied = app.applied_migrations()
    if pairs:
        with PostgresStore(owner_url, schema=app.schema, create=False) as owner:
            for r, t in pairs:
                owner.pin_role(r, [t])
    click.echo(f"{len(applied)} migration(s) applied (the last {applied[-1]}); {role!r} may read and write rows"
               + "".join(f"; {r!r} pinned to {t!r}" for r, t in pairs))


COMMANDS: tuple[click.Command, ...] = (migrate,)
