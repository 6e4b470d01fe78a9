"""bench/guard_simulation.py, a short run: an A/A rule change never switches, and a stubborn
primary is switched at 20 req/s and at 2 req/s."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "guard_simulation", ROOT / "bench" / "guard_simulation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["guard_simulation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_an_aa_rule_change_never_switches(sim: ModuleType) -> None:
    result = sim.summary(sim.AA, sim.Settings(rate=20.0, horizon_s=300.0), runs=40, seed=1)
    assert result["switched"] == 0.0


@pytest.mark.parametrize("rate", [20.0, 2.0])
def test_a_stubborn_primary_is_switched(sim: ModuleType, rate: float) -> None:
    result = sim.summary(sim.STUBBORN, sim.Settings(rate=rate), runs=10, seed=2)
    assert result["switched"] == 1.0


def test_without_a_regression_nothing_happens(sim: ModuleType) -> None:
    outcome, at = sim.run(sim.AA, sim.Settings(rate=2.0, horizon_s=60.0), seed=3)
    assert (outcome, at) == ("none", None)
