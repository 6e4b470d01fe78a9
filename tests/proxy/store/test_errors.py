"""The store's error tree and its one translation of database errors."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import exc as sa_exc

from proxy.core.records import Arm, FeedbackRecord
from proxy.store.errors import (
    DuplicateRecordError,
    RecordRejectedError,
    StoreError,
    StoreUnavailableError,
    translated,
)
from proxy.store.exchanges import Store
from proxy.store.feedback import FeedbackStore

REFUSED = sa_exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))


def test_an_unreachable_database_is_unavailable_and_chained() -> None:
    with pytest.raises(StoreUnavailableError) as info, translated("reading rollout state"):
        raise REFUSED
    assert str(info.value) == ("reading rollout state: ConnectionRefusedError: connection refused")
    assert info.value.__cause__ is REFUSED


def test_a_lost_connection_is_unavailable_whatever_its_class() -> None:
    lost = sa_exc.DBAPIError("SELECT 1", {}, OSError("reset"), connection_invalidated=True)
    with pytest.raises(StoreUnavailableError), translated("reading"):
        raise lost


def test_a_taken_unique_key_is_a_duplicate_which_is_a_rejection() -> None:
    taken = sa_exc.IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed"))
    with pytest.raises(DuplicateRecordError) as info, translated("claiming", writing=True):
        raise taken
    assert isinstance(info.value, RecordRejectedError)
    assert not isinstance(info.value, StoreUnavailableError)


def test_a_bad_statement_is_a_plain_store_error_never_unavailable() -> None:
    bug = sa_exc.ProgrammingError("SELEKT", {}, Exception("syntax error at or near SELEKT"))
    with pytest.raises(StoreError) as read, translated("reading"):
        raise bug
    assert type(read.value) is StoreError
    with pytest.raises(RecordRejectedError) as written, translated("writing", writing=True):
        raise bug
    assert type(written.value) is RecordRejectedError


def test_driver_encoding_errors_are_rejections_only_while_writing() -> None:
    with pytest.raises(RecordRejectedError), translated("writing", writing=True):
        "\ud800".encode()
    with pytest.raises(UnicodeEncodeError), translated("reading"):
        "\ud800".encode()


def test_errors_that_are_not_the_databases_pass_through_untouched() -> None:
    with pytest.raises(KeyError), translated("reading"):
        raise KeyError("a bug in our own code")


def _feedback(kind: str = "score") -> FeedbackRecord:
    return FeedbackRecord(
        request_id="req-1", kind=kind, route="bot", target="prod", arm=Arm.PRIMARY,
        created_at=datetime(2025, 3, 1, tzinfo=UTC), score=4,
    )  # fmt: skip


def test_query_objects_raise_the_stores_errors_not_sqlalchemys(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    with Store(f"sqlite:///{path}", busy_timeout_ms=20) as store:
        store.migrate()
        feedback = FeedbackStore(store)
        assert feedback.add(_feedback()) is True
        assert feedback.add(_feedback()) is False  # the duplicate, reported as such
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            with pytest.raises(StoreUnavailableError, match=r"storing feedback.*locked"):
                feedback.add(_feedback("label"))
        finally:
            holder.close()
        assert feedback.add(_feedback("label")) is True


def test_a_store_of_an_unknown_dialect_is_a_store_error() -> None:
    # SQLAlchemy raises its own NoSuchModuleError while building the engine.
    with pytest.raises(StoreError, match="opening the store") as info:
        Store("postgresql+nonesuch://u@127.0.0.1/db")
    assert isinstance(info.value.__cause__, sa_exc.SQLAlchemyError)
