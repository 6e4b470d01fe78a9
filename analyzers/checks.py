"""Rule checks: `compile_check` turns one check's config into a `Check`, once, at start.

    check = compile_check({"name": "max-weight", "type": "json_path",
                           "path": "$.max_weight", "equals": 150})
    check.run(Answer('{"max_weight": 100}'))
    # CheckResult(name='max-weight', result='fail', reason='$.max_weight is 100, expected 150')

The config fields (docs/checks.md): `name` and `type` always; `pattern` (regex, not_regex);
`path` with one or more of `equals`, `in`, `min`, `max`, `regex` (json_path; all given must
hold); `schema` (json_schema); `value` (contains, not_contains); `max` (max_chars); `phrases`
(refusal, optional); `tool` and optional `arguments_schema` (tool_call); optional `parameter`
(phantom_rule: compiled unbound, see `analyzers.phantom`). A field whose value is
None counts as absent, so `CheckSpec.model_dump()` can be passed as it is (pydantic's attribute
names `in_` and `schema_` are accepted for `in` and `schema`); `equals: null` is therefore not
expressible — write `in: [null]`. A field that the type does not use is refused, as is an
unknown one: a typo must not silently drop a condition.

Anything that cannot compile raises `CheckConfigError(field, message)` with `field` the key
inside the check (`pattern`, `schema.properties.weight.type`, …) for the loader to prefix with
the check's own key path. What pass, fail and error mean: `analyzers.checkbase`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from analyzers.answer import Answer, ToolCall
from analyzers.checkbase import (
    DEFAULT_LIMITS,
    MAX_REASON_CHARS,
    Check,
    CheckLimits,
    CheckResult,
    Outcome,
    exception_text,
)
from analyzers.errors import CheckConfigError, SpecError
from analyzers.json_checks import (
    Bound,
    Condition,
    Equals,
    JSONCheck,
    JSONPathCheck,
    JSONSchemaCheck,
    Matches,
    OneOf,
    ToolCallCheck,
)
from analyzers.jsonpath import compile_path
from analyzers.patterns import compile_pattern
from analyzers.phantom import PhantomRuleCheck, compile_parameter
from analyzers.refusal import DEFAULT_REFUSAL_PHRASES, fold
from analyzers.schema import compile_schema
from analyzers.text_checks import (
    ContainsCheck,
    MaxCharsCheck,
    NotContainsCheck,
    NotRegexCheck,
    RefusalCheck,
    RegexCheck,
)

__all__ = [
    "CHECK_TYPES",
    "DEFAULT_LIMITS",
    "DEFAULT_REFUSAL_PHRASES",
    "Answer",
    "Check",
    "CheckConfigError",
    "CheckLimits",
    "CheckResult",
    "Outcome",
    "ToolCall",
    "compile_check",
    "run_checks",
]

_ALIASES = {"in_": "in", "schema_": "schema"}
_ALWAYS = ("name", "type")
_CONDITIONS = ("equals", "in", "min", "max", "regex")

Fields = dict[str, Any]
_Builder = Callable[[str, Fields, CheckLimits], Check]


def _json(name: str, fields: Fields, limits: CheckLimits) -> Check:
    return JSONCheck(name)


def _json_schema(name: str, fields: Fields, limits: CheckLimits) -> Check:
    validator = compile_schema(_required(fields, "schema"), "schema")
    return JSONSchemaCheck(name, validator, limits.quote_values)


def _json_path(name: str, fields: Fields, limits: CheckLimits) -> Check:
    path = compile_path(_required(fields, "path"), "path")
    conditions: list[Condition] = []
    if "equals" in fields:
        conditions.append(Equals(fields["equals"]))
    if "in" in fields:
        options = fields["in"]
        if not isinstance(options, list | tuple) or not options:
            raise CheckConfigError("in", "must be a non-empty list of values")
        conditions.append(OneOf(tuple(options)))
    low = _number(fields, "min")
    high = _number(fields, "max")
    if low is not None:
        conditions.append(Bound(low, upper=False))
    if high is not None:
        conditions.append(Bound(high, upper=True))
    if low is not None and high is not None and low > high:
        raise CheckConfigError("min", f"min {low:g} is greater than max {high:g}")
    if "regex" in fields:
        conditions.append(
            Matches(compile_pattern(fields["regex"], "regex"), limits.regex_max_chars)
        )
    if not conditions:
        raise CheckConfigError("path", "a json_path check needs one of equals, in, min, max, regex")
    return JSONPathCheck(name, path, tuple(conditions), limits.quote_values)


def _regex(name: str, fields: Fields, limits: CheckLimits) -> Check:
    return RegexCheck(
        name, compile_pattern(_required(fields, "pattern"), "pattern"), limits.regex_max_chars
    )


def _not_regex(name: str, fields: Fields, limits: CheckLimits) -> Check:
    pattern = compile_pattern(_required(fields, "pattern"), "pattern")
    return NotRegexCheck(name, pattern, limits.regex_max_chars)


def _contains(name: str, fields: Fields, limits: CheckLimits) -> Check:
    return ContainsCheck(name, _text(fields, "value"))


def _not_contains(name: str, fields: Fields, limits: CheckLimits) -> Check:
    return NotContainsCheck(name, _text(fields, "value"))


def _max_chars(name: str, fields: Fields, limits: CheckLimits) -> Check:
    value = _required(fields, "max")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CheckConfigError("max", f"must be a whole number of characters >= 0, not {value!r}")
    return MaxCharsCheck(name, value)


def _refusal(name: str, fields: Fields, limits: CheckLimits) -> Check:
    phrases = fields.get("phrases", DEFAULT_REFUSAL_PHRASES)
    if isinstance(phrases, str) or not isinstance(phrases, list | tuple) or not phrases:
        raise CheckConfigError("phrases", "must be a non-empty list of phrases")
    folded = []
    for index, phrase in enumerate(phrases):
        if not isinstance(phrase, str) or not fold(phrase):
            raise CheckConfigError(f"phrases[{index}]", "must be a non-empty string")
        folded.append(fold(phrase))
    return RefusalCheck(name, tuple(folded), limits.refusal_window_chars)


def _tool_call(name: str, fields: Fields, limits: CheckLimits) -> Check:
    tool = _text(fields, "tool")
    schema = fields.get("arguments_schema")
    validator = None if schema is None else compile_schema(schema, "arguments_schema")
    return ToolCallCheck(name, tool, validator, limits.quote_values)


def _phantom_rule(name: str, fields: Fields, limits: CheckLimits) -> Check:
    parameter = fields.get("parameter")
    pattern = None if parameter is None else compile_parameter(parameter)
    return PhantomRuleCheck(
        name, pattern, quote_values=limits.quote_values, quote_max_chars=limits.quote_max_chars
    )


_BUILDERS: dict[str, tuple[tuple[str, ...], _Builder]] = {
    "json": ((), _json),
    "json_schema": (("schema",), _json_schema),
    "json_path": (("path", *_CONDITIONS), _json_path),
    "regex": (("pattern",), _regex),
    "not_regex": (("pattern",), _not_regex),
    "contains": (("value",), _contains),
    "not_contains": (("value",), _not_contains),
    "max_chars": (("max",), _max_chars),
    "refusal": (("phrases",), _refusal),
    "tool_call": (("tool", "arguments_schema"), _tool_call),
    "phantom_rule": (("parameter",), _phantom_rule),
}

CHECK_TYPES: tuple[str, ...] = tuple(_BUILDERS)
"""Every check type `compile_check` knows (docs/checks.md has one section each)."""

_KNOWN = frozenset({*_ALWAYS, *(f for fields, _ in _BUILDERS.values() for f in fields)})


def compile_check(spec: Mapping[str, Any], limits: CheckLimits = DEFAULT_LIMITS) -> Check:
    """Compile one check's config (see the module docstring); raise `CheckConfigError`."""
    if not isinstance(spec, Mapping):
        raise CheckConfigError("", f"a check must be a mapping, not {type(spec).__name__}")
    fields: Fields = {}
    for given, value in spec.items():
        key = _ALIASES.get(given, given)
        if key not in _KNOWN:
            raise CheckConfigError(str(key), "unknown field")
        if value is not None:
            fields[key] = value
    name = fields.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CheckConfigError("name", "every check needs a non-empty name")
    kind = fields.get("type")
    if kind not in _BUILDERS:
        raise CheckConfigError(
            "type", f"unknown check type {kind!r}; one of: {', '.join(CHECK_TYPES)}"
        )
    allowed, build = _BUILDERS[kind]
    for key in fields:
        if key not in _ALWAYS and key not in allowed:
            uses = ", ".join(allowed) if allowed else "no other fields"
            raise CheckConfigError(key, f"does not apply to a {kind} check (it takes {uses})")
    try:
        return build(name, fields, limits)
    except CheckConfigError:
        raise
    except SpecError as exc:
        raise CheckConfigError(exc.field, exc.message) from exc


def run_checks(checks: Iterable[Check], answer: Answer) -> list[CheckResult]:
    """Run every check on one answer, in order (the JSON is parsed once for all of them).
    A check object that is not a `BaseCheck` and raises anyway is reported as `error`."""
    results = []
    for check in checks:
        try:
            results.append(check.run(answer))
        except Exception as exc:  # a third-party Check that broke the no-raise contract
            results.append(_crashed(check, exc))
    return results


def _crashed(check: Check, exc: Exception) -> CheckResult:
    try:
        name = str(check.name)
    except Exception:
        name = type(check).__name__
    return CheckResult(name, "error", f"check crashed: {exception_text(exc)}"[:MAX_REASON_CHARS])


def _required(fields: Fields, key: str) -> Any:
    if key not in fields:
        raise CheckConfigError(key, f"a {fields['type']} check needs {key!r}")
    return fields[key]


def _text(fields: Fields, key: str) -> str:
    value = _required(fields, key)
    if not isinstance(value, str) or not value:
        raise CheckConfigError(key, "must be a non-empty string")
    return value


def _number(fields: Fields, key: str) -> float | None:
    if key not in fields:
        return None
    value = fields[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CheckConfigError(key, f"must be a finite number, not {value!r}")
    return float(value)
