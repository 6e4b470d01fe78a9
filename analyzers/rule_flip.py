"""Rule flips: the pure half of a rule-flip probe (`proxy.mirror.probes` does the I/O).

A probe takes a live request whose system prompt states a rule's value (`max_weight = 100`),
asks for another value in its place, and sees whether the answer follows. Four steps, each a
function here:

- `flip_value`: the value to ask — one of the configured values that differs from the original,
  drawn deterministically from a key (the request id), or `original * scale + offset` for a
  numeric original (an integer original stays an integer when the result is whole);
- `rewrite_system_prompt`: a copy of the request body in which only the span of the `value`
  group of the first match of `parameter` in a system prompt text is replaced. Every other byte
  of that string, and every other field, is unchanged; only the containers on the way to the
  rewritten string are copied, so the caller's body is never mutated;
- `expect_for`: the `expect` checks' fields with `{value}` replaced by a value (the number itself
  where `equals` or an item of `in` is exactly `{value}` and the value is numeric,
  `re.escape(value)` in regexes, the text elsewhere);
- `answered_value`: the value an answer states, for the record.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from analyzers.jsonpath import compile_path
from analyzers.jsonvalue import parse_json

PLACEHOLDER = "{value}"
"""What stands for the value asked in an `expect` check's string fields."""
REGEX_FIELDS = frozenset({"pattern", "regex"})
"""Check fields that are regular expressions: the value is substituted escaped."""
JSON_FIELDS = frozenset({"equals", "in"})
"""Check fields compared with JSON values: exactly `{value}` there is the number, if it is one."""
TEXT_FIELDS = frozenset({"equals", "value", *REGEX_FIELDS})
"""Check fields in which `{value}` is substituted (and every item of `in`)."""
MAX_ANSWERED_CHARS = 200
"""`answered_value` is cut to this many characters."""

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")

Path = tuple[str | int, ...]


def numeric(text: str) -> int | float | None:
    """`text` as a number (an int when it is written as one), or None when it is not a number."""
    text = text.strip()
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return None


def value_text(value: int | float | str) -> str:
    """How a configured or generated value is written into the prompt."""
    if isinstance(value, bool):  # YAML `true` is no number of ours: write it as it reads
        return str(value).lower()
    return str(value)


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    x, y = numeric(a), numeric(b)
    return x is not None and y is not None and x == y


def flip_value(
    original: str,
    values: Sequence[int | float | str],
    scale: float | None,
    offset: float | None,
    key: str,
) -> str | None:
    """The value to ask instead of `original`, or None when no value differs from it.

    With `values`, one of those that differ from `original` (as text, or as numbers: `150` and
    `150.0` are the same), chosen by a hash of `key`; else `original * scale + offset` when
    `original` is a number."""
    if values:
        choices = [text for text in map(value_text, values) if not _same(text, original)]
        if not choices:
            return None
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        return choices[int.from_bytes(digest) % len(choices)]
    number = numeric(original)
    if number is None:
        return None
    generated = number * (1.0 if scale is None else scale) + (offset or 0.0)
    if isinstance(number, int) and float(generated).is_integer():
        generated = int(generated)  # 100 * 1.5 is 150, not 150.0
    text = value_text(generated)
    return None if _same(text, original) else text


# --- the request's system prompt ------------------------------------------------------------------


def _content_paths(content: Any, base: Path) -> Iterator[Path]:
    if isinstance(content, str):
        yield base
    elif isinstance(content, list):
        for i, part in enumerate(content):
            if isinstance(part, str):
                yield (*base, i)
            elif (
                isinstance(part, Mapping)
                and part.get("type", "text") in ("text", "input_text")
                and isinstance(part.get("text"), str)
            ):
                yield (*base, i, "text")


def _role_paths(messages: Any, key: str) -> Iterator[Path]:
    if isinstance(messages, list):
        for i, message in enumerate(messages):
            if isinstance(message, Mapping) and message.get("role") in ("system", "developer"):
                yield from _content_paths(message.get("content"), (key, i, "content"))


def system_text_paths(endpoint: str, body: Mapping[str, Any]) -> Iterator[Path]:
    """Where the system prompt's texts sit in a request body, in the order the rule version's
    system prompt reads them (`analyzers.rule_version.extract_system_prompt`): paths of keys and
    indexes, each to a string."""
    if endpoint == "chat.completions":
        yield from _role_paths(body.get("messages"), "messages")
    elif endpoint == "responses":
        yield from _content_paths(body.get("instructions"), ("instructions",))
        yield from _role_paths(body.get("input"), "input")
    elif endpoint == "messages":
        yield from _content_paths(body.get("system"), ("system",))


def _get(body: Any, path: Path) -> Any:
    for step in path:
        body = body[step]
    return body


def _replaced(container: Any, path: Path, text: str) -> Any:
    """A copy of `container` with the string at `path` replaced; only the dicts and lists on
    the way are copied, everything beside them is shared."""
    if not path:
        return text
    step, rest = path[0], path[1:]
    copy: Any = dict(container) if isinstance(container, Mapping) else list(container)
    copy[step] = _replaced(container[step], rest, text)
    return copy


def find_value(endpoint: str, body: Mapping[str, Any], pattern: re.Pattern[str]) -> str | None:
    """The `value` group of the first match of `pattern` in the body's system prompt texts."""
    for path in system_text_paths(endpoint, body):
        for match in pattern.finditer(_get(body, path)):
            if match.start("value") >= 0:
                return match.group("value")
    return None


def rewrite_system_prompt(
    endpoint: str,
    body: Mapping[str, Any],
    pattern: re.Pattern[str],
    flip: Any,
) -> tuple[dict[str, Any], str, str] | None:
    """Flip the rule's value: (new body, original value, asked value), or None when `pattern`
    matches no system prompt text of `body` (or the match has no `value`), or `flip` (called
    with the original value) returns None.

    Only the `value` group's span of the first match is replaced; `body` is not mutated."""
    for path in system_text_paths(endpoint, body):
        text = _get(body, path)
        for match in pattern.finditer(text):
            start, end = match.span("value")
            if start < 0:
                continue  # an optional group that took no part: not a value
            original = match.group("value")
            asked = flip(original)
            if asked is None:
                return None
            rewritten = text[:start] + asked + text[end:]
            return _replaced(body, path, rewritten), original, asked
    return None


# --- expect, for one value ------------------------------------------------------------------------


def _substitute(field: str, given: Any, value: str) -> Any:
    if not isinstance(given, str) or PLACEHOLDER not in given:
        return given
    if field in REGEX_FIELDS:
        return given.replace(PLACEHOLDER, re.escape(value))
    if given == PLACEHOLDER and field in JSON_FIELDS:
        number = numeric(value)
        if number is not None:
            return number  # `equals: "{value}"` compares 150 == 150, not "150"
    return given.replace(PLACEHOLDER, value)


def expect_for(check: Mapping[str, Any], value: str) -> dict[str, Any]:
    """One `expect` check's fields with `{value}` standing for `value` (see the module
    docstring); the result is what `analyzers.checks.compile_check` takes."""
    fields = dict(check)
    for field in TEXT_FIELDS & fields.keys():
        fields[field] = _substitute(field, fields[field], value)
    items = fields.get("in")
    if isinstance(items, list):
        fields["in"] = [_substitute("in", item, value) for item in items]
    return fields


def answered_value(
    expect: Sequence[Mapping[str, Any]], text: str, pattern: re.Pattern[str]
) -> str | None:
    """The value an answer states: at the path of the first json_path `expect` check when there
    is one (None when the answer is no JSON or has nothing there), else the `value` group of
    `pattern` found in the answer text. Cut to `MAX_ANSWERED_CHARS`."""
    path = next((c.get("path") for c in expect if c.get("type") == "json_path"), None)
    if isinstance(path, str):
        document = parse_json(text)
        found = compile_path(path).find(document.value) if document.ok else []
        if not found:
            return None
        value = found[0]
        shown = value if isinstance(value, str) else _json_text(value)
        return shown[:MAX_ANSWERED_CHARS]
    match = pattern.search(text)
    if match is None or match.group("value") is None:
        return None
    return match.group("value")[:MAX_ANSWERED_CHARS]


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
