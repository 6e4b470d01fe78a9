"""bench/adaptation_simulation.py, briefly: the estimate is near the staged p, the gate rolls a
memoriser back at both rates and leaves an A/A pair alone, with the config's defaults."""

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
        "adaptation_simulation", ROOT / "bench" / "adaptation_simulation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["adaptation_simulation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_settings_are_the_configs_defaults(sim: ModuleType) -> None:
    from proxy.config import ProbesSpec

    settings = sim.Settings.from_config()
    assert settings.sample == ProbesSpec.model_fields["sample"].default
    assert settings.max_per_hour == ProbesSpec.model_fields["max_per_hour"].default
    assert settings.probes_per_s(2) == pytest.approx(min(0.1, 200 / 3600))


def test_estimates_after_200_probes_are_near_the_staged_rate(sim: ModuleType) -> None:
    rows = {row["p"]: row for row in sim.estimate(300, seed=3)}
    assert rows[0.0]["within_5"] == 1.0
    assert rows[0.95]["within_5"] > 0.95
    assert rows[0.3]["within_5"] > 0.8  # sd 3.2 points: about 88 % within 5
    assert all(row["coverage"] > 0.88 for row in rows.values())


@pytest.mark.parametrize("rate", [2.0, 200.0])
def test_the_gate_fails_a_memoriser_and_not_an_aa_pair(sim: ModuleType, rate: float) -> None:
    settings = sim.Settings.from_config()
    result = sim.gate(settings, rate, fail_runs=5, aa_runs=5, horizon_s=1800, seed=4)
    assert result["fail_never"] == 0.0
    # it cannot fail before the minimum number of probes has arrived in both arms
    assert (
        result["fail_median_s"]
        >= settings.thresholds.min_samples_probes / result["probes_per_s"] * 0.5
    )
    assert result["aa_rollbacks"] == 0.0


def test_the_command_prints_both_tables(
    sim: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    code = sim.main(
        ["--estimate-runs", "50", "--fail-runs", "2", "--aa-runs", "2", "--horizon-h", "0.1"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "## Estimate after 200 probes" in out and "## Gate, sample 0.05" in out
    assert out.count("| 2 |") == 1 and out.count("| 200 |") == 1
