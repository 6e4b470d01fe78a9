"""JSON values as the checks see them: strict parsing, JSON equality and short descriptions.

- `parse_json` accepts RFC 8259 JSON only: `NaN`, `Infinity`, a leading byte-order mark and
  string escapes of unpaired surrogates (`"\\ud800"`, which no UTF-8 encoder can write back) are
  refused, and so is a document over `MAX_JSON_CHARS` or nested deeper than Python's recursion
  limit. It never raises.
- `json_equal` compares as JSON does: `150 == 150.0`, but `true != 1` and `"150" != 150`.
- `describe` renders a value for a check's reason, short and on one line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

MAX_JSON_CHARS = 16 * 1024 * 1024
"""Answers longer than this (16 Mi characters) are not parsed: the checks that need JSON give
`error` ("too large"), never `pass`."""
_SURROGATE_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?|\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


@dataclass(frozen=True, slots=True)
class JSONDocument:
    """The outcome of parsing an answer as JSON."""

    ok: bool
    """True when the text is one valid JSON document."""
    value: Any = None
    """The parsed value (dicts, lists, str, int, float, bool, None) when `ok`."""
    problem: str = ""
    """Why the text is not JSON, when not `ok`; never quotes the text itself."""
    too_large: bool = False
    """True when the text was not parsed because of `MAX_JSON_CHARS` (undecided, not wrong)."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str, max_chars: int = MAX_JSON_CHARS) -> JSONDocument:
    """Parse `text` as one strict JSON document; never raises."""
    if len(text) > max_chars:
        return JSONDocument(
            False,
            problem=f"too large to parse ({len(text)} chars; limit {max_chars})",
            too_large=True,
        )
    if not text.strip():
        return JSONDocument(False, problem="not JSON: the answer is empty")
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        return JSONDocument(
            False, problem=f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        )
    except RecursionError:
        return JSONDocument(False, problem="not JSON: nested too deeply to parse")
    except ValueError as exc:  # NaN/Infinity, integers beyond sys.get_int_max_str_digits()
        return JSONDocument(False, problem=f"not JSON: {_first_clause(str(exc))}")
    lone = _lone_surrogate_escape(text) if "\\u" in text else None
    if lone is not None:
        return JSONDocument(
            False, problem=f"not JSON text: escape of an unpaired surrogate at character {lone}"
        )
    return JSONDocument(True, value)


def _lone_surrogate_escape(text: str) -> int | None:
    """Where a `\\uD8xx`-`\\uDFxx` escape stands without its pair, outside an escaped backslash."""
    for match in _SURROGATE_ESCAPE.finditer(text):
        start = backslashes = match.start()
        while backslashes > 0 and text[backslashes - 1] == "\\":
            backslashes -= 1
        escaped = (start - backslashes) % 2 == 1  # `\\ud800` is a backslash, then text
        paired = len(match.group()) == 12  # a high and a low surrogate escape together
        if paired and escaped:
            return start + 6  # the low half stands alone
        if not paired and not escaped:
            return start
    return None


def _first_clause(message: str) -> str:
    return message.split(":")[0].split(";")[0][:120]


def is_number(value: Any) -> bool:
    """True for JSON numbers (int and float, never bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_equal(a: Any, b: Any, tolerance: float = 0.0) -> bool:
    """JSON equality: numbers compare by value (within `tolerance`, absolute), booleans only with
    booleans, objects key by key, arrays item by item."""
    if is_number(a) and is_number(b):
        if tolerance:
            return math.isclose(a, b, rel_tol=0.0, abs_tol=tolerance)
        return bool(a == b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k], tolerance) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(
            json_equal(x, y, tolerance) for x, y in zip(a, b, strict=True)
        )
    if type(a) is not type(b):
        return False
    return bool(a == b)


def json_type(value: Any) -> str:
    """The JSON type name of a parsed value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def describe(value: Any, *, quote: bool = True, max_chars: int = 40) -> str:
    """A one-line description of a value for a reason: the value itself (shortened to
    `max_chars`) for scalars when `quote`, else only its type (and size)."""
    kind = json_type(value)
    if kind in ("array", "object"):
        return f"an {kind} of {len(value)} item{'s' if len(value) != 1 else ''}"
    if not quote:
        return f"a string of {len(value)} chars" if kind == "string" else f"a {kind}"
    try:
        shown = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        shown = repr(value)
    return shown if len(shown) <= max_chars else shown[: max_chars - 1] + "…"
