"""One exposition from the expositions of the workers of `serve --workers`.

Whichever worker receives a scrape fetches its siblings' own expositions over loopback and
merges them with its own: every sample gets a `worker="<index>"` label, each family's HELP and
TYPE appear once, and `mirrorgate_worker_up{worker}` says which workers are in (1) and which did
not answer or answered something unreadable (0, and none of their samples). A sibling never
breaks the merged answer: its text is parsed whole before any of it is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from .metrics import WorkerMetrics

WORKER_LABEL = "worker"
_UP = "mirrorgate_worker_up"


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def merge_worker_expositions(parts: Mapping[str, str | None]) -> bytes:
    """`parts`: each worker's index (as the label value) → its exposition text, or None when
    it did not answer. The merged exposition, in Prometheus' text format."""
    merged: dict[str, Metric] = {}
    registry = CollectorRegistry(auto_describe=False)
    up = WorkerMetrics(registry).up
    for worker, text in parts.items():
        families = _parsed(text)
        up.labels(worker).set(0 if families is None else 1)
        for family in families or ():
            if family.name == _UP:  # a sibling's own claim about workers: ours says it
                continue
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            elif into.type != family.type:  # a family that changed type: not merged
                continue
            for sample in family.samples:
                labels = {**sample.labels, WORKER_LABEL: worker}
                into.samples.append(sample._replace(labels=labels))
    workers = CollectorRegistry(auto_describe=False)
    workers.register(_Families(merged.values()))
    return generate_latest(workers) + generate_latest(registry)


def _parsed(text: str | None) -> list[Metric] | None:
    if text is None:
        return None
    try:
        return list(text_string_to_metric_families(text))
    except Exception:  # whatever the parser makes of garbage: this worker is left out
        return None
