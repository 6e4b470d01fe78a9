"""The behaviour file: examples load, overrides merge, mistakes are named by key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.mock_upstream.behavior import (
    EXAMPLES_DIR,
    BehaviorError,
    FixedAnswer,
    RegexFromSystemAnswer,
    load_behavior,
    parse_behavior,
)


def problems(data: object) -> dict[str, str]:
    with pytest.raises(BehaviorError) as caught:
        parse_behavior(data)
    return {p.path: p.message for p in caught.value.problems}


@pytest.mark.parametrize("path", sorted(EXAMPLES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_example_loads(path: Path) -> None:
    assert load_behavior(path).default is not None


def test_examples_can_be_named_without_a_path() -> None:
    assert isinstance(load_behavior("stale-rule").default.answer, FixedAnswer)
    follower = load_behavior("rule-follower").default.answer
    assert isinstance(follower, RegexFromSystemAnswer) and follower.template


def test_models_inherit_the_default_key_by_key() -> None:
    spec = parse_behavior(
        {
            "default": {"ttft_ms": 50, "error": {"status": 503, "rate": 0.1}},
            "models": {"stale": {"answer": "old"}, "healthy": {"error": None}, "plain": None},
        }
    )
    stale = spec.for_model("stale")
    assert isinstance(stale.answer, FixedAnswer) and stale.answer.text == "old"
    assert stale.ttft_ms == 50 and stale.error is not None and stale.error.status == 503
    assert spec.for_model("healthy").error is None
    assert spec.for_model("plain") == spec.default
    assert spec.for_model("unknown-model") is spec.default


def test_an_empty_file_is_the_default_behaviour(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_behavior(empty) == parse_behavior({})


def test_problems_are_named_by_key_path() -> None:
    found = problems(
        {
            "record_request": True,
            "default": {"latency_ms": -5, "answer": {"type": "fixed"}},
            "models": {
                "x": {"error": {"status": 200}},
                "y": {"answer": {"type": "regex_from_system", "pattern": "(", "template": "t"}},
                "z": {"answer": {"type": "telepathy"}},
            },
        }
    )
    assert set(found) == {
        "record_request",
        "default.latency_ms",
        "default.answer.text",
        "models.x.error.status",
        "models.y.answer.pattern",
        "models.z.answer",
    }
    assert "-5" in found["default.latency_ms"]
    assert "invalid regular expression" in found["models.y.answer.pattern"]
    assert "200" in found["models.x.error.status"]


def test_a_bad_default_is_reported_once_not_per_model() -> None:
    found = problems({"default": {"ttft_ms": "soon"}, "models": {"a": {}, "b": {"usage": 3}}})
    assert set(found) == {"default.ttft_ms", "models.b.usage"}


def test_rates_outside_zero_to_one_are_refused() -> None:
    assert "models.m.reset.rate" in problems({"models": {"m": {"reset": {"rate": 1.5}}}})


def test_the_error_message_names_the_file_and_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("default:\n  usage: maybe\n  stream_chunk_tokens: 0\n")
    with pytest.raises(BehaviorError) as caught:
        load_behavior(bad)
    message = str(caught.value)
    assert str(bad) in message
    assert "default.usage" in message and "default.stream_chunk_tokens" in message


def test_yaml_syntax_and_missing_files_are_behaviour_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("default: [unclosed\n")
    with pytest.raises(BehaviorError, match="not valid YAML"):
        load_behavior(broken)
    with pytest.raises(BehaviorError, match="cannot read"):
        load_behavior(tmp_path / "absent.yaml")


def test_a_memorised_value_is_validated_by_key_path() -> None:
    answer = {"type": "regex_from_system", "pattern": r"max_weight = (\d+)", "template": "{1}"}
    found = problems(
        {
            "models": {
                "rate": {"answer": {**answer, "memorised": {"value": "100", "rate": 1.5}}},
                "group": {"answer": {**answer, "memorised": {"value": "100", "group": 2}}},
                "value": {"answer": {**answer, "memorised": {"rate": 0.5}}},
                "extra": {"answer": {**answer, "memorised": {"value": "1", "chance": 0.5}}},
            }
        }
    )
    assert set(found) == {
        "models.rate.answer.memorised.rate",
        "models.group.answer.memorised",
        "models.value.answer.memorised.value",
        "models.extra.answer.memorised.chance",
    }
    assert "1.5" in found["models.rate.answer.memorised.rate"]
    assert "group 2 is not in the pattern" in found["models.group.answer.memorised"]


def test_the_memoriser_example_stages_a_follower_and_two_memorisers() -> None:
    spec = load_behavior("memoriser")
    rates = {}
    for name in ("follower", "memoriser", "wavering"):
        answer = spec.for_model(name).answer
        assert isinstance(answer, RegexFromSystemAnswer) and answer.reasoning
        rates[name] = answer.memorised.rate if answer.memorised else 0.0
    assert rates == {"follower": 0.0, "memoriser": 0.95, "wavering": 0.3}
