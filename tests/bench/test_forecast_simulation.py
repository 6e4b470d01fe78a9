"""bench/forecast_simulation.py, briefly: at 20 req/s the simulated rollouts' median time to
promotion is near the forecast's median and most are promoted by its p90; an A/A rollout with
probes and reviews on is promoted, not rolled back."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

from proxy.rollout.plan import plan_rollout

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "forecast_simulation", ROOT / "bench" / "forecast_simulation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["forecast_simulation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# The two-point error margin of before: at the defaults a rollout at 20 req/s takes the better
# part of an hour of simulated looks, too long for a fast test of the forecast's calibration.
FAST = {"error_rate_increase": 0.02, "rate_margin_relative": 0.25}


def test_the_forecast_holds_for_simulated_rollouts_at_20_per_s(sim: ModuleType) -> None:
    plan = plan_rollout("bench", sim.profile(20.0, False, 1), sim.canary_spec(False, False, FAST))
    assert plan.total_s is not None and plan.total_p90_s is not None
    runs = [sim.simulate(20.0, 1000 + i, False, False, 3600.0, FAST) for i in range(16)]
    times = [r.promoted_s for r in runs]
    assert all(t is not None for t in times)
    median = statistics.median(t for t in times if t is not None)
    assert 0.75 <= median / plan.total_s <= 1.25
    assert sum(1 for t in times if t is not None and t <= plan.total_p90_s) >= 12


def test_an_aa_rollout_with_probes_and_reviews_on_is_promoted(sim: ModuleType) -> None:
    run = sim.simulate(20.0, 5, True, True, 3 * 3600.0, FAST)
    assert run.promoted_s is not None and not run.rolled_back
