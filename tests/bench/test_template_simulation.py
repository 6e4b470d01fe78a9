"""bench/template_simulation.py, a short run: with a sticky key a templated prompt is one version,
one client's junk opens none, and each kind of change is carried within 20 requests."""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "template_simulation", ROOT / "bench" / "template_simulation.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["template_simulation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("change", ["value", "word", "sentence"])
def test_with_a_sticky_key_one_version_no_junk_and_a_change_within_twenty(
    sim: ModuleType, change: str
) -> None:
    args = argparse.Namespace(users=500, before=120, after=40, junk=40)
    rng = random.Random(f"test-{change}")
    for _ in range(4):
        run = sim.one_run(rng, args, True, change)
        assert run.split == 0 and run.junk == 0
        assert run.first <= 40 and run.detect <= 20


def test_without_a_sticky_key_junk_cannot_hide_a_change(sim: ModuleType) -> None:
    args = argparse.Namespace(users=500, before=120, after=40, junk=40)
    run = sim.one_run(random.Random("test-none"), args, False, "value")
    assert run.detect <= 20
