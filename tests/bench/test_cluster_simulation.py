"""bench/cluster_simulation.py: the shapes are what they say, the judge's standard error over
sticky units is near the estimate's real spread (and the per-request one far below it), and the
defaults roll a doubled error rate back within the hour at 200 req/s, never promoting it."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "cluster_simulation", ROOT / "bench" / "cluster_simulation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["cluster_simulation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_shapes_have_their_batch_user_and_their_base_rate(sim: ModuleType) -> None:
    users = sim.Population.draw(sim.SHAPES["users"], 1)
    assert len(users.rates) == 5001
    assert users.cumulative[-1] == pytest.approx(1.0)
    assert users.cumulative[-1] - users.cumulative[-2] == pytest.approx(0.05)
    shares = [b - a for a, b in zip((0.0, *users.cumulative), users.cumulative, strict=False)]
    rate = sum(s * r for s, r in zip(shares, users.rates, strict=True))
    assert rate == pytest.approx(sim.BASE_ERROR, rel=1e-6)


def test_the_standard_error_over_tenants_is_the_spread_and_per_request_is_not(
    sim: ModuleType,
) -> None:
    done = [sim.snapshot("tenants", 20.0, 0.5, 900.0, 500 + i) for i in range(40)]
    spread = statistics.stdev(d[0] for d in done)
    units = statistics.fmean(d[1] for d in done)
    plain = statistics.fmean(d[2] for d in done)
    assert 0.7 <= units / spread <= 1.4
    assert plain / spread < 0.4  # what the judge said before it knew the units


def test_the_defaults_roll_a_doubled_error_rate_back_within_the_hour_at_200_per_s(
    sim: ModuleType,
) -> None:
    settings = sim.Settings.defaults()
    for seed in (1, 2):
        job = sim.Rollout("independent", 200.0, factor=2.0, horizon_s=3600.0, seed=seed)
        ended = sim.rollout(job, settings)
        assert ended.promoted_s is None
        assert ended.rolled_back_s is not None and ended.rolled_back_s < 3600.0
