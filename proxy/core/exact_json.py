"""JSON request bodies parsed and written again without changing a number.

orjson, the gateway's parser, reads an integer outside the 64-bit range (below -2**63, or 2**64 and
above) as a float, silently: a client's `"seed": 1180591620717411303424` would reach the model as
`1.1805916207174113e+21`. `loads_exact` parses with orjson (the fast path) and then looks for such
a float — one of integral value at least 2**63, which few bodies carry otherwise — in a body of up
to 1 MiB only when it has a run of 19 digits or more (every such integer has), in a larger one by
walking its values. Only when one is there is the body parsed again, by the standard library, which
keeps integers exact. `dumps_exact` writes with orjson and falls back to the standard library for
what orjson cannot write (integers beyond 64 bits).

Both raise `ValueError` (`json.JSONDecodeError` is one) for a body that is not JSON or nests too
deeply, with a message for the caller.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_DIGITS_AS_ZERO = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_LONG_DIGIT_RUN = b"0" * 19
"""Every integer orjson cannot keep has 19 digits or more (-2**63 - 1 has 19, 2**64 has 20): a
small body without such a run of digits (most) is done after one C-speed scan, never walked."""
_SCAN_MAX_BYTES = 1024 * 1024
_FLOAT_OF_BIG_INT = 2.0**63
"""orjson keeps every integer within [-2**63, 2**64) exact; a float of integral value this large
(or larger) may be one that it could not."""


def loads_exact(body: bytes) -> Any:
    """`body` parsed as JSON, every integer exactly as written."""
    value = orjson.loads(body)
    # A body up to 1 MiB is scanned for a long run of digits (about a microsecond a kilobyte)
    # before its values are walked; a larger one is walked at once: large bodies are long strings
    # in a few values, which a walk passes in no time and a byte scan would not.
    scan_first = len(body) <= _SCAN_MAX_BYTES
    if scan_first and _LONG_DIGIT_RUN not in body.translate(_DIGITS_AS_ZERO):
        return value
    if type(value) in (dict, list) and _has_big_integral_float(value):
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
    # The types of a container's items are collected in C (`map(type, …)`), so that a list of
    # 100,000 token ids costs one set, not 100,000 Python steps.
    stack = [value]
    while stack:
        item = stack.pop()
        items = item.values() if type(item) is dict else item
        kinds = set(map(type, items))
        if float in kinds and any(type(x) is float and _big_integral(x) for x in items):
            return True
        if list in kinds or dict in kinds:
            stack.extend(x for x in items if type(x) is list or type(x) is dict)
    return False


def _big_integral(number: float) -> bool:
    return abs(number) >= _FLOAT_OF_BIG_INT and number.is_integer()
