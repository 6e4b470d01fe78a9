"""The pure half of rule-flip probes: the value asked, the rewritten body, expect for a value."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from analyzers import Answer
from analyzers.checks import compile_check, run_checks
from analyzers.rule_flip import (
    answered_value,
    expect_for,
    find_value,
    flip_value,
    numeric,
    rewrite_system_prompt,
)

PATTERN = re.compile(r"max_weight\s*=\s*(?P<value>\d+)")


def always(value: str) -> Any:
    return lambda original: value


@pytest.mark.parametrize(
    ("original", "values", "scale", "offset", "expected"),
    [
        ("100", [150], None, None, "150"),
        ("150", [150, 175], None, None, "175"),  # the original is never asked
        ("150", [150.0], None, None, None),  # the same number: nothing to ask
        ("150", [150], None, None, None),
        ("100", [], 1.5, None, "150"),  # an int stays an int
        ("100", [], 1.25, None, "125"),
        ("3", [], 1.5, None, "4.5"),
        ("100", [], None, 50, "150"),
        ("2.5", [], 2, None, "5.0"),  # a float stays a float
        ("100", [], 1.0, 0.0, None),  # generated equal to the original
        ("many", [], 1.5, None, None),  # not a number: nothing to generate
        ("strict", ["lenient", "strict"], None, None, "lenient"),
    ],
)
def test_flip_value(
    original: str, values: list[Any], scale: float | None, offset: float | None, expected: Any
) -> None:
    assert flip_value(original, values, scale, offset, "req-1") == expected


def test_flip_value_is_deterministic_per_key_and_uses_every_value() -> None:
    values = [110, 120, 130, 140]
    drawn = {k: flip_value("100", values, None, None, f"req-{k}") for k in range(200)}
    assert drawn == {k: flip_value("100", values, None, None, f"req-{k}") for k in range(200)}
    assert set(drawn.values()) == {"110", "120", "130", "140"}


def test_chat_rewrite_changes_only_the_value_span_of_the_first_match() -> None:
    body = {
        "model": "r",
        "messages": [
            {"role": "user", "content": "max_weight = 100 (user text is no rule)"},
            {"role": "system", "content": "Rules: max_weight =  100 kg; later max_weight = 100."},
            {"role": "developer", "content": [{"type": "text", "text": "max_weight = 100"}]},
        ],
        "temperature": 0,
    }
    before = copy.deepcopy(body)
    new, original, asked = rewrite_system_prompt(
        "chat.completions", body, PATTERN, always("150")
    ) or (None, None, None)
    assert (original, asked) == ("100", "150")
    assert body == before  # the client's body is untouched
    assert new is not None
    assert new["messages"][1]["content"] == "Rules: max_weight =  150 kg; later max_weight = 100."
    # Everything else is the same object: nothing beside the path was copied.
    assert new["messages"][0] is body["messages"][0]
    assert new["messages"][2] is body["messages"][2]
    assert {k: v for k, v in new.items() if k != "messages"} == {"model": "r", "temperature": 0}


def test_text_parts_responses_and_anthropic_system_prompts() -> None:
    chat = {"messages": [{"role": "system", "content": ["intro", {"text": "max_weight=100"}]}]}
    new, *_ = rewrite_system_prompt("chat.completions", chat, PATTERN, always("7")) or (None,)
    assert new is not None and new["messages"][0]["content"] == ["intro", {"text": "max_weight=7"}]

    responses = {
        "instructions": "be brief",
        "input": [
            {"role": "developer", "content": [{"type": "input_text", "text": "max_weight = 100"}]},
            {"role": "user", "content": "hi"},
        ],
    }
    new, *_ = rewrite_system_prompt("responses", responses, PATTERN, always("7")) or (None,)
    assert new is not None
    assert new["instructions"] == "be brief"
    assert new["input"][0]["content"][0] == {"type": "input_text", "text": "max_weight = 7"}
    assert new["input"][1] is responses["input"][1]

    anthropic = {"system": [{"type": "text", "text": "max_weight = 100"}], "messages": []}
    new, *_ = rewrite_system_prompt("messages", anthropic, PATTERN, always("7")) or (None,)
    assert new is not None and new["system"] == [{"type": "text", "text": "max_weight = 7"}]
    new, *_ = rewrite_system_prompt(
        "messages", {"system": "max_weight = 100"}, PATTERN, always("7")
    ) or (None,)
    assert new == {"system": "max_weight = 7"}


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "system", "content": "no rule here"}]},
        {"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {}}]}]},
        {"messages": [{"role": "system", "content": [{"type": "text", "text": 5}, 3, None]}]},
        {"messages": "not a list"},
        {"messages": [None, "x", {"role": "system"}]},
        {},
    ],
)
def test_bodies_without_a_value_are_not_rewritten(body: dict[str, Any]) -> None:
    assert rewrite_system_prompt("chat.completions", body, PATTERN, always("150")) is None
    assert find_value("chat.completions", body, PATTERN) is None


def test_an_optional_value_group_that_took_no_part_is_skipped() -> None:
    pattern = re.compile(r"limit(?: is (?P<value>\d+))?")
    body = {"system": "limit unknown; the limit is 40"}
    new, original, _ = rewrite_system_prompt("messages", body, pattern, always("50")) or (
        None,
        None,
        None,
    )
    assert original == "40" and new == {"system": "limit unknown; the limit is 50"}


def test_a_megabyte_system_prompt_is_rewritten_in_place() -> None:
    filler = "x" * 1_000_000
    body = {"system": f"{filler} max_weight = 100 {filler}"}
    new, *_ = rewrite_system_prompt("messages", body, PATTERN, always("150")) or (None,)
    assert new is not None and new["system"] == f"{filler} max_weight = 150 {filler}"


def test_expect_for_substitutes_numbers_strings_and_escaped_regexes() -> None:
    assert expect_for({"type": "json_path", "path": "$.w", "equals": "{value}"}, "150") == {
        "type": "json_path", "path": "$.w", "equals": 150,
    }  # fmt: skip
    assert expect_for({"equals": "{value} kg", "in": ["{value}", 3]}, "1.5")["in"] == [1.5, 3]
    assert expect_for({"equals": "{value} kg"}, "1.5")["equals"] == "1.5 kg"
    assert expect_for({"equals": "{value}"}, "strict")["equals"] == "strict"
    assert expect_for({"pattern": r"up to {value} ?kg"}, "1.5")["pattern"] == r"up to 1\.5 ?kg"
    assert expect_for({"value": "{value}"}, "150")["value"] == "150"  # contains takes text
    assert numeric(" 12 ") == 12 and numeric("1e3") == 1000.0 and numeric("12a") is None


@pytest.mark.parametrize(
    ("spec", "text", "passes_150", "passes_100"),
    [
        ({"type": "json_path", "path": "$.max_weight", "equals": "{value}"},
         '{"max_weight": 150}', True, False),
        ({"type": "json_path", "path": "$.max_weight", "equals": "{value}"},
         '{"max_weight": 100}', False, True),
        ({"type": "regex", "pattern": "up to {value} ?kg"}, "ship up to 150kg.", True, False),
        ({"type": "regex", "pattern": "up to {value} ?kg"}, "up to 100 kg", False, True),
        ({"type": "contains", "value": "{value} kg"}, "max 150 kg", True, False),
    ],
)  # fmt: skip
def test_expect_compiled_for_a_value_passes_the_answers_that_state_it(
    spec: dict[str, Any], text: str, passes_150: bool, passes_100: bool
) -> None:
    spec = {"name": "follows", **spec}
    for value, expected in (("150", passes_150), ("100", passes_100)):
        check = compile_check(expect_for(spec, value))
        (result,) = run_checks([check], Answer(text))
        assert (result.result == "pass") is expected, (value, result)


def test_answered_value_reads_the_json_path_else_the_parameter() -> None:
    json_expect = [{"type": "json_path", "path": "$.max_weight", "equals": "{value}"}]
    assert answered_value(json_expect, '{"max_weight": 150}', PATTERN) == "150"
    assert answered_value(json_expect, '{"max_weight": "x"}', PATTERN) == "x"
    assert answered_value(json_expect, "max_weight = 100", PATTERN) is None
    assert answered_value(json_expect, '{"other": 1}', PATTERN) is None
    text_expect = [{"type": "regex", "pattern": "max_weight = {value}"}]
    assert answered_value(text_expect, "so max_weight = 175 now", PATTERN) == "175"
    assert answered_value(text_expect, "nothing", PATTERN) is None
    long = '{"max_weight": "' + "y" * 500 + '"}'
    assert answered_value(json_expect, long, PATTERN) == "y" * 200
