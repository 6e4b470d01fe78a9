"""Garbage-collection pauses in /metrics, and the start-up freeze."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from proxy.observability import gcpause
from proxy.observability.metrics import GatewayMetrics
from tests.conftest import InProcessGateway


def pause_counts(text: str) -> dict[str, float]:
    """generation -> observations of `mirrorgate_gc_pause_seconds` in a /metrics text."""
    return {
        sample.labels["generation"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "mirrorgate_gc_pause_seconds_count"
    }


def observed(histogram: Histogram, generation: str) -> float:
    """Observations of one generation in a histogram, read the way a registry exposes them."""
    return sum(
        s.value
        for s in histogram.collect()[0].samples
        if s.name.endswith("_count") and s.labels.get("generation") == generation
    )


@pytest.fixture
def refrozen() -> Iterator[None]:
    """The test session keeps its own start-up objects frozen (tests/conftest.py); after a test
    that froze more, the live objects are frozen as the session would, the garbage collected."""
    yield
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def test_a_full_collection_is_in_metrics_while_the_gateway_runs_and_not_after(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    frozen = gc.get_freeze_count()
    gw = start_gateway()
    assert gc.get_freeze_count() <= frozen  # an embedded gateway freezes nothing more
    before = pause_counts(gw.http.get("/metrics").text).get("2", 0.0)
    gc.collect(2)
    gc.collect(2)
    after = pause_counts(gw.http.get("/metrics").text)
    assert after["2"] >= before + 2
    histogram = gw.gateway.metrics.gc_pause
    gw.stop()
    stopped = observed(histogram, "2")  # a stopped gateway serves no /metrics: read its family
    gc.collect(2)
    assert observed(histogram, "2") == stopped


def test_each_watched_registry_counts_a_collection_once_and_the_callback_goes_with_the_last() -> (
    None
):
    first = GatewayMetrics(CollectorRegistry()).gc_pause
    second = GatewayMetrics(CollectorRegistry()).gc_pause
    installed_before = gc.callbacks.count(gcpause._on_collection)
    gcpause.watch(first)
    gcpause.watch(first)  # a second watch of the same histogram does not double its counts
    gcpause.watch(second)
    try:
        gc.collect(1)
        assert [observed(h, "1") for h in (first, second)] == [1, 1]
        assert gc.callbacks.count(gcpause._on_collection) == 1
    finally:
        gcpause.unwatch(first)
        gcpause.unwatch(second)
    if installed_before == 0:  # no gateway of this process is still watching
        assert gcpause._on_collection not in gc.callbacks


def test_a_stop_without_its_start_is_ignored_and_never_raises() -> None:
    histogram = GatewayMetrics(CollectorRegistry()).gc_pause
    gcpause.watch(histogram)
    try:
        gcpause._on_collection("stop", {"generation": 2})
        gcpause._on_collection("start", {})
        gcpause._on_collection("stop", {})
    finally:
        gcpause.unwatch(histogram)
    assert observed(histogram, "2") == 0


@pytest.mark.usefixtures("refrozen")
def test_a_gateway_told_to_freeze_its_startup_objects_does_so_when_it_has_started(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gc.unfreeze()
    gw = start_gateway(freeze_gc=True)  # what `mirrorgate serve` passes
    frozen = gc.get_freeze_count()
    assert frozen > 1000  # modules, the config, the app's routes: far more than a handful
    assert any(gc.is_tracked(o) for o in (gw.gateway.config,))  # tracked, and so frozen now
    assert gcpause.freeze_startup_objects() >= frozen


def test_only_a_0_turns_the_freeze_off() -> None:
    assert gcpause.freeze_wanted({})
    assert gcpause.freeze_wanted({"MIRRORGATE_GC_FREEZE": "1"})
    assert gcpause.freeze_wanted({"MIRRORGATE_GC_FREEZE": "no"})  # a typo keeps the default
    assert not gcpause.freeze_wanted({"MIRRORGATE_GC_FREEZE": "0"})
    assert not gcpause.freeze_wanted({"MIRRORGATE_GC_FREEZE": " 0 "})
