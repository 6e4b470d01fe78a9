"""A PostgreSQL database of a benchmark's own: made fresh for the run, dropped after it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import sqlalchemy as sa


@contextlib.contextmanager
def fresh_database(admin_url: str, name: str, *, keep: bool = False) -> Iterator[str]:
    """A new PostgreSQL database `name` (dropped first if a run left it behind, dropped after
    unless `keep`); yields its URL. `admin_url` is a database the role may connect to (it
    needs CREATEDB)."""
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        if not keep:
            with engine.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()
