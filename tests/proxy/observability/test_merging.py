"""The merged exposition of `serve --workers`: every sample labelled by worker, each family
described once, and a sibling that answers garbage or nothing left out without breaking it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from proxy.observability import merge_worker_expositions


def exposition(requests: float) -> str:
    registry = CollectorRegistry()
    Counter("mirrorgate_requests", "Requests.", ("route",), registry=registry).labels("a").inc(
        requests
    )
    Histogram("mirrorgate_x_seconds", "X.", registry=registry, buckets=(0.1,)).observe(0.05)
    return generate_latest(registry).decode()


def samples(text: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_each_sample_gets_its_worker_label_and_each_family_is_described_once() -> None:
    merged = merge_worker_expositions({"0": exposition(3), "1": exposition(4)})
    text = merged.decode()
    assert text.count("# TYPE mirrorgate_requests_total counter") == 1
    assert text.count("# HELP mirrorgate_x_seconds X.") == 1
    found = samples(merged)
    assert found[("mirrorgate_requests_total", frozenset({("route", "a"), ("worker", "0")}))] == 3
    assert found[("mirrorgate_requests_total", frozenset({("route", "a"), ("worker", "1")}))] == 4
    assert found[("mirrorgate_x_seconds_count", frozenset({("worker", "1")}))] == 1
    assert found[("mirrorgate_worker_up", frozenset({("worker", "0")}))] == 1
    assert found[("mirrorgate_worker_up", frozenset({("worker", "1")}))] == 1


def test_a_sibling_answering_garbage_or_nothing_is_down_and_the_rest_still_parses() -> None:
    garbage = exposition(5) + 'mirrorgate_requests_total{route="a" 1\n\x00\xff not metrics {{{\n'
    merged = merge_worker_expositions(
        {"0": exposition(3), "1": garbage, "2": None, "3": "# TYPE x counter\nx{ 1 2 3\n"}
    )
    found = samples(merged)  # parses: the merged answer is never broken
    up = {dict(labels)["worker"]: v for (n, labels), v in found.items() if n.endswith("_up")}
    assert up == {"0": 1, "1": 0, "2": 0, "3": 0}
    workers = {dict(labels).get("worker") for (name, labels) in found if "requests" in name}
    assert workers == {"0"}  # nothing of a worker whose text did not parse whole


def test_a_sibling_cannot_forge_worker_up_or_retype_a_family() -> None:
    forged = (
        '# TYPE mirrorgate_worker_up gauge\nmirrorgate_worker_up{worker="9"} 1\n'
        '# TYPE mirrorgate_requests gauge\nmirrorgate_requests{route="a"} 99\n'
    )
    found = samples(merge_worker_expositions({"0": exposition(3), "1": forged}))
    up = {dict(labels)["worker"]: v for (n, labels), v in found.items() if n.endswith("_up")}
    assert up == {"0": 1, "1": 1}
    assert ("mirrorgate_requests", frozenset({("route", "a"), ("worker", "1")})) not in found
