"""JSON request bodies parsed and written again without changing a number.

orjson, the gateway's parser, reads an integer outside the 64-bit range (below -2**63, or 2**64 and
above) as a float, silently: a client's `"seed": 1180591620717411303424` would reach the model as
`1.1805916207174113e+21`. `loads_exact` parses with orjson (the fast path) and looks at the result:
only when it holds a float of integral value that large — which such an integer has become, and
which few bodies carry otherwise — is the body parsed again by the standard library, which keeps
integers exact. `dumps_exact` writes with orjson and falls back to the standard library for what
orjson cannot write (integers beyond 64 bits).

Both raise `ValueError` (`json.JSONDecodeError` is one) for a body that is not JSON or nests too
deeply, with a message for the caller.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_FLOAT_OF_BIG_INT = 2.0**63
"""orjson keeps every integer within [-2**63, 2**64) exact; a float of integral value this large
(or larger) may be one that it could not."""


def loads_exact(body: bytes) -> Any:
    """`body` parsed as JSON, every integer exactly as written."""
    value = orjson.loads(body)
    if _has_big_integral_float(value):
        try:
            return json.loads(body)
        except RecursionError:  # orjson accepted the depth (<= 1024), the stdlib may not
            raise ValueError("JSON nested too deeply") from None
    return value


def dumps_exact(value: Any) -> bytes:
    """`value` as compact JSON, integers beyond 64 bits included."""
    try:
        return orjson.dumps(value)
    except TypeError:
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None


def _has_big_integral_float(value: Any) -> bool:
    # An explicit stack: the document may nest 1024 deep, deeper than Python's recursion limit.
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float and abs(item) >= _FLOAT_OF_BIG_INT and item.is_integer():
            return True
    return False
