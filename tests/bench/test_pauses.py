"""bench/pauses.py, briefly: the GC-pause histogram read from a /metrics page and differenced."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from proxy.observability.metrics import GC_PAUSE_BUCKETS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pauses() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pauses", ROOT / "bench" / "pauses.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pauses"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def page(observations: dict[str, list[float]]) -> str:
    """A /metrics page with the gateway's pause histogram fed `observations` by generation."""
    registry = CollectorRegistry()
    histogram = Histogram(
        "mirrorgate_gc_pause_seconds", "pauses", ("generation",),
        buckets=GC_PAUSE_BUCKETS, registry=registry,
    )  # fmt: skip
    for generation, seconds in observations.items():
        for s in seconds:
            histogram.labels(generation).observe(s)
    return generate_latest(registry).decode()


def test_pauses_between_two_pages_are_counted_per_generation(pauses: ModuleType) -> None:
    before = pauses.parse_pauses(page({"0": [0.0002], "2": [0.003]}))
    after = pauses.parse_pauses(page({"0": [0.0002, 0.0003, 0.0004], "2": [0.003, 0.04, 0.007]}))
    diff = pauses.pauses_between(before, after)
    assert sorted(diff) == ["0", "2"]
    assert diff["0"].count == 2 and diff["0"].over(0.005) == 0
    assert diff["0"].largest_bucket() == 0.0005
    assert diff["2"].count == 2 and diff["2"].over(0.005) == 2
    assert diff["2"].largest_bucket() == 0.05
    assert diff["2"].sum_s == pytest.approx(0.047)


def test_a_page_without_pauses_has_no_generations_and_an_idle_one_no_largest(
    pauses: ModuleType,
) -> None:
    assert pauses.parse_pauses("# nothing here\nmirrorgate_up 1\n") == {}
    same = pauses.parse_pauses(page({"1": [0.001]}))
    assert pauses.pauses_between(same, same)["1"].largest_bucket() is None
