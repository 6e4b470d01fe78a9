"""bench/experiment_simulation.py, small and seeded: the always-valid intervals hold the true lift
at every look, identical arms declare no winner, a real +5 points ships at a low and a high
rate, and the README records the full run."""

from __future__ import annotations

import importlib.util
import itertools
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "experiment_simulation", ROOT / "bench" / "experiment_simulation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["experiment_simulation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_looks_grow_geometrically_from_the_minimum_to_the_end(sim: ModuleType) -> None:
    points = sim.looks(500, 1.5)
    assert points[0] == sim.MIN_UNITS and points[-1] == 500
    assert all(b > a for a, b in itertools.pairwise(points))


def test_the_simulated_truth_is_what_the_scenarios_say(sim: ModuleType) -> None:
    # The generators produce the rates and ratios the coverage is measured against.
    rng = random.Random(3)
    users = [sim.user(rng, "a", sim.Arm(completion=0.65, cost_factor=0.6)) for _ in range(20000)]
    completed = sum(u.completed for u in users) / sum(u.outcomes for u in users)
    assert completed == pytest.approx(0.65, abs=0.01)
    assert sum(u.operations for u in users) / len(users) == pytest.approx(3.0, abs=0.05)
    assert any(u.operations > 1 for u in users)


@pytest.mark.parametrize("index", range(5))
def test_intervals_cover_the_true_lift_at_every_look(sim: ModuleType, index: int) -> None:
    scenario = sim.SCENARIOS[index]
    result = sim.coverage(scenario, runs=40, units=600, growth=1.15, seed=11, workers=1)
    assert result.looks >= 20
    assert result.covered_always >= 0.95, scenario.name
    assert result.worst_look >= 0.95


def test_identical_arms_declare_no_winner(sim: ModuleType) -> None:
    result = sim.aa(runs=40, units=800, growth=1.3, seed=5, workers=1)
    assert result.winners / result.runs <= 0.05
    assert result.stopped / result.runs <= 0.05


@pytest.mark.parametrize(("label", "rate"), [("2/s", 2.0), ("200/s", 200.0)])
def test_five_points_more_completion_ships(sim: ModuleType, label: str, rate: float) -> None:
    result = sim.time_to_decision(
        label, rate, runs=2, interval_s=5.0, horizon_s=6 * 3600, seed=2, workers=1,
        arm=sim.Arm(completion=0.75),
    )  # fmt: skip
    assert result.shipped == 2 and result.other == 0
    assert result.median_s is not None and result.median_units is not None


def test_the_readme_records_the_full_run(sim: ModuleType) -> None:
    readme = (ROOT / "bench" / "README.md").read_text()
    assert "## Experiments: the statistics" in readme
    section = readme.split("## Experiments: the statistics", 1)[1]
    assert sim.COMMAND in section
    for scenario in sim.SCENARIOS:
        assert scenario.name in section
    for label in sim.RATES:
        assert f"| {label} |" in section
