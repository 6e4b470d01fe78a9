"""`--since` values: an ISO-8601 time, or a duration back from now (`30m`, `6h`, `7d`).

Shared by `mirrorgate replay` and `mirrorgate report`, so both read time windows the same way.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from .utc import as_utc

_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_since(text: str, now: datetime) -> datetime:
    """The moment `text` names, as an aware UTC datetime.

    `text` is either a duration ago — a number and one of `s`, `m`, `h`, `d`, `w` (seconds,
    minutes, hours, days, weeks), e.g. `30m`, `1.5h`, `7d` — counted back from `now`, or an ISO-8601
    time (`2025-01-31`, `2025-01-31T09:00:00Z`, `2025-01-31 09:00+02:00`); a time without an offset
    is taken to be UTC. Raises `ValueError` with a message that says what is accepted.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    match = _AGO.match(text)
    if match:
        amount, unit = float(match.group(1)), match.group(2)
        try:
            return (now - timedelta(seconds=amount * _UNIT_SECONDS[unit])).astimezone(UTC)
        except OverflowError:
            raise ValueError(f"'{text}' reaches back before year 1") from None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"'{text}' is not a time: give an ISO-8601 time (e.g. 2025-01-31T09:00:00Z) "
            "or a duration ago (e.g. 30m, 6h, 7d)"
        ) from None
    return as_utc(moment)
