"""A small JSONPath subset, compiled once and evaluated on parsed JSON.

Grammar (a subset of RFC 9535; whitespace is allowed inside brackets only)::

    path      = "$" segment*
    segment   = "." name | ".*" | "[" selector "]"
    name      = (letter | "_") (letter | digit | "_")*        e.g. .max_weight
    selector  = quoted | index | "*"
    quoted    = "'" ... "'" | '"' ... '"'                     e.g. ['max weight'], with \\' \\" \\\\
    index     = ["-"] digit+                                  e.g. [0], [-1] (from the end)

`$` is the whole document, `.key` and `['key']` an object member, `[i]` an array item and `*`
every member or item. No filters, slices, recursive descent or functions: a path using them is
refused at compile time, naming the character where it stops making sense.

`JSONPath.find` returns every value the path selects, in document order; a member or an index
that does not exist selects nothing (it is not an error).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from analyzers.errors import SpecError


@dataclass(frozen=True, slots=True)
class Wildcard:
    """`*`: every member of an object, every item of an array."""


Step = str | int | Wildcard
"""A member name, an array index, or a wildcard."""


@dataclass(frozen=True, slots=True)
class JSONPath:
    """A compiled path: `text` as written, `steps` to follow from the root."""

    text: str
    steps: tuple[Step, ...]

    def find(self, document: Any) -> list[Any]:
        """Every value the path selects in `document`, in document order."""
        current = [document]
        for step in self.steps:
            current = list(_follow(current, step))
            if not current:
                break
        return current

    def __str__(self) -> str:
        return self.text


def _follow(values: list[Any], step: Step) -> Iterator[Any]:
    for value in values:
        if isinstance(step, Wildcard):
            if isinstance(value, dict):
                yield from value.values()
            elif isinstance(value, list):
                yield from value
        elif isinstance(step, str):
            if isinstance(value, dict) and step in value:
                yield value[step]
        elif isinstance(value, list) and -len(value) <= step < len(value):
            yield value[step]


def compile_path(text: str, field: str = "path") -> JSONPath:
    """Compile `text`; raise `SpecError(field, …)` naming the offending character."""
    if not isinstance(text, str):
        raise SpecError(field, f"a JSONPath must be a string, not {type(text).__name__}")
    if not text.startswith("$"):
        raise SpecError(field, f"a JSONPath starts with '$' (got {text[:20]!r})")
    steps: list[Step] = []
    i = 1
    while i < len(text):
        char = text[i]
        if char == ".":
            if text.startswith("..", i):
                raise SpecError(field, f"recursive descent '..' is not supported (character {i})")
            if text.startswith(".*", i):
                steps.append(Wildcard())
                i += 2
                continue
            end = i + 1
            while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                end += 1
            name = text[i + 1 : end]
            if not name or name[0].isdigit():
                raise SpecError(
                    field, f"expected a member name after '.' at character {i} of {text!r}"
                )
            steps.append(name)
            i = end
        elif char == "[":
            step, i = _bracket(text, i + 1, field)
            steps.append(step)
        else:
            raise SpecError(field, f"unexpected {char!r} at character {i} of {text!r}")
    return JSONPath(text, tuple(steps))


def _bracket(text: str, i: int, field: str) -> tuple[Step, int]:
    """Parse a bracket selector starting after '['; return it and the index after ']'."""
    i = _skip_space(text, i)
    if i >= len(text):
        raise SpecError(field, f"unclosed '[' in {text!r}")
    char = text[i]
    step: Step
    if char in "'\"":
        chars: list[str] = []
        i += 1
        while i < len(text) and text[i] != char:
            if text[i] == "\\":
                if i + 1 >= len(text) or text[i + 1] not in "\\'\"":
                    raise SpecError(field, f"bad escape at character {i} of {text!r}")
                i += 1
            chars.append(text[i])
            i += 1
        if i >= len(text):
            raise SpecError(field, f"unclosed quote in {text!r}")
        step, i = "".join(chars), i + 1
    elif char == "*":
        step, i = Wildcard(), i + 1
    else:
        end = i + 1 if char == "-" else i
        while end < len(text) and text[end].isdigit() and text[end].isascii():
            end += 1
        digits = text[i:end]
        if digits in ("", "-"):
            raise SpecError(
                field,
                f"expected a quoted name, an index or '*' at character {i} of {text!r} "
                "(filters and slices are not supported)",
            )
        step, i = int(digits), end
    i = _skip_space(text, i)
    if i >= len(text) or text[i] != "]":
        raise SpecError(field, f"expected ']' at character {i} of {text!r}")
    return step, i + 1


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t":
        i += 1
    return i
