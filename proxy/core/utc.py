"""Moments as aware UTC datetimes: the one conversion for times read back from a database, an API
answer or a user.

SQLite stores no time zone (a naive datetime comes back, and aggregates such as `min(started_at)`
come back as ISO text); PostgreSQL answers in the session's zone. mirrorgate writes UTC
everywhere, so a naive moment is taken to be UTC already.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


@overload
def as_utc(moment: datetime | str) -> datetime: ...
@overload
def as_utc(moment: None) -> None: ...
def as_utc(moment: datetime | str | None) -> datetime | None:
    """`moment` as an aware UTC datetime.

    A naive datetime is taken to be UTC; an aware one is converted to UTC; a string is read as
    ISO-8601 first (`ValueError` if it is not one); None (a NULL column) stays None.
    """
    if moment is None:
        return None
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
