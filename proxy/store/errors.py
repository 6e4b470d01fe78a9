"""The store's errors, and the one place where database errors become them.

The tree is drawn in the package's docstring (`proxy.store`). `translated` wraps every piece of
database work in the store: a SQLAlchemy error (or a driver's encoding or range error while
writing) leaves it as the most specific `StoreError`, chained to the original. Nothing else in
mirrorgate catches SQLAlchemy's errors. Work done on the driver's own cursor (the exchange rows'
insert) runs inside `driver_errors`, which gives the driver's errors SQLAlchemy's form first, so
that `translated` classifies them as it does all the others.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection


class StoreError(Exception):
    """The store cannot do what was asked. Base of every error the store raises."""


class SchemaVersionError(StoreError):
    """The database's schema is not one this code can use: newer than the newest migration it
    knows, or (for a tool that never migrates) older than the version it reads."""


class StoreUnavailableError(StoreError):
    """Transient: the database could not be reached, was locked or timed out. The same call may
    succeed later."""


class RecordRejectedError(StoreError):
    """The database refused the data itself (bad data); retrying it will not help."""


class DuplicateRecordError(RecordRejectedError):
    """A constraint refused the row: in mirrorgate's schema, a unique key that a stored row
    already holds (another replica, or an earlier call, wrote it first)."""


_TRANSIENT = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)
"""Cannot connect, connection lost, locked, pool exhausted: worth trying again."""


@contextmanager
def translated(action: str, *, writing: bool = False) -> Iterator[None]:
    """Run a block of database work; let its database errors out as `StoreError`s.

    `action` names the work in the message (`"writing 12 records: OperationalError: database is
    locked"`). With `writing`, an error that is not transient is the data's fault
    (`RecordRejectedError`); otherwise it is a plain `StoreError` (a bug, or a database this
    code does not understand).
    """
    try:
        yield
    except sa_exc.SQLAlchemyError as exc:
        raise _most_specific(exc, action, writing=writing) from exc
    except (UnicodeError, OverflowError) as exc:  # raised by the driver, not as DBAPI errors
        if not writing:
            raise
        raise RecordRejectedError(f"cannot store record: {exc}") from exc


@contextmanager
def driver_errors(conn: Connection, statement: str) -> Iterator[None]:
    """Run `statement` on `conn`'s driver connection directly; let the driver's errors out as
    the SQLAlchemy error of the same DBAPI class (`OperationalError`, `IntegrityError`, …), as if
    SQLAlchemy had run it. A lost connection is invalidated, so the pool never hands it out again,
    and the error says so (`connection_invalidated`: transient)."""
    dbapi = conn.dialect.loaded_dbapi
    try:
        yield
    except dbapi.Error as exc:
        lost = conn.dialect.is_disconnect(exc, conn.connection.dbapi_connection, None)
        if lost:
            conn.invalidate(exc)
        raise sa_exc.DBAPIError.instance(
            statement, None, exc, dbapi.Error, connection_invalidated=lost
        ) from exc


def _most_specific(exc: sa_exc.SQLAlchemyError, action: str, *, writing: bool) -> StoreError:
    cause = getattr(exc, "orig", None) or exc
    first_line = next(iter(str(cause).strip().splitlines()), "")
    message = f"{action}: {type(cause).__name__}: {first_line}"
    if isinstance(exc, _TRANSIENT) or (
        isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated
    ):
        return StoreUnavailableError(message)
    if isinstance(exc, sa_exc.IntegrityError):
        return DuplicateRecordError(message)
    if writing:
        return RecordRejectedError(message)
    return StoreError(message)
