"""docs/reference.md lists every metric family a gateway exposes, with its type and labels, and
nothing it does not expose."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.observability import WorkerMetrics
from tests.metric_catalog import wired_registry

DOC = Path(__file__).resolve().parent.parent / "docs" / "reference.md"
ROW = re.compile(r"^\| `(mirrorgate_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \| [^|]+ \|$")


def exposed_families(tmp_path: Path) -> dict[str, tuple[str, tuple[str, ...], str]]:
    """{exposed name: (type, label names, help)} of a gateway with every optional part wired."""
    registry = wired_registry(tmp_path)
    WorkerMetrics(registry)  # what the merged /metrics of `serve --workers` adds
    families: dict[str, tuple[str, tuple[str, ...], str]] = {}
    for collector in list(registry._collector_to_names):
        declared = getattr(collector, "_labelnames", None)  # a prometheus_client metric's
        for metric in collector.collect():
            # A collector of our own (the rollout gauges) says its labels in its samples.
            first = metric.samples[0].labels if metric.samples else {}
            labels = tuple(declared if declared is not None else first)
            name = metric.name + ("_total" if metric.type == "counter" else "")
            families[name] = (metric.type, labels, metric.documentation)
    return families


def documented_families() -> dict[str, tuple[str, tuple[str, ...]]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            name, kind, labels = match.groups()
            names = tuple(n.strip() for n in labels.split(",") if n.strip() not in ("", "—"))
            rows[name] = (kind, names)
    return rows


def test_every_exposed_family_is_documented_with_its_type_and_labels(tmp_path: Path) -> None:
    exposed = {
        name: (kind, labels) for name, (kind, labels, _) in exposed_families(tmp_path).items()
    }
    documented = documented_families()
    assert len(documented) > 20  # the table was found and read
    missing = sorted(set(exposed) - set(documented))
    stale = sorted(set(documented) - set(exposed))
    assert not missing, f"exposed but not in docs/reference.md: {missing}"
    assert not stale, f"in docs/reference.md but not exposed: {stale}"
    wrong = {n: (documented[n], exposed[n]) for n in exposed if documented[n] != exposed[n]}
    assert not wrong, f"type or labels differ (doc, code): {wrong}"
