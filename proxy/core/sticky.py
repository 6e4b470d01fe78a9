"""The sticky key: what keeps one user's requests together, for canary routing and shadow sampling.

A route's canary names it (`sticky: header:<name>`, `body:<field.path>` or `none`). The same key
decides both whether a request goes to the canary and whether it is shadowed, so a user is never
canaried under one key and shadowed under another.

- `header:<name>`: the first header of that name with a non-empty value, as sent (latin-1);
- `body:<field.path>`: the field of the JSON body reached by the dotted path, when it is a
  non-empty string or an integer (`42` → `"42"`). A boolean is no user id: `true` would put
  every user who sends it under one key, so it counts as no key at all;
- `none`, or the request lacks the key: None (callers then key on the request id).

The unit recorded with each exchange (`sticky_unit`) is never the key itself: a keyed hash of it,
made as experiment units are (`proxy.core.experiment`), keyed with the gateway's shared secret and
salted with the route's name, so every replica records the same unit for the same user of a route,
and the unit cannot be turned back into the id without the secret.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

from .experiment import unit_id

_UNIT_SALT = "sticky\0"
"""Prefixed to the route's name as the hash's salt: no experiment id (a UUID) starts with it, so a
sticky unit never equals an experiment unit of the same key."""


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


def sticky_unit(secret: bytes, route: str, key: str) -> str:
    """The recorded unit of sticky key `key` on `route`: 24 hex digits of an HMAC-SHA256 keyed
    with `secret` (the same on every replica), salted with the route's name: the digest
    `proxy.core.experiment.unit_digest(secret, "sticky\\0" + route, key)` makes, from a keyed
    state made once per route and copied (a third of the cost of keying anew per request)."""
    keyed = _keyed(secret, route).copy()
    keyed.update(key.encode("utf-8", "surrogatepass"))
    return unit_id(keyed.digest())


@functools.lru_cache(maxsize=1024)
def _keyed(secret: bytes, route: str) -> hmac.HMAC:
    """The HMAC keyed with `secret` that has read the salt of `route` (and its separator)."""
    return hmac.new(secret, (_UNIT_SALT + route).encode() + b"\0", hashlib.sha256)
