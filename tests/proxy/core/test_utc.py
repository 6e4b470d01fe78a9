"""`as_utc`: the one conversion of stored, answered or typed moments to aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from proxy.core.utc import as_utc

MOMENT = datetime(2025, 3, 10, 12, 0, 5, tzinfo=UTC)


def test_a_naive_moment_is_taken_to_be_utc() -> None:
    # What SQLite gives back for a column written as UTC.
    assert as_utc(datetime(2025, 3, 10, 12, 0, 5)) == MOMENT
    assert as_utc(datetime(2025, 3, 10, 12, 0, 5)).tzinfo is UTC


def test_an_aware_moment_is_converted_to_utc() -> None:
    paris = MOMENT.astimezone(timezone(timedelta(hours=1)))
    converted = as_utc(paris)
    assert converted == MOMENT and converted.tzinfo is UTC
    assert converted.isoformat() == "2025-03-10T12:00:05+00:00"


@pytest.mark.parametrize(
    "text", ["2025-03-10 12:00:05", "2025-03-10T12:00:05+00:00", "2025-03-10T13:00:05+01:00"]
)
def test_iso_text_is_read_first(text: str) -> None:
    # SQLite answers `min(started_at)` as text.
    assert as_utc(text) == MOMENT
    assert as_utc(text).tzinfo is UTC


def test_null_stays_null_and_garbage_is_a_value_error() -> None:
    assert as_utc(None) is None
    with pytest.raises(ValueError):
        as_utc("yesterday")
