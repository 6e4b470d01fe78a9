"""`mirrorgate_rollout_weight_percent` and `mirrorgate_rollout_phase`, read off the rollout states
when scraped.

Two gauge families with one child per route and target (and phase): as prometheus_client
`Gauge`s a gateway made 7 children per route at start, each a full metric object, ~1.5 ms for
a config of 26 routes, every start (and every reload). Here each route is one tuple, set as
its state changes; the samples are built only when `/metrics` is read, with the same names,
types, labels and values.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from proxy.core import Phase

WEIGHT_HELP = "Share of live traffic sent to the canary."
PHASE_HELP = "1 for the rollout's current phase."


class RolloutGauges:
    """The rollout gauges of every route (a collector on `registry`). `set` and `forget` are
    called on the event loop; a scrape may read from another thread (it reads a copy)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._routes: dict[str, tuple[str, Phase | None, float]] = {}
        registry.register(self)

    def set(self, route: str, target: str, phase: Phase | None, weight: float) -> None:
        """The route's rollout is in `phase` (1 for it, 0 for every other) toward `target`,
        sending it `weight` percent; a series of an earlier target goes away."""
        self._routes[route] = (target, phase, weight)

    def forget(self, route: str) -> None:
        """The route is gone (a reload removed it): its series go away."""
        self._routes.pop(route, None)

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("mirrorgate_rollout_weight_percent", WEIGHT_HELP, labels=())
        yield GaugeMetricFamily("mirrorgate_rollout_phase", PHASE_HELP, labels=())

    def collect(self) -> Iterator[Metric]:
        routes = list(self._routes.items())  # one copy: the loop may change the dict meanwhile
        weight = GaugeMetricFamily(
            "mirrorgate_rollout_weight_percent", WEIGHT_HELP, labels=("route", "target")
        )
        phase = GaugeMetricFamily(
            "mirrorgate_rollout_phase", PHASE_HELP, labels=("route", "target", "phase")
        )
        for route, (target, current, share) in routes:
            weight.add_metric([route, target], share)
            for each in Phase:
                phase.add_metric([route, target, each.value], 1.0 if current is each else 0.0)
        yield weight
        yield phase
