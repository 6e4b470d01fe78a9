"""bench/quantile_simulation.py: its candidate at the margin is exactly at the margins, its
populations are the issue's, and one step runs to an end on the virtual clock."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "quantile_simulation", ROOT / "bench" / "quantile_simulation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["quantile_simulation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_margin_map_moves_p50_and_p95_by_exactly_the_margins(sim: ModuleType) -> None:
    q50, q95 = sim._population_quantiles(sim.LATENCY_MEDIAN_S, sim.LATENCY_SIGMA)
    r50, r95 = sim.AT_MARGIN.p50, sim.AT_MARGIN.p95
    assert sim._mapped(q50, q50, q95, r50, r95) == pytest.approx(r50 * q50)
    assert sim._mapped(q95, q50, q95, r50, r95) == pytest.approx(r95 * q95)
    xs = [0.1 * i for i in range(1, 200)]
    mapped = [sim._mapped(x, q50, q95, r50, r95) for x in xs]
    assert mapped == sorted(mapped)  # monotone: quantiles map onto quantiles


def test_the_populations_are_the_issues(sim: ModuleType) -> None:
    rng = random.Random(1)
    users = sim.population("users", rng)
    assert len(users.weights) == 5000
    assert users.weights[-1] / math.fsum(users.weights) == pytest.approx(0.05)
    assert len(sim.population("tenants", rng).weights) == 200
    assert sim.population("requests", rng).weights is None


def test_one_step_runs_to_its_horizon(sim: ModuleType) -> None:
    job = sim.StepJob("tenants", 0.5, 2.0, sim.Candidate(), sim.DEFAULTS, True, 3, 120.0)
    result = sim.run_step(job)
    assert 100 < result.canary < 400 and not result.failed
