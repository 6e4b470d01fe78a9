"""bench/probes_e2e.py, a short run through real processes: staged adaptation rates of 0 %, 30 %
and 95 % come back from `GET /admin/rules` within 5 points."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("probes_e2e", ROOT / "bench" / "probes_e2e.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["probes_e2e"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.e2e
def test_staged_adaptation_rates_are_measured_back(bench: ModuleType, tmp_path: Path) -> None:
    result = bench.run(argparse.Namespace(rate=40.0, probes=40), tmp_path)
    by_target = {row["target"]: row for row in result["targets"]}
    assert set(by_target) == set(bench.STAGED)
    for target, staged in bench.STAGED.items():
        row = by_target[target]
        assert row["probes"] >= 40, row
        assert row["followed"] + row["stuck"] == row["probes"], row  # the old value, or the new
        assert abs(row["rate"] - staged) <= 0.05, row
        assert row["low"] <= staged <= row["high"], row
    assert result["ok"]
