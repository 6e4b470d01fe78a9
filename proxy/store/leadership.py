"""Leadership: which replica decides rollouts, by a PostgreSQL session-level advisory lock.

The replica holding the lock decides; the lock lives as long as its connection, so when the holder
dies (even by SIGKILL) PostgreSQL drops it and another replica takes it at its next try. The
holder checks its connection before each round, so a replica cut off from the database stops
deciding. With SQLite (one process) the gateway always leads.
"""

from __future__ import annotations

import contextlib
import logging

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .errors import StoreError, StoreUnavailableError, translated
from .exchanges import Store
from .migrations import ADVISORY_LOCK_CLASS

log = logging.getLogger("mirrorgate.controller")

DECIDER_LOCK_CLASS = ADVISORY_LOCK_CLASS + 1
"""First key of the decider's advisory lock (the second is the schema's hash), so that replicas
sharing a database but not a schema elect one decider each."""
_TRY_LOCK = sa.text("SELECT pg_try_advisory_lock(:cls, hashtext(current_schema()))")
_UNLOCK = sa.text("SELECT pg_advisory_unlock(:cls, hashtext(current_schema()))")


class Leadership:
    """Whether this replica is the one that decides (blocking calls: use a worker thread)."""

    def __init__(self, store: Store, lock_class: int = DECIDER_LOCK_CLASS) -> None:
        self._engine = store.engine
        self._lock_class = lock_class
        self._conn: Connection | None = None
        self.shared = store.backend == "postgresql"
        """True when several replicas may share the database (so the lock decides)."""

    def hold(self) -> bool:
        """Take or keep the lead; False if another replica holds it or the store is unavailable.

        Raises any other `StoreError` (a bug, not an outage)."""
        if not self.shared:
            return True
        if self._conn is not None:
            try:
                with translated("checking the decider lock's connection"):
                    self._conn.execute(sa.text("SELECT 1"))
                    self._conn.rollback()
                return True
            except StoreError:  # whatever failed, this session can no longer vouch for the lock
                log.warning("lost the decider lock's connection: no longer deciding")
                self.release()
                return False
        try:
            with translated("connecting to take the decider lock"):
                conn = self._engine.connect()
        except StoreUnavailableError:
            return False
        try:
            with translated("taking the decider lock"):
                got = bool(conn.execute(_TRY_LOCK, {"cls": self._lock_class}).scalar())
                conn.rollback()  # a session-level advisory lock outlives the transaction
        except StoreUnavailableError:
            self._discard(conn)
            return False
        except StoreError:
            self._discard(conn)
            raise
        if not got:
            conn.close()
            return False
        self._conn = conn
        log.info("this replica now decides rollouts")
        return True

    def release(self) -> None:
        """Give the lead up. The lock is unlocked first, so another replica can take it at once:
        closing the session alone releases it only when the server has ended the backend, a
        moment later. Closing still follows, in case the unlock could not be sent."""
        if self._conn is not None:
            with contextlib.suppress(StoreError), translated("releasing the decider lock"):
                self._conn.execute(_UNLOCK, {"cls": self._lock_class})
                self._conn.rollback()
            self._discard(self._conn)
            self._conn = None

    @staticmethod
    def _discard(conn: Connection) -> None:
        # Never back to the pool: the session (and any lock it holds) must end.
        with contextlib.suppress(StoreError), translated("closing the decider lock's session"):
            conn.invalidate()
            conn.close()
