"""Signing keys the replicas share: made once by whichever replica asks first, kept in the store
(`signing_keys`, schema: migration 11), read by every other.

The feedback token key lives here when no `server.feedback_signing_key_env` names one: replicas
share the store, so a token one replica issued is checked by any other, across restarts. Whoever
can read the database can forge feedback tokens with it — set the variable to keep the key out of
the database.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa

from .errors import DuplicateRecordError, translated
from .exchanges import Store

_keys = sa.Table(
    "signing_keys",
    sa.MetaData(),
    sa.Column("name", sa.String(), primary_key=True),
    sa.Column("secret", sa.String(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)


class SigningKeyStore:
    """Reads and makes shared keys (blocking: call from a worker thread). Every method raises
    `StoreError`s only."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine

    def shared(self, name: str) -> bytes:
        """The key called `name`: the stored one, or a new random 32-byte key stored first. Two
        replicas asking at once get the same key (the second insert loses and reads the first)."""
        found = self._read(name)
        if found is not None:
            return found
        row = {"name": name, "secret": secrets.token_hex(32), "created_at": datetime.now(UTC)}
        try:
            with translated("storing a signing key", writing=True), self._engine.begin() as conn:
                conn.execute(sa.insert(_keys), [row])
        except DuplicateRecordError:
            pass  # another replica made it first: use theirs
        found = self._read(name)
        if found is None:  # pragma: no cover - written or refused as a duplicate just above
            raise RuntimeError(f"signing key {name!r} vanished after it was stored")
        return found

    def shared_many(self, names: Sequence[str]) -> dict[str, bytes]:
        """Name → key for every name of `names`, as `shared` gives each: the keys already made
        are read together, the missing ones made in one transaction (start-up asks for several;
        one read and one write instead of two reads and a write each)."""
        found = self._read_many(names)
        missing = [name for name in names if name not in found]
        if not missing:
            return found
        now = datetime.now(UTC)
        rows = [{"name": n, "secret": secrets.token_hex(32), "created_at": now} for n in missing]
        try:
            with translated("storing signing keys", writing=True), self._engine.begin() as conn:
                conn.execute(sa.insert(_keys), rows)
        except DuplicateRecordError:  # another replica made one of them first: one by one
            return {name: self.shared(name) for name in names}
        found = self._read_many(names)
        if len(found) != len(set(names)):  # pragma: no cover - written just above
            raise RuntimeError(f"signing keys {missing!r} vanished after they were stored")
        return found

    def _read_many(self, names: Sequence[str]) -> dict[str, bytes]:
        with translated("reading signing keys"), self._engine.connect() as conn:
            rows = conn.execute(
                sa.select(_keys.c.name, _keys.c.secret).where(_keys.c.name.in_(list(names)))
            ).all()
        return {str(name): bytes.fromhex(str(secret)) for name, secret in rows}

    def _read(self, name: str) -> bytes | None:
        with translated("reading a signing key"), self._engine.connect() as conn:
            secret = conn.execute(
                sa.select(_keys.c.secret).where(_keys.c.name == name)
            ).scalar_one_or_none()
        return bytes.fromhex(secret) if secret is not None else None
