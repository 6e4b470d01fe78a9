"""The rollout gauges: one phase series per phase, the weight, only the current target's."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from proxy.core import Phase
from proxy.observability.rollout_gauges import RolloutGauges


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[str, ...]], float]:
    return {
        (sample.name, tuple(sample.labels.values())): sample.value
        for family in registry.collect()
        for sample in family.samples
    }


def test_the_current_phase_is_1_every_other_0_and_the_weight_is_its_own_series() -> None:
    registry = CollectorRegistry()
    gauges = RolloutGauges(registry)
    gauges.set("bot", "cand", Phase.PROGRESSING, 25.0)
    got = samples(registry)
    assert got[("mirrorgate_rollout_weight_percent", ("bot", "cand"))] == 25.0
    phases = {labels[2]: v for (name, labels), v in got.items() if name.endswith("_phase")}
    assert phases == {each.value: float(each is Phase.PROGRESSING) for each in Phase}
    assert registry.get_sample_value(
        "mirrorgate_rollout_phase", {"route": "bot", "target": "cand", "phase": "progressing"}
    ) == 1.0  # fmt: skip
    text = generate_latest(registry).decode()
    assert "# TYPE mirrorgate_rollout_phase gauge" in text
    assert "# TYPE mirrorgate_rollout_weight_percent gauge" in text


def test_a_route_without_a_rollout_has_every_phase_at_0() -> None:
    registry = CollectorRegistry()
    RolloutGauges(registry).set("plain", "prod", None, 0.0)
    phase_values = [v for (name, _), v in samples(registry).items() if name.endswith("_phase")]
    assert len(phase_values) == len(Phase) and set(phase_values) == {0.0}


def test_a_new_target_replaces_the_old_ones_series_and_a_forgotten_route_has_none() -> None:
    registry = CollectorRegistry()
    gauges = RolloutGauges(registry)
    gauges.set("bot", "cand", Phase.PROGRESSING, 5.0)
    gauges.set("other", "prod", None, 0.0)
    gauges.set("bot", "safe", Phase.ROLLED_BACK, 0.0)  # the fallback took over
    assert {labels[:2] for _, labels in samples(registry)} == {("bot", "safe"), ("other", "prod")}
    gauges.forget("other")
    assert {labels[:2] for _, labels in samples(registry)} == {("bot", "safe")}
