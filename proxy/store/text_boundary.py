"""Text the databases refuse, made storable at the store's one boundary: the engine.

PostgreSQL `text` cannot hold NUL (`\\u0000`), and neither backend's driver can encode a lone
surrogate (`\\ud800`, which the stdlib JSON parser lets through from `"\\ud800"`). Either would
make the write fail for ever: a feedback, an admin action or an Alertmanager alert carrying one
would be answered 503 at every retry, and a rule-change event would be lost. So every string
parameter of every statement, for every table, on both backends, has them replaced by U+FFFD
(the Unicode replacement character) just before it goes to the driver (`before_cursor_execute`),
and SQLite stores the same thing PostgreSQL does.
"""

from __future__ import annotations

import re
from typing import Any

_REFUSED = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(value: str) -> str:
    """`value` with NUL and lone surrogates replaced by U+FFFD (itself when it has none)."""
    if not _needs(value):
        return value
    if value.isascii():
        return value.replace("\x00", REPLACEMENT)
    return _REFUSED.sub(REPLACEMENT, value)


def _clean(params: Any) -> Any:
    if isinstance(params, dict):
        if not any(isinstance(v, str) and _needs(v) for v in params.values()):
            return params
        return {k: storable(v) if isinstance(v, str) else v for k, v in params.items()}
    if isinstance(params, tuple | list):
        if not any(isinstance(v, str) and _needs(v) for v in params):
            return params
        cleaned = [storable(v) if isinstance(v, str) else v for v in params]
        return tuple(cleaned) if isinstance(params, tuple) else cleaned
    return params


def _needs(value: str) -> bool:
    if "\x00" in value:
        return True
    if value.isascii():
        return False
    try:  # twice as fast as searching for surrogates: the encoder stops only at one
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def normalised_parameters(
    _conn: Any,
    _cursor: Any,
    statement: str,
    parameters: Any,
    _context: Any,
    executemany: bool,
) -> tuple[str, Any]:
    """SQLAlchemy's `before_cursor_execute` hook (installed with `retval=True`): the statement
    and its parameters, every string in them storable."""
    if executemany and isinstance(parameters, list | tuple):
        return statement, [_clean(p) for p in parameters]
    return statement, _clean(parameters)
