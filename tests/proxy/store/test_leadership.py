"""The decider's advisory lock: one replica leads per schema; losing the session loses the lead;
an outage is "not leading", a bug is an error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from proxy.store.errors import StoreError, StoreUnavailableError
from proxy.store.exchanges import Store
from proxy.store.leadership import Leadership
from tests.conftest import PG_ADMIN_URL


def test_sqlite_always_leads(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'one.db'}") as store:
        leadership = Leadership(store)
        assert leadership.shared is False
        assert leadership.hold() is True and leadership.hold() is True


@pytest.fixture
def replicas(pg_schema: tuple[str, str]) -> Iterator[list[Store]]:
    """Two stores on one PostgreSQL schema, as two gateway processes would have."""
    url, _ = pg_schema
    stores = [Store(url), Store(url)]
    yield stores
    for store in stores:
        store.close()


@pytest.mark.postgres
def test_one_replica_leads_until_it_lets_go(replicas: list[Store]) -> None:
    first, second = (Leadership(store) for store in replicas)
    assert first.shared is True
    assert first.hold() is True
    assert second.hold() is False
    assert first.hold() is True  # keeping it: the held session still answers
    first.release()
    assert second.hold() is True
    assert first.hold() is False
    second.release()


@pytest.mark.postgres
def test_a_lost_session_is_a_lost_lead(replicas: list[Store]) -> None:
    first, second = (Leadership(store) for store in replicas)
    assert first.hold() is True
    assert first._conn is not None
    holder = first._conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
    first._conn.rollback()
    with replicas[1].engine.begin() as conn:  # the server ends the holder's session (only it:
        # other tests on the same server hold advisory locks of their own)
        conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": holder})
    assert first.hold() is False  # noticed at the next check, without raising
    assert second.hold() is True
    second.release()


def test_an_unreachable_database_is_not_leading_not_an_error() -> None:
    with Store(PG_ADMIN_URL.replace(":5432", ":1"), connect_timeout_s=1) as store:
        assert Leadership(store).hold() is False


@pytest.mark.postgres
def test_a_bug_in_taking_the_lock_is_raised_not_taken_for_an_outage(
    replicas: list[Store],
) -> None:
    broken = Leadership(replicas[0], lock_class=2**40)  # no such pg_try_advisory_lock(bigint, …)
    with pytest.raises(StoreError) as info:
        broken.hold()
    assert not isinstance(info.value, StoreUnavailableError)
    assert "pg_try_advisory_lock" in str(info.value)
