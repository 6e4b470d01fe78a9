"""Checks on an answer as JSON — `json`, `json_schema`, `json_path` — and on its tool calls —
`tool_call`.

The answer's text must be one strict JSON document (`analyzers.jsonvalue.parse_json`); text that
is empty, not UTF-8 or not JSON fails with the parser's reason, and text over `MAX_JSON_CHARS`
is an `error` (too large to decide). The JSON is parsed once per answer, whatever the number of
checks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from analyzers.answer import Answer, text_problem
from analyzers.checkbase import BaseCheck, Outcome
from analyzers.jsonpath import JSONPath
from analyzers.jsonvalue import JSONDocument, describe, is_number, json_equal, parse_json
from analyzers.schema import SchemaUndecidedError, Validator, first_violation
from analyzers.text_checks import search_head


def _document(answer: Answer) -> tuple[Outcome, str] | JSONDocument:
    """The answer's JSON, or the verdict when there is none."""
    problem = answer.text_problem
    if problem is not None:
        return "fail", problem
    document = answer.document
    if document.too_large:
        return "error", document.problem
    if not document.ok:
        return "fail", document.problem
    return document


def _config(value: Any) -> str:
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= 60 else shown[:59] + "…"


@dataclass(frozen=True, slots=True)
class JSONCheck(BaseCheck):
    """`json`: passes when the text is one strict JSON document."""

    name: str
    type: ClassVar[str] = "json"

    def evaluate(self, answer: Answer) -> tuple[Outcome, str]:
        document = _document(answer)
        if not isinstance(document, JSONDocument):
            return document
        return "pass", f"valid JSON ({describe(document.value, quote=False)})"


@dataclass(frozen=True, slots=True)
class JSONSchemaCheck(BaseCheck):
    """`json_schema`: passes when the text is JSON that matches `schema`."""

    name: str
    validator: Validator
    quote: bool
    type: ClassVar[str] = "json_schema"

    def evaluate(self, answer: Answer) -> tuple[Outcome, str]:
        document = _document(answer)
        if not isinstance(document, JSONDocument):
            return document
        try:
            violation = first_violation(self.validator, document.value, quote=self.quote)
        except SchemaUndecidedError as exc:
            return "error", str(exc)
        if violation is not None:
            return "fail", f"does not match the schema: {violation}"
        return "pass", "matches the schema"


class Condition(Protocol):
    """One test on a value selected by a `json_path` check."""

    def test(self, value: Any, quote: bool) -> tuple[Outcome, str]:
        """("pass", "") or the verdict and what is wrong with `value`."""
        ...


@dataclass(frozen=True, slots=True)
class Equals:
    """`equals`: JSON-equal to `expected` (150 equals 150.0; true does not equal 1)."""

    expected: Any

    def test(self, value: Any, quote: bool) -> tuple[Outcome, str]:
        if json_equal(value, self.expected):
            return "pass", ""
        return "fail", f"is {describe(value, quote=quote)}, expected {_config(self.expected)}"


@dataclass(frozen=True, slots=True)
class OneOf:
    """`in`: JSON-equal to one of `options`."""

    options: tuple[Any, ...]

    def test(self, value: Any, quote: bool) -> tuple[Outcome, str]:
        if any(json_equal(value, option) for option in self.options):
            return "pass", ""
        return (
            "fail",
            f"is {describe(value, quote=quote)}, expected one of {_config(list(self.options))}",
        )


@dataclass(frozen=True, slots=True)
class Bound:
    """`min` / `max`: a number (not a numeric string, not a boolean) within the bound, inclusive."""

    limit: float
    upper: bool

    def test(self, value: Any, quote: bool) -> tuple[Outcome, str]:
        if not is_number(value):
            return "fail", f"is {describe(value, quote=quote)}, not a number"
        if value > self.limit if self.upper else value < self.limit:
            word = "more than the maximum" if self.upper else "less than the minimum"
            return "fail", f"is {describe(value, quote=quote)}, {word} {self.limit:g}"
        return "pass", ""


@dataclass(frozen=True, slots=True)
class Matches:
    """`regex`: a string in which `pattern` is found (searched like the `regex` check)."""

    pattern: re.Pattern[str]
    max_chars: int

    def test(self, value: Any, quote: bool) -> tuple[Outcome, str]:
        if not isinstance(value, str):
            return "fail", f"is {describe(value, quote=quote)}, not a string"
        found = search_head(self.pattern, value, self.max_chars)
        if not found.decided:
            return "error", (
                f"undecided for /{self.pattern.pattern}/: truncated, the string has "
                f"{len(value)} characters and regex checks look at the first {self.max_chars}"
            )
        if found.start is None:
            return (
                "fail",
                f"is {describe(value, quote=quote)}, no match for /{self.pattern.pattern}/",
            )
        return "pass", ""


@dataclass(frozen=True, slots=True)
class JSONPathCheck(BaseCheck):
    """`json_path`: passes when `path` selects at least one value and every selected value
    passes every condition given (`equals`, `in`, `min`, `max`, `regex`)."""

    name: str
    path: JSONPath
    conditions: tuple[Condition, ...]
    quote: bool
    type: ClassVar[str] = "json_path"

    def evaluate(self, answer: Answer) -> tuple[Outcome, str]:
        document = _document(answer)
        if not isinstance(document, JSONDocument):
            return document
        values = self.path.find(document.value)
        if not values:
            return "fail", f"{self.path} selects nothing"
        for index, value in enumerate(values):
            for condition in self.conditions:
                outcome, why = condition.test(value, self.quote)
                if outcome != "pass":
                    where = (
                        str(self.path)
                        if len(values) == 1
                        else f"{self.path} (value {index + 1} of {len(values)})"
                    )
                    return outcome, f"{where} {why}"
        if len(values) == 1:
            return "pass", f"{self.path} is {describe(values[0], quote=self.quote)}"
        return "pass", f"all {len(values)} values at {self.path} pass"


@dataclass(frozen=True, slots=True)
class ToolCallCheck(BaseCheck):
    """`tool_call`: passes when the answer calls `tool` and every call to it has JSON arguments
    matching `arguments_schema` (when given; empty arguments count as `{}`)."""

    name: str
    tool: str
    validator: Validator | None
    quote: bool
    type: ClassVar[str] = "tool_call"

    def evaluate(self, answer: Answer) -> tuple[Outcome, str]:
        if not answer.tool_calls:
            return "fail", f"no tool calls; expected a call to {self.tool!r}"
        calls = [call for call in answer.tool_calls if call.name == self.tool]
        if not calls:
            called = ", ".join(repr(call.name[:40]) for call in answer.tool_calls[:5])
            return "fail", f"{self.tool!r} not called (called: {called})"
        for index, call in enumerate(calls, start=1):
            which = (
                f"call {index} of {len(calls)} to {self.tool!r}"
                if len(calls) > 1
                else repr(self.tool)
            )
            arguments = call.arguments if call.arguments.strip() else "{}"
            problem = text_problem(arguments)
            if problem is not None:
                return "fail", f"arguments of {which}: {problem.replace('answer', 'text')}"
            document = parse_json(arguments)
            if not document.ok:
                return (
                    "error" if document.too_large else "fail"
                ), f"arguments of {which}: {document.problem}"
            if self.validator is not None:
                try:
                    violation = first_violation(self.validator, document.value, quote=self.quote)
                except SchemaUndecidedError as exc:
                    return "error", str(exc)
                if violation is not None:
                    return (
                        "fail",
                        f"arguments of {which} do not match arguments_schema: {violation}",
                    )
        times = f"{len(calls)} time{'s' if len(calls) != 1 else ''}"
        valid = " with valid arguments" if self.validator is not None else ""
        return "pass", f"{self.tool!r} called {times}{valid}"
