"""phantom_rule: an answer that still states an earlier rule version's value fails; tokens,
decimals, strings, reasoning and tool calls; no earlier version; compile errors."""

from __future__ import annotations

import re

import pytest

from analyzers.answer import Answer, ToolCall
from analyzers.checks import CheckConfigError, CheckLimits, compile_check
from analyzers.phantom import (
    VALUE_MAX_CHARS,
    PhantomRuleCheck,
    compile_parameter,
    rule_value,
    states_value,
)


def phantom(
    current: str | None = "150",
    earlier: tuple[tuple[str, str | None], ...] = (("v1", "100"),),
    version: str = "v2",
    **limits: object,
) -> PhantomRuleCheck:
    check = compile_check({"name": "phantom", "type": "phantom_rule"}, CheckLimits(**limits))  # type: ignore[arg-type]
    assert isinstance(check, PhantomRuleCheck)
    return check.bind(version, current, earlier)


@pytest.mark.parametrize(
    ("text", "stated"),
    [
        ("100", True),
        ("up to 100 kg", True),
        ('{"max_weight": 100}', True),
        ("The limit is 100.", True),
        ("(100)", True),
        ("1000", False),
        ("2100 kg", False),
        ("100.5 kg", False),
        ("2.100", False),
        ("1,100 kg", False),
        ("100,5", False),
        ("max_weight=100,", True),
        ("", False),
    ],
)
def test_a_number_is_stated_only_as_a_token_of_its_own(text: str, stated: bool) -> None:
    assert states_value(text, "100") is stated


def test_a_decimal_value_is_a_number_too() -> None:
    assert states_value("up to 1.5 kg", "1.5")
    assert not states_value("up to 1.55 kg", "1.5")
    assert not states_value("up to 21.5 kg", "1.5")


@pytest.mark.parametrize(
    ("text", "stated"),
    [
        ("Standard shipping", True),
        ("STANDARD", True),
        ("tier: standard.", True),
        ("nonstandard", False),
        ("standards", False),
        ("standard_tier", False),
    ],
)
def test_a_string_is_stated_case_insensitively_on_word_boundaries(text: str, stated: bool) -> None:
    assert states_value(text, "standard") is stated


def test_a_value_with_regex_characters_is_a_literal() -> None:
    assert states_value("use tier a+b now", "a+b")
    assert not states_value("use tier aab now", "a+b")


def test_an_answer_with_the_earlier_value_and_not_the_current_fails() -> None:
    result = phantom().run(Answer('{"max_weight": 100}'))
    assert result.result == "fail"
    assert (
        result.reason == "the answer states value '100' of version v1, not the current value '150'"
    )


def test_an_answer_with_the_current_value_passes_even_beside_the_earlier_one() -> None:
    check = phantom()
    assert check.run(Answer('{"max_weight": 150}')).result == "pass"
    both = check.run(Answer("It was 100 kg; it is now 150 kg."))
    assert (both.result, both.reason) == ("pass", "states the current value '150'")
    none = check.run(Answer("I cannot say."))
    assert (none.result, none.reason) == ("pass", "states no earlier version's value")
    assert check.run(Answer("1000 kg")).result == "pass"


def test_without_an_earlier_version_every_answer_passes() -> None:
    check = phantom(earlier=())
    assert check.run(Answer("100")).reason == "no earlier version"
    unbound = compile_check({"name": "p", "type": "phantom_rule"})
    assert unbound.run(Answer("100")).result == "pass"


def test_an_earlier_version_with_the_same_value_is_no_phantom() -> None:
    check = phantom(current="100", earlier=(("v1", "100"), ("v0", None)))
    result = check.run(Answer("100"))
    assert (result.result, result.reason) == ("pass", "no earlier version")


def test_the_reason_names_the_newest_version_that_carried_the_value() -> None:
    check = phantom(
        current="175", earlier=(("v1", "100"), ("v2", "150"), ("v3", "100")), version="v4"
    )
    assert check.earlier == (("v3", "100"), ("v2", "150"))
    assert "of version v3" in check.run(Answer("100 kg")).reason
    assert "value '150' of version v2" in check.run(Answer("150 kg")).reason


def test_the_reasoning_and_tool_calls_are_looked_at_too() -> None:
    check = phantom()
    thinking = check.run(Answer('{"max_weight": 150}', reasoning="I recall the limit is 100 kg."))
    assert thinking.result == "fail" and thinking.reason.startswith("the reasoning states")
    tool = check.run(Answer("", (ToolCall("ship", '{"max_weight": 100}'),)))
    assert tool.result == "fail" and tool.reason.startswith("the tool call ship states")
    agreeing = check.run(Answer('{"max_weight": 150}', reasoning="The policy says 150 kg."))
    assert agreeing.result == "pass"


def test_a_version_with_no_value_fails_an_answer_stating_an_earlier_one() -> None:
    result = phantom(current=None).run(Answer("100 kg"))
    assert result.result == "fail"
    assert result.reason.endswith("not the current version has none")


def test_an_unknown_current_value_is_an_error_not_a_pass() -> None:
    check = phantom().bind("v3", None, (("v1", "100"),), known=False)
    result = check.run(Answer("100"))
    assert (result.result, result.reason) == ("error", "the value of version v3 is not known yet")


def test_without_quoting_the_reason_names_versions_only() -> None:
    result = phantom(quote_values=False).run(Answer("100"))
    assert result.reason == "the answer states value of version v1, not the current value"


def test_the_reason_is_bounded() -> None:
    long = "x" * VALUE_MAX_CHARS
    check = phantom(current="y", earlier=(("v" * 500, long),))
    result = check.run(Answer(long))
    assert result.result == "fail" and len(result.reason) <= 200


def test_rule_value_reads_the_named_group_of_the_system_prompt() -> None:
    parameter = compile_parameter(r"max_weight\s*=\s*(?P<value>\d+)")
    assert rule_value(parameter, "Policy: max_weight = 150 kg") == "150"
    assert rule_value(parameter, "no rule here") is None
    wide = compile_parameter(r"tier: (?P<value>.*)")
    assert rule_value(wide, "tier: " + "z" * 500) == "z" * VALUE_MAX_CHARS
    assert rule_value(wide, "tier:    ") is None


@pytest.mark.parametrize(
    ("parameter", "message"),
    [
        (r"max_weight = (\d+)", "needs a named group 'value'"),
        (r"max_weight = (?P<value>\d+", "parameter"),
        (42, "parameter"),
        (r"(?P<value>\d*)", "matches the empty string"),
    ],
)
def test_a_bad_parameter_is_a_compile_error_on_its_field(parameter: object, message: str) -> None:
    with pytest.raises(CheckConfigError) as caught:
        compile_check({"name": "p", "type": "phantom_rule", "parameter": parameter})
    assert caught.value.field == "parameter"
    assert message in str(caught.value)


def test_a_field_of_another_type_is_refused() -> None:
    with pytest.raises(CheckConfigError) as caught:
        compile_check({"name": "p", "type": "phantom_rule", "pattern": "x"})
    assert caught.value.field == "pattern"


def test_the_own_parameter_is_kept_compiled() -> None:
    check = compile_check(
        {"name": "p", "type": "phantom_rule", "parameter": r"tier=(?P<value>\w+)"}
    )
    assert isinstance(check, PhantomRuleCheck) and isinstance(check.parameter, re.Pattern)
