"""bench/preference_simulation.py, small and seeded: the simulated reviews have the true share,
the interval holds it at every look, identical answers never win nor stop an arm, a real
preference ships, and the README records the full run."""

from __future__ import annotations

import importlib.util
import random
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "preference_simulation", ROOT / "bench" / "preference_simulation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["preference_simulation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_simulated_reviews_have_the_true_share_and_ties(sim: ModuleType) -> None:
    rng = random.Random(4)
    scores = [sim.score(rng, 0.65, 0.2) for _ in range(40_000)]
    assert statistics.fmean(scores) == pytest.approx(0.65, abs=0.01)
    assert scores.count(0.5) / len(scores) == pytest.approx(0.2, abs=0.01)


def test_identical_answers_never_win_or_stop_and_a_real_preference_ships(
    sim: ModuleType,
) -> None:
    for i in range(3):
        aa = sim.run(f"aa{i}", 0.5, 0.2, 300, 10)
        assert aa.covered and not aa.verdicts & {sim.Verdict.SHIP, sim.Verdict.WORSE}
        guarded = sim.run(f"g{i}", 0.5, 0.2, 300, 10, guardrail=True)
        assert sim.Verdict.STOPPED not in guarded.verdicts
        real = sim.run(f"real{i}", 0.75, 0.2, 300, 10)
        assert real.first_ship is not None and real.first_ship >= 30


def test_the_readme_records_the_full_run(sim: ModuleType) -> None:
    readme = (ROOT / "bench" / "README.md").read_text()
    assert "## Experiments: human preference" in readme
    section = readme.split("## Experiments: human preference", 1)[1]
    assert sim.COMMAND in section
    for label in sim.RATES:
        assert f"at {label}" in section
