"""Canary routing and shadow sampling key one request on the same sticky key."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from proxy.config import parse_config
from proxy.core import ENDPOINTS, Action, Arm, initial_state, sampled, transition
from proxy.gateway import RouteTable
from proxy.mirror import ShadowDispatcher
from proxy.observability import ExchangeTracer, GatewayMetrics
from proxy.upstream import CallContext, ModelCaller

CHAT = ENDPOINTS["/v1/chat/completions"]
Request = tuple[list[tuple[bytes, bytes]], dict[str, Any]]


def gateway_parts(sticky: str) -> tuple[RouteTable, ShadowDispatcher, CollectorRegistry, str]:
    """A route with its canary at 50 % and a shadow sampling half of its requests, and the salt
    of the canary's rollout."""
    model = {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    doc = {
        "models": {"prod": model, "cand": model, "shadow": model},
        "routes": {
            "bot": {
                "primary": "prod",
                "shadows": [{"model": "shadow", "sample": 0.5}],
                "canary": {"model": "cand", "steps": [50, 100], "sticky": sticky},
            }
        },
    }
    config = parse_config(yaml.safe_dump(doc), env={})
    spec = config.routes["bot"]
    start = transition(
        initial_state("bot", spec), Action.START, spec, now=datetime.now(UTC), reason="t", actor="t"
    )
    table = RouteTable(config)
    table.apply(start.after)
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    caller = ModelCaller({}, keep_bodies=False)
    shadows = ShadowDispatcher(caller, metrics, ExchangeTracer(None), [])
    # Not accepting: each sampled shadow is dropped with reason "shutdown" and counted, so the
    # counter says which requests were sampled, and nothing is called.
    shadows.accepting = False
    return table, shadows, registry, start.after.salt


def sampled_shadows(registry: CollectorRegistry) -> float:
    labels = {"route": "bot", "target": "shadow", "reason": "shutdown"}
    return registry.get_sample_value("mirrorgate_shadow_dropped_total", labels) or 0.0


CASES: dict[str, tuple[str, Callable[[int], Request], Callable[[int], str]]] = {
    # A boolean is no user id: both key on the request id.
    "boolean-body-field": ("body:user", lambda i: ([], {"user": True}), lambda i: f"req-{i}"),
    "header": ("header:x-user-id", lambda i: ([(b"x-user-id", f"u{i}".encode())], {}),
               lambda i: f"u{i}"),
    "dotted-body-path": ("body:metadata.user", lambda i: ([], {"metadata": {"user": f"u{i}"}}),
                         lambda i: f"u{i}"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_the_canary_and_the_shadow_sample_use_the_same_key(case: str) -> None:
    sticky, request, key = CASES[case]
    table, shadows, registry, salt = gateway_parts(sticky)
    route = table.get("bot")
    assert route is not None
    canaried, shadowed = set(), set()
    for i in range(400):
        headers, payload = request(i)
        plan = table.plan("bot", headers, payload, f"req-{i}")
        assert plan is not None
        if plan.arm is Arm.CANARY:
            canaried.add(i)
        before = sampled_shadows(registry)
        ctx = CallContext(f"req-{i}", "bot", CHAT, payload, False, False, headers)
        assert shadows.offer(ctx, route) is None
        if sampled_shadows(registry) > before:
            shadowed.add(i)
    assert canaried == {i for i in range(400) if sampled(key(i), salt, 0.5)}
    assert shadowed == {i for i in range(400) if sampled(key(i), "shadow", 0.5)}
    assert 100 < len(canaried) < 300 and 100 < len(shadowed) < 300
