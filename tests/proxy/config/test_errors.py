"""A bad configuration is one ConfigError naming every problem by its key path."""

from __future__ import annotations

import pytest

from proxy.config import ConfigError, parse_config
from proxy.config.errors import ConfigProblem


def test_the_message_lists_every_problem_at_its_path() -> None:
    error = ConfigError(
        [ConfigProblem("routes.bot.primary", "names no model"), ConfigProblem("", "empty")]
    )
    assert str(error).splitlines() == ["routes.bot.primary: names no model", "<root>: empty"]
    assert [p.path for p in error.problems] == ["routes.bot.primary", ""]


def test_the_loader_raises_one_error_with_all_problems_not_the_first() -> None:
    text = """
models: {prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m}}
routes:
  bot: {primary: nowhere}
  other: {primary: prod, fallback: missing}
"""
    with pytest.raises(ConfigError) as caught:
        parse_config(text, {})
    paths = {problem.path for problem in caught.value.problems}
    assert {"routes.bot.primary", "routes.other.fallback"} <= paths
