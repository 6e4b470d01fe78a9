"""The one sticky key, as canary routing and shadow sampling both read it."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core import sticky_key, sticky_unit
from proxy.core.experiment import unit_digest, unit_id

HEADERS = [(b"x-user-id", b"alice"), (b"x-empty", b""), (b"x-empty", b"late"), (b"x-id", b"\xe9")]


@pytest.mark.parametrize(
    ("sticky", "payload", "expected"),
    [
        ("header:x-user-id", {}, "alice"),
        ("header:X-User-Id", {}, "alice"),  # the config's name in any case
        ("header:x-empty", {}, "late"),  # an empty value is no key; a later one is
        ("header:x-id", {}, "\xe9"),  # as sent, latin-1
        ("header:x-missing", {"x-missing": "body is not a header"}, None),
        ("body:user", {"user": "u-7"}, "u-7"),
        ("body:user", {"user": 42}, "42"),
        ("body:metadata.user", {"metadata": {"user": "u-7"}}, "u-7"),
        ("body:metadata.user", {"metadata": "u-7"}, None),
        ("body:metadata.user", {"metadata": {"user": {"id": 1}}}, None),
        ("body:user", {"user": True}, None),  # a boolean is no user id
        ("body:user", {"user": False}, None),
        ("body:user", {"user": ""}, None),
        ("body:user", {"user": 1.5}, None),
        ("body:user", {}, None),
        ("none", {"user": "u-7"}, None),
    ],
)
def test_sticky_key(sticky: str, payload: dict[str, Any], expected: str | None) -> None:
    assert sticky_key(sticky, HEADERS, payload) == expected


def test_the_sticky_unit_is_the_experiments_keyed_hash_salted_by_the_route() -> None:
    unit = sticky_unit(b"secret", "bot", "user-7")
    assert unit == unit_id(unit_digest(b"secret", "sticky\0bot", "user-7"))
    assert sticky_unit(b"secret", "bot", "user-7") == unit  # the cached key state is copied
    assert len({unit, sticky_unit(b"secret", "other", "user-7"), sticky_unit(b"x", "bot", "user-7"),
                sticky_unit(b"secret", "bot", "user-8")}) == 4  # fmt: skip
    assert "user" not in unit and len(unit) == 24
