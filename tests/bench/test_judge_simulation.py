"""bench/judge_simulation.py: whole rollouts with the controller's semantics end the way the
judge's statistics say they must, the sizing table is deterministic for a seed, and the docs'
table was produced by the script from today's defaults."""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- sizing-table:begin -->", "<!-- sizing-table:end -->"


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "judge_simulation", ROOT / "bench" / "judge_simulation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["judge_simulation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_settings_are_the_configs_defaults(sim: ModuleType) -> None:
    from proxy.config import RouteSpec

    canary = RouteSpec.model_validate({"primary": "p", "canary": {"model": "c"}}).canary
    assert canary is not None
    settings = sim.Settings.from_config()
    assert list(settings.steps) == canary.steps
    assert settings.step_interval_s == canary.step_interval_s
    assert settings.interval_s == canary.analysis.interval_s
    assert settings.failure_limit == canary.analysis.failure_limit
    assert settings.thresholds.min_samples_rate == canary.analysis.min_samples
    assert 100 not in settings.judged_steps  # a step of 100 % is promotion


def test_min_samples_becomes_the_rate_minimum_unless_the_threshold_is_set(sim: ModuleType) -> None:
    implicit = sim.Settings.from_config({"analysis": {"min_samples": 7}})
    assert implicit.thresholds.min_samples_rate == 7
    explicit = sim.Settings.from_config(
        {"analysis": {"min_samples": 7, "thresholds": {"min_samples_rate": 9}}}
    )
    assert explicit.thresholds.min_samples_rate == 9


def test_a_bad_setting_is_a_config_error_naming_the_key(sim: ModuleType) -> None:
    with pytest.raises(ValueError, match="steps"):
        sim.Settings.from_config({"steps": [50, 10]})


def test_an_identical_candidate_is_promoted_through_every_step(sim: ModuleType) -> None:
    settings = sim.Settings.from_config({"steps": [25, 50], "step_interval_s": 30})
    result = sim.simulate(100.0, settings, sim.Scenario(horizon_s=1800), seed=4)
    assert result.rolled_back_s is None
    assert result.promoted_s is not None
    assert result.first_step_s is not None and result.first_step_s < result.promoted_s
    assert result.first_step_canary > 0


def test_a_rule_change_rolls_the_canary_back(sim: ModuleType) -> None:
    settings = sim.Settings.from_config({"steps": [25, 50]})
    scenario = sim.Scenario(start_step=1, rule_change=True, horizon_s=600)
    result = sim.simulate(100.0, settings, scenario, seed=5)
    assert result.promoted_s is None
    assert result.rolled_back_s is not None
    # failure_limit consecutive failing looks: never before the second look after the change.
    assert result.rolled_back_s >= settings.interval_s * (settings.failure_limit - 1)


def test_a_slow_tail_rolls_the_canary_back(sim: ModuleType) -> None:
    settings = sim.Settings.from_config({"steps": [50]})
    result = sim.simulate(100.0, settings, sim.Scenario(slow_tail=True, horizon_s=900), seed=6)
    assert result.promoted_s is None and result.rolled_back_s is not None


def test_too_little_traffic_holds_and_never_decides(sim: ModuleType) -> None:
    settings = sim.Settings.from_config({"steps": [1, 50]})
    result = sim.simulate(1.0, settings, sim.Scenario(horizon_s=600), seed=7)
    assert result == sim.RunResult(None, None, None, None)


def test_the_sizing_table_is_deterministic_for_a_seed(sim: ModuleType) -> None:
    # a 2-point error margin, so that a 25 % step of 100 req/s passes within three minutes
    old_margins = {"thresholds": {"error_rate_increase": 0.02, "rate_margin_relative": 0.25}}
    settings = sim.Settings.from_config(
        {"steps": [25, 50], "step_interval_s": 30, "analysis": old_margins}
    )

    def table(seed: int) -> str:
        return sim.sizing_table(settings, [100.0], [1, 25], 2, seed, 180.0, 1)

    first = table(3)
    assert first == table(3)
    lines = first.splitlines()
    assert lines[0] == sim.sizing_header(settings, 2, 3, 180.0)
    assert lines[2] == "| route rate | first step 1 % | first step 25 % |"
    row = lines[4]
    assert row.startswith("| 100/s | does not pass within 3.0 min | ")
    assert "promoted" in row.split("|")[3]


def _docs_block() -> str:
    text = (ROOT / "docs" / "rollouts.md").read_text()
    assert BEGIN in text and END in text, "docs/rollouts.md lost its sizing-table markers"
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def test_the_docs_sizing_table_was_produced_by_the_script(sim: ModuleType) -> None:
    block = _docs_block()
    command = re.search(rf"^{re.escape(sim.COMMAND)} (--sizing-table.*)$", block, re.M)
    assert command, f"the block must show the command: {sim.COMMAND} --sizing-table ..."
    args = sim.command_line().parse_args(shlex.split(command.group(1)))
    settings = sim._settings_from(args)
    header = sim.sizing_header(settings, args.sizing_runs, args.seed, args.horizon_h * 3600)
    assert header in block.splitlines(), (
        "the docs' sizing table is stale (a default changed?): regenerate it with "
        f"`{sim.COMMAND} {command.group(1)}` and paste the output between the markers"
    )
    rows = [line for line in block.splitlines() if line.startswith("| ")]
    weights = [int(w) for w in args.sizing_weights.split(",")]
    assert rows[0] == "| route rate | " + " | ".join(f"first step {w} %" for w in weights) + " |"
    assert [r.split(" | ")[0] for r in rows[1:]] == [
        f"| {float(r):g}/s" for r in args.rates.split(",")
    ]
    assert all(len(r.split(" | ")) == len(weights) + 1 for r in rows[1:])
