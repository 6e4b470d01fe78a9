"""The sticky key: what keeps one user's requests together, for canary routing and shadow sampling.

A route's canary names it (`sticky: header:<name>`, `body:<field.path>` or `none`). The same key
decides both whether a request goes to the canary and whether it is shadowed, so a user is never
canaried under one key and shadowed under another.

- `header:<name>`: the first header of that name with a non-empty value, as sent (latin-1);
- `body:<field.path>`: the field of the JSON body reached by the dotted path, when it is a
  non-empty string or an integer (`42` → `"42"`). A boolean is no user id: `true` would put
  every user who sends it under one key, so it counts as no key at all;
- `none`, or the request lacks the key: None (callers then key on the request id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def sticky_key(
    sticky: str, headers: Iterable[tuple[bytes, bytes]], payload: Mapping[str, Any]
) -> str | None:
    """The value of the `sticky` setting in one request (see the module docstring), or None."""
    kind, _, name = sticky.partition(":")
    if kind == "header":
        wanted = name.lower().encode()
        for key, raw in headers:
            if key == wanted and raw:
                return raw.decode("latin-1")
        return None
    if kind == "body":
        value = body_field(payload, name)
        # bool is a subclass of int: refuse it explicitly.
        if isinstance(value, str | int) and not isinstance(value, bool) and value != "":
            return str(value)
    return None


def body_field(payload: Mapping[str, Any], path: str) -> Any:
    """The value at the dotted `path` of a JSON body, or None when some step is missing or is
    not an object."""
    value: Any = payload
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
