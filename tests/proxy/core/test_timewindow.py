"""`--since` parsing, shared by replay and report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from proxy.core.timewindow import parse_since

NOW = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "ago"),
    [
        ("30m", timedelta(minutes=30)),
        ("6h", timedelta(hours=6)),
        ("7d", timedelta(days=7)),
        ("1.5h", timedelta(minutes=90)),
        (" 45s ", timedelta(seconds=45)),
        ("2w", timedelta(weeks=2)),
        ("0m", timedelta(0)),
    ],
)
def test_durations_count_back_from_now(text: str, ago: timedelta) -> None:
    assert parse_since(text, NOW) == NOW - ago


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2025-03-01T09:30:00Z", datetime(2025, 3, 1, 9, 30, tzinfo=UTC)),
        ("2025-03-01", datetime(2025, 3, 1, tzinfo=UTC)),  # no offset: UTC
        ("2025-03-01 11:30+02:00", datetime(2025, 3, 1, 9, 30, tzinfo=UTC)),
    ],
)
def test_iso_times_are_returned_in_utc(text: str, moment: datetime) -> None:
    parsed = parse_since(text, NOW)
    assert parsed == moment and parsed.tzinfo is UTC


@pytest.mark.parametrize("text", ["yesterday", "", "-5m", "5 minutes", "5y", "2025-13-01"])
def test_anything_else_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match=r"ISO-8601 time .* or a duration ago"):
        parse_since(text, NOW)


def test_a_duration_reaching_before_year_one_is_refused() -> None:
    with pytest.raises(ValueError, match="before year 1"):
        parse_since("99999999d", NOW)


def test_now_must_be_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_since("5m", NOW.replace(tzinfo=None))
    assert parse_since("1h", NOW.astimezone(timezone(timedelta(hours=5)))).tzinfo is UTC
