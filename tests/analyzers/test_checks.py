"""Rule checks: every type passing and failing, compile errors named by field, and answers that
are empty, huge, not JSON or not UTF-8 — never a crash, never a silent pass."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from typing import Any

import pytest

from analyzers.answer import Answer, ToolCall
from analyzers.checkbase import BaseCheck, CheckResult, Outcome
from analyzers.checks import (
    CHECK_TYPES,
    DEFAULT_REFUSAL_PHRASES,
    Check,
    CheckConfigError,
    CheckLimits,
    compile_check,
    run_checks,
)
from analyzers.errors import SpecError
from analyzers.jsonvalue import MAX_JSON_CHARS, parse_json

MB10 = 10 * 1024 * 1024

SHIP = {"type": "object", "properties": {"weight": {"type": "number"}}, "required": ["weight"]}


def run(
    spec: Mapping[str, Any], text: str = "", *calls: tuple[str, str], **limits: Any
) -> CheckResult:
    check = compile_check({"name": "c", **spec}, CheckLimits(**limits))
    return check.run(Answer(text, tuple(ToolCall(n, a) for n, a in calls)))


# --- the rule story -----------------------------------------------------------------------------


def test_max_weight_follows_the_rule_in_force() -> None:
    """v1 said max_weight = 100, v2 says 150: v2's check passes 150 and fails the old rule."""
    check = compile_check(
        {"name": "max-weight", "type": "json_path", "path": "$.max_weight", "equals": 150}
    )
    assert check.name == "max-weight"
    assert check.type == "json_path"
    passed = check.run(Answer('{"max_weight": 150}'))
    assert passed == CheckResult("max-weight", "pass", "$.max_weight is 150")
    failed = check.run(Answer('{"max_weight": 100}'))
    assert failed.result == "fail"
    assert failed.reason == "$.max_weight is 100, expected 150"


# --- every type, passing and failing ------------------------------------------------------------

CASES: list[tuple[dict[str, Any], Answer, Answer]] = [
    ({"type": "json"}, Answer('{"a": [1, 2]}'), Answer("{'a': 1}")),
    ({"type": "json_schema", "schema": SHIP},
     Answer('{"weight": 2.5}'), Answer('{"weight": "2.5"}')),
    ({"type": "json_path", "path": "$.status", "in": ["ok", "held"]},
     Answer('{"status": "held"}'), Answer('{"status": "lost"}')),
    ({"type": "json_path", "path": "$.items[*].kg", "min": 0, "max": 150},
     Answer('{"items": [{"kg": 0}, {"kg": 150}]}'), Answer('{"items": [{"kg": 1}, {"kg": 151}]}')),
    ({"type": "json_path", "path": "$['order id']", "regex": "^[A-Z]{2}-\\d+$"},
     Answer('{"order id": "GB-12"}'), Answer('{"order id": "gb12"}')),
    ({"type": "regex", "pattern": r"max_weight\s*=\s*150"},
     Answer("max_weight = 150"), Answer("max_weight = 100")),
    ({"type": "not_regex", "pattern": r"(?i)\bguarantee"},
     Answer("We will try."), Answer("We GUARANTEE delivery.")),
    ({"type": "contains", "value": "kg"}, Answer("150 kg"), Answer("150 KG")),
    ({"type": "not_contains", "value": "100"}, Answer("150"), Answer("max 100")),
    ({"type": "max_chars", "max": 5}, Answer("héllo"), Answer("hello!")),
    ({"type": "refusal"}, Answer("Your parcel may weigh 150 kg."),
     Answer("I\u2019m sorry, but I can\u2019t help with that.")),
    ({"type": "tool_call", "tool": "ship", "arguments_schema": SHIP},
     Answer("", (ToolCall("ship", '{"weight": 3}'),)),
     Answer("", (ToolCall("ship", '{"weight": "heavy"}'),))),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "good", "bad"), CASES, ids=[c[0]["type"] for c in CASES])
def test_each_type_passes_and_fails(spec: dict[str, Any], good: Answer, bad: Answer) -> None:
    check = compile_check({"name": "c", **spec})
    passed, failed = check.run(good), check.run(bad)
    assert (passed.result, failed.result) == ("pass", "fail"), (passed, failed)
    assert passed.reason
    assert failed.reason


def test_cases_cover_every_check_type() -> None:
    # phantom_rule judges only once bound to a version's values: tests/analyzers/test_phantom.py
    assert {spec["type"] for spec, _, _ in CASES} == set(CHECK_TYPES) - {"phantom_rule"}


def test_compiled_checks_satisfy_the_protocol() -> None:
    for spec, _, _ in CASES:
        assert isinstance(compile_check({"name": "c", **spec}), Check)


# --- json_path details --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "text", "result", "reason"),
    [
        ({"equals": 150}, '{"w": 150.0}', "pass", "$.w is 150.0"),
        ({"equals": 1}, '{"w": true}', "fail", "$.w is true, expected 1"),
        ({"equals": 150}, '{"w": "150"}', "fail", '$.w is "150", expected 150'),
        ({"equals": {"a": [1]}}, '{"w": {"a": [1.0]}}', "pass", "$.w is an object of 1 item"),
        ({"in": [None]}, '{"w": null}', "pass", "$.w is null"),
        ({"min": 10}, '{"w": 9.5}', "fail", "$.w is 9.5, less than the minimum 10"),
        ({"max": 150}, '{"w": "151"}', "fail", '$.w is "151", not a number'),
        ({"min": 0, "max": 1}, '{"w": false}', "fail", "$.w is false, not a number"),
        ({"regex": "^a"}, '{"w": 1}', "fail", "$.w is 1, not a string"),
        ({"equals": 1}, '{"x": 1}', "fail", "$.w selects nothing"),
        ({"equals": 1}, "[1]", "fail", "$.w selects nothing"),
    ],
)
def test_json_path_conditions(
    spec: dict[str, Any], text: str, result: Outcome, reason: str
) -> None:
    assert run({"type": "json_path", "path": "$.w", **spec}, text) == CheckResult(
        "c", result, reason
    )


def test_json_path_wildcards_need_every_value_to_pass() -> None:
    spec = {"type": "json_path", "path": "$.items[*]", "max": 150}
    assert run(spec, '{"items": [1, 2, 3]}').reason == "all 3 values at $.items[*] pass"
    failed = run(spec, '{"items": [1, 200, 3]}')
    assert failed.result == "fail"
    assert failed.reason == "$.items[*] (value 2 of 3) is 200, more than the maximum 150"
    assert run(spec, '{"items": []}').result == "fail"


def test_json_path_indexes_and_quoted_names() -> None:
    spec = {"type": "json_path", "path": "$.rows[-1]['a.b'][0]", "equals": "x"}
    assert run(spec, '{"rows": [{}, {"a.b": ["x"]}]}').result == "pass"
    assert run(spec, '{"rows": [{"a.b": ["x"]}, {}]}').result == "fail"


def test_all_given_conditions_must_hold() -> None:
    spec = {"type": "json_path", "path": "$.w", "min": 100, "in": [50, 150]}
    assert run(spec, '{"w": 150}').result == "pass"
    assert run(spec, '{"w": 50}').reason == "$.w is 50, less than the minimum 100"


# --- compile errors name the field --------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"type": "regex", "pattern": "(unclosed"}, "pattern"),
        ({"type": "not_regex", "pattern": "[z-a]"}, "pattern"),
        ({"type": "regex", "pattern": "(a+)+$"}, "pattern"),
        ({"type": "regex", "pattern": r"^(\w+\s?)*$"}, "pattern"),
        ({"type": "regex", "pattern": 5}, "pattern"),
        ({"type": "regex"}, "pattern"),
        ({"type": "json_path", "path": "$..w", "equals": 1}, "path"),
        ({"type": "json_path", "path": "w", "equals": 1}, "path"),
        ({"type": "json_path", "path": "$.w[?(@.a)]", "equals": 1}, "path"),
        ({"type": "json_path", "path": "$.w[0", "equals": 1}, "path"),
        ({"type": "json_path", "path": "$.w"}, "path"),
        ({"type": "json_path", "path": "$.w", "regex": "("}, "regex"),
        ({"type": "json_path", "path": "$.w", "in": 3}, "in"),
        ({"type": "json_path", "path": "$.w", "min": "1"}, "min"),
        ({"type": "json_path", "path": "$.w", "min": 2, "max": 1}, "min"),
        ({"type": "json_schema", "schema": {"type": "strin"}}, "schema.type"),
        ({"type": "json_schema", "schema": {"properties": {"w": {"minimum": "1"}}}},
         "schema.properties.w.minimum"),
        ({"type": "json_schema", "schema": {"required": "w"}}, "schema.required"),
        ({"type": "json_schema", "schema": {"$ref": "#/$defs/missing"}}, "schema"),
        ({"type": "json_schema", "schema": {"pattern": "("}}, "schema.pattern"),
        ({"type": "json_schema", "schema": [1]}, "schema"),
        ({"type": "tool_call", "tool": "ship", "arguments_schema": {"type": 3}},
         "arguments_schema.type"),
        ({"type": "tool_call"}, "tool"),
        ({"type": "contains", "value": ""}, "value"),
        ({"type": "max_chars", "max": -1}, "max"),
        ({"type": "max_chars", "max": True}, "max"),
        ({"type": "refusal", "phrases": "i can't"}, "phrases"),
        ({"type": "refusal", "phrases": ["i can't", 7]}, "phrases[1]"),
        ({"type": "json", "pattern": "x"}, "pattern"),
        ({"type": "regex", "pattern": "x", "value": "y"}, "value"),
        ({"type": "json", "flags": "i"}, "flags"),
        ({"type": "jsn"}, "type"),
        ({"type": "json", "name": ""}, "name"),
    ],
)  # fmt: skip
def test_config_that_cannot_compile_names_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(CheckConfigError) as caught:
        compile_check({"name": "c", **spec})
    assert caught.value.field == field
    assert caught.value.message
    assert isinstance(caught.value, ValueError)  # pydantic validators wrap it as a field error


def test_limits_must_be_positive() -> None:
    with pytest.raises(SpecError) as caught:
        CheckLimits(regex_max_chars=0)
    assert caught.value.field == "regex_max_chars"


def test_a_check_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(CheckConfigError):
        compile_check(["json"])  # type: ignore[arg-type]


def test_schema_references_that_need_the_network_are_refused_without_fetching(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("a check tried to fetch a schema")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    remote = {"properties": {"w": {"$ref": "https://example.invalid/w.json"}}}
    nested = {"$id": "https://example.invalid/root.json",
              "properties": {"w": {"$id": "w.json", "$ref": "other.json"}}}  # fmt: skip
    for schema in (remote, nested):
        with pytest.raises(CheckConfigError) as caught:
            compile_check({"name": "c", "type": "json_schema", "schema": schema})
        assert caught.value.field == "schema"
        assert "remote references are never fetched" in caught.value.message


def test_local_references_and_draft_selection_work() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"kg": {"type": "number", "maximum": 150}},
        "properties": {"w": {"$ref": "#/definitions/kg"}},
    }
    assert run({"type": "json_schema", "schema": schema}, '{"w": 150}').result == "pass"
    failed = run({"type": "json_schema", "schema": schema}, '{"w": 151}')
    assert (
        failed.reason == "does not match the schema: at $.w: 151 is greater than the maximum of 150"
    )


def test_pydantic_checkspec_dumps_compile_as_they_are() -> None:
    from proxy.config.specs import CheckSpec

    spec = CheckSpec.model_validate({"name": "max-weight", "type": "json_path",
                                     "path": "$.max_weight", "in": [150]})  # fmt: skip
    for dump in (spec.model_dump(), spec.model_dump(by_alias=True)):
        check = compile_check(dump)
        assert check.run(Answer('{"max_weight": 150}')).result == "pass"
        assert check.run(Answer('{"max_weight": 100}')).result == "fail"


# --- answers that are empty, huge, not JSON or not UTF-8 ----------------------------------------

EVERY_TYPE: list[dict[str, Any]] = [
    {"type": "json"},
    {"type": "json_schema", "schema": SHIP},
    {"type": "json_path", "path": "$.w", "max": 150},
    {"type": "regex", "pattern": "."},
    {"type": "not_regex", "pattern": "zzz"},
    {"type": "contains", "value": "a"},
    {"type": "not_contains", "value": "zzz"},
    {"type": "max_chars", "max": 100},
    {"type": "refusal"},
    {"type": "tool_call", "tool": "ship"},
]


@pytest.mark.parametrize("spec", EVERY_TYPE, ids=[s["type"] for s in EVERY_TYPE])
@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty answer"),
        (" \n\t", "empty answer (only whitespace)"),
        ("ok \udc80 ok", "not valid UTF-8"),
        ("\ud800", "lone surrogate U+D800"),
    ],
    ids=["empty", "whitespace", "surrogateescape", "lone-high"],
)
def test_unusable_text_fails_with_a_reason(spec: dict[str, Any], text: str, why: str) -> None:
    result = run(spec, text)
    assert result.result == "fail"
    if spec["type"] == "tool_call":
        assert result.reason == "no tool calls; expected a call to 'ship'"
    else:
        assert why in result.reason
    result.reason.encode("utf-8")  # reasons are always storable


def test_text_checks_on_a_tool_call_only_answer_say_so() -> None:
    result = run({"type": "not_contains", "value": "100"}, "", ("ship", "{}"))
    assert result == CheckResult("c", "fail", "empty answer (1 tool call, no text)")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("The weight is 150.", "not JSON: Expecting value at line 1 column 1"),
        ('{"w": 1} trailing', "not JSON: Extra data at line 1 column 10"),
        ("\ufeff{}", "not JSON: Unexpected UTF-8 BOM"),
        ('{"w": NaN}', "not JSON: NaN is not valid JSON"),
        ('{"w": -Infinity}', "not JSON: -Infinity is not valid JSON"),
        ('{"w": "\\ud800"}', "not JSON text: escape of an unpaired surrogate at character 7"),
        ("[" * 100_000 + "]" * 100_000, "not JSON: nested too deeply to parse"),
        ("1" * 5_000, "not JSON: Exceeds the limit (4300 digits) for integer string conversion"),
        ("```json\n{}\n```", "not JSON: Expecting value at line 1 column 1"),
    ],
    ids=[
        "prose",
        "trailing",
        "bom",
        "nan",
        "infinity",
        "surrogate-escape",
        "deep",
        "bigint",
        "fence",
    ],
)
def test_answers_that_are_not_strict_json_fail_every_json_check(text: str, problem: str) -> None:
    for spec in EVERY_TYPE[:3]:
        result = run(spec, text)
        assert result.result == "fail"
        assert result.reason.startswith(problem), result.reason


def test_a_paired_surrogate_escape_is_fine() -> None:
    assert (
        run({"type": "json_path", "path": "$.w", "equals": "😀"}, '{"w": "\\ud83d\\ude00"}').result
        == "pass"
    )
    assert parse_json('"\\\\ud800"').ok  # an escaped backslash, then plain text


def test_ten_megabyte_answers_are_judged_without_crashing() -> None:
    items = ",".join(['{"kg": 1}'] * (MB10 // 10))
    document = '{"items": [' + items + '], "max_weight": 150}'
    assert len(document) > MB10
    answer = Answer(document)
    assert compile_check({"name": "c", "type": "json"}).run(answer).result == "pass"
    max_weight = {"name": "c", "type": "json_path", "path": "$.max_weight", "equals": 150}
    assert compile_check(max_weight).run(answer).result == "pass"
    too_heavy = {"name": "c", "type": "json_path", "path": "$.items[*].kg", "max": 0}
    assert compile_check(too_heavy).run(answer).reason.startswith("$.items[*].kg (value 1 of")
    assert run({"type": "max_chars", "max": 1000}, document).result == "fail"
    # Substring checks scan everything: a forbidden word at the very end is found.
    tail = "a" * MB10 + " max 100"
    assert run({"type": "not_contains", "value": "max 100"}, tail).result == "fail"
    assert run({"type": "contains", "value": "max 100"}, tail).result == "pass"


def test_regex_checks_say_truncated_instead_of_passing() -> None:
    huge = "a" * MB10 + " max_weight = 100"
    result = run({"type": "not_regex", "pattern": r"max_weight = 100"}, huge)
    assert result.result == "error"
    assert "truncated" in result.reason
    assert f"the answer has {len(huge)} characters" in result.reason
    assert run({"type": "regex", "pattern": "max_weight"}, huge).result == "error"
    # A match inside the head settles it either way.
    assert run({"type": "regex", "pattern": "^b"}, "b" + huge).result == "pass"
    assert run({"type": "regex", "pattern": "aaa"}, huge).result == "pass"
    assert run({"type": "not_regex", "pattern": "aaa"}, huge).result == "fail"


def test_a_match_touching_the_cut_is_undecided() -> None:
    # `\d+$` matches at the end of the head, but the answer goes on: the anchor lies.
    text = "1" * 50 + " and more"
    result = run({"type": "regex", "pattern": r"\d+$"}, text, regex_max_chars=20)
    assert result.result == "error"
    assert run({"type": "regex", "pattern": r"\d+$"}, text, regex_max_chars=100).result == "fail"


def test_quadratic_patterns_are_bounded_by_the_regex_limit() -> None:
    # `\s+$` is quadratic in Python's re; on 10 MB of spaces it would run for days. With the
    # limit it looks at 2,000 characters and cannot decide.
    hostile = " " * MB10 + "x"
    result = run({"type": "not_regex", "pattern": r"\s+$"}, hostile, regex_max_chars=2_000)
    assert result.result == "error"
    assert "truncated" in result.reason


def test_exponential_patterns_are_refused_and_atomic_ones_accepted() -> None:
    with pytest.raises(CheckConfigError, match="backtrack exponentially"):
        compile_check({"name": "c", "type": "regex", "pattern": "(a+)+$"})
    for safe in ("(?>a+)+$", "(a++)+$", r"(\d+,)*\d+", r"max_weight\s*=\s*150"):
        compile_check({"name": "c", "type": "regex", "pattern": safe})
    result = run({"type": "regex", "pattern": "(?>a+)+$"}, "a" * 30 + "b", regex_max_chars=2_000)
    assert result.result == "fail"


def test_answers_beyond_the_json_limit_are_an_error() -> None:
    assert parse_json("[1]", max_chars=2).too_large
    result = run({"type": "json"}, " " * MAX_JSON_CHARS + "[1]")
    assert result.result == "error"
    assert "too large" in result.reason


# --- refusal ------------------------------------------------------------------------------------


def test_refusal_phrases_are_folded_and_looked_for_near_the_start() -> None:
    assert "i can't help with" in DEFAULT_REFUSAL_PHRASES
    assert run({"type": "refusal"}, "I CANNOT   ASSIST WITH that request.").result == "fail"
    late = "Here is the policy. " * 100 + "I cannot help with refunds."
    assert run({"type": "refusal"}, late).result == "pass"
    assert run({"type": "refusal"}, late, refusal_window_chars=10_000).result == "fail"


def test_configured_phrases_replace_the_defaults() -> None:
    spec = {"type": "refusal", "phrases": ["Nicht möglich"]}
    assert run(spec, "Das ist NICHT MÖGLICH.").result == "fail"
    assert run(spec, "I can't help with that.").result == "pass"


# --- tool calls ---------------------------------------------------------------------------------


def test_tool_call_outcomes() -> None:
    spec = {"type": "tool_call", "tool": "ship", "arguments_schema": SHIP}
    ok, bad = ("ship", '{"weight": 1}'), ("ship", '{"weight": "x"}')
    assert run(spec, "text only").reason == "no tool calls; expected a call to 'ship'"
    assert run(spec, "", ("track", "{}")).reason == "'ship' not called (called: 'track')"
    assert run(spec, "", ok, ("track", "{}")).reason == "'ship' called 1 time with valid arguments"
    two = run(spec, "", ok, bad)
    assert two.result == "fail"
    assert two.reason.startswith("arguments of call 2 of 2 to 'ship' do not match")
    assert run(spec, "", ("ship", "{weight: 1}")).reason.startswith("arguments of 'ship': not JSON")
    assert run(spec, "", ("ship", '{"weight": "\udc80"}')).result == "fail"
    assert run({"type": "tool_call", "tool": "ping"}, "", ("ping", "")).result == "pass"
    assert run(spec, "", ("ship", "")).result == "fail"  # {} lacks the required weight


# --- privacy, crashes, running many --------------------------------------------------------------


def test_reasons_quote_no_answer_values_when_told_not_to() -> None:
    path = {"type": "json_path", "path": "$.email", "regex": "@example\\.com$"}
    assert "jane@corp" in run(path, '{"email": "jane@corp.test"}').reason
    quiet = run(path, '{"email": "jane@corp.test"}', quote_values=False)
    assert quiet.result == "fail"
    assert "jane" not in quiet.reason
    schema = {"type": "json_schema", "schema": {"properties": {"email": {"maxLength": 3}}}}
    assert "jane" not in run(schema, '{"email": "jane@corp.test"}', quote_values=False).reason


def test_a_crash_inside_a_check_is_an_error_never_a_pass() -> None:
    class Exploding(BaseCheck):
        name = "boom"
        type = "custom"

        def evaluate(self, answer: Answer) -> tuple[Outcome, str]:
            raise ZeroDivisionError("division by zero")

    assert Exploding().run(Answer("x")) == CheckResult(
        "boom", "error", "check crashed: ZeroDivisionError: division by zero"
    )
    # A malformed Answer (text of the wrong type) is an error too, not an exception.
    for spec in EVERY_TYPE:
        result = compile_check({"name": "c", **spec}).run(Answer(None))  # type: ignore[arg-type]
        assert result.result in ("error", "fail"), (spec, result)
        assert result.result != "pass"


def test_run_checks_runs_all_and_contains_checks_that_break_the_contract() -> None:
    class Rogue:
        name = "rogue"
        type = "custom"

        def run(self, answer: Answer) -> CheckResult:
            raise RuntimeError("ignored the contract")

    checks: list[Check] = [
        compile_check({"name": "json", "type": "json"}),
        Rogue(),
        compile_check({"name": "w", "type": "json_path", "path": "$.w", "equals": 150}),
    ]
    answer = Answer(json.dumps({"w": 150}))
    results = run_checks(checks, answer)
    assert [(r.name, r.result) for r in results] == [
        ("json", "pass"), ("rogue", "error"), ("w", "pass"),
    ]  # fmt: skip
    assert results[1].reason == "check crashed: RuntimeError: ignored the contract"
    assert answer.document is answer.document  # parsed once, shared by the JSON checks
