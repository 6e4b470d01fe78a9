"""Shadow traffic through a gateway (in process) in front of the mock upstream. Shedding shadows
when the event loop is overloaded needs a real, loaded loop: tests/e2e/test_shadow_overload.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from proxy.config import ConfigError, parse_config
from proxy.core.records import Arm, ExchangeRecord, PairRecord, Status
from proxy.core.sampling import sampled
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.report.command import build_report
from proxy.rollout.evidence import agreement_tallies
from proxy.store.judge_windows import Arms, JudgeWindows
from tests.conftest import STALL_TIMEOUT_S, InProcessGateway, sdk_client, wait_until


def model(upstream: MockUpstreamServer, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "provider": "openai",
        "base_url": upstream.url + "/v1",
        "model": name,
        "timeout_s": STALL_TIMEOUT_S if name == "stall" else 2,
        "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
        **extra,
    }


def shadowed(upstream: MockUpstreamServer, shadows: list[dict[str, Any]], **route: Any) -> dict:
    names = {s["model"] for s in shadows}
    models = {name: model(upstream, MOCK_NAMES.get(name, name)) for name in names}
    return {
        "models": models,
        "routes": {"shadowed": {"primary": "echo", "shadows": shadows, **route}},
    }


MOCK_NAMES = {
    "cand-stale": "stale",
    "cand-follow": "rule-follower",
    "cand-echo": "echo-twin",
    "cand-broken": "broken",
    "cand-reset": "reset",
    "cand-stall": "stall",
    "cand-badchunk": "bad-chunk",
    "cand-slow": "slow-stream",
}


def ask(gw: InProcessGateway, marker: str, stream: bool = False, **headers: str) -> httpx.Response:
    body = {
        "model": "shadowed",
        "messages": [
            {"role": "system", "content": "max_weight = 150"},
            {"role": "user", "content": f"{marker} how heavy?"},
        ],
        "stream": stream,
    }
    response = gw.http.post("/v1/chat/completions", json=body, headers=headers, timeout=10)
    response.raise_for_status()
    return response


def received(upstream: MockUpstreamServer, marker: str) -> dict[str, int]:
    """Requests the mock received for this test, by upstream model name."""
    counts: dict[str, int] = {}
    for request in upstream.app.recorder.requests():
        if marker in str(request["body"]):
            name = request["body"]["model"]
            counts[name] = counts.get(name, 0) + 1
    return counts


def pairs_for(gw: InProcessGateway, count: int, **filters: Any) -> list[PairRecord]:
    store = gw.gateway.store
    return wait_until(  # type: ignore[no-any-return]
        lambda: len(p := store.query_pairs(**filters)) >= count and p,
        what=f"{count} pairs",
    )


def shadow_records(gw: InProcessGateway, count: int) -> list[ExchangeRecord]:
    store = gw.gateway.store
    return wait_until(  # type: ignore[no-any-return]
        lambda: len(r := store.query(arm=Arm.SHADOW, limit=10_000)) >= count and r,
        what=f"{count} shadow records",
    )


def dropped(gw: InProcessGateway, target: str, reason: str) -> float:
    value = gw.gateway.registry.get_sample_value(
        "mirrorgate_shadow_dropped_total",
        {"route": "shadowed", "target": target, "reason": reason},
    )
    return value or 0.0


def test_each_candidate_gets_exactly_its_sample_and_clients_only_primary_answers(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    shadows = [
        {"model": "cand-stale", "sample": 1.0},
        {"model": "cand-follow", "sample": 1.0},
        {"model": "cand-echo", "sample": 0.3},
    ]
    gw = start_gateway(extra=shadowed(upstream, shadows))
    marker = uuid.uuid4().hex
    ids = []
    for i in range(40):
        response = ask(gw, marker, stream=bool(i % 2))
        ids.append(response.headers["x-mirrorgate-request-id"])
        assert "max_weight" not in response.text  # the stale candidate's answer never leaks
        assert "You said" in response.text
    expected_echo = sum(sampled(i, "cand-echo", 0.3) for i in ids)
    assert 0 < expected_echo < 40
    pairs = pairs_for(gw, 80 + expected_echo)
    assert received(upstream, marker) == {
        "echo": 40, "stale": 40, "rule-follower": 40, "echo-twin": expected_echo,
    }  # fmt: skip
    by_candidate: dict[str, list[PairRecord]] = {}
    for pair in pairs:
        by_candidate.setdefault(pair.candidate_target, []).append(pair)
    assert {k: len(v) for k, v in by_candidate.items()} == {
        "cand-stale": 40, "cand-follow": 40, "cand-echo": expected_echo,
    }  # fmt: skip
    # The overload monitor ran with its default thresholds and shed nothing: this load is light.
    assert gw.gateway.shadows is not None and gw.gateway.shadows.overload is not None
    assert all(dropped(gw, c, "overload") == 0 for c in ("cand-stale", "cand-follow", "cand-echo"))
    assert all(not p.exact_equal and p.json_equal is None for p in by_candidate["cand-stale"])
    assert all(p.exact_equal for p in by_candidate["cand-echo"])  # the same echo behaviour
    assert {p.request_id for p in by_candidate["cand-stale"]} == set(ids)
    records = {r.pair_id: r for r in shadow_records(gw, 80 + expected_echo)}
    for pair in pairs:
        candidate = records[pair.pair_id]
        assert candidate.arm is Arm.SHADOW and candidate.target == pair.candidate_target
        assert candidate.request_id == pair.request_id
        if candidate.streamed:
            assert candidate.ttft_s is not None and candidate.ttft_s > 0
    registry = gw.gateway.registry

    def agreement(target: str, result: str) -> float:
        labels = {"route": "shadowed", "target": target, "result": result}
        return registry.get_sample_value("mirrorgate_agreement_total", labels) or 0.0

    assert (agreement("cand-stale", "disagree"), agreement("cand-stale", "agree")) == (40, 0)
    assert agreement("cand-echo", "agree") == expected_echo  # normalised text: the same echo
    # Shadow spend is counted under arm="shadow", never mixed into the primary's.
    shadow_cost = registry.get_sample_value(
        "mirrorgate_cost_usd_total", {"route": "shadowed", "target": "cand-stale", "arm": "shadow"}
    )
    assert shadow_cost == pytest.approx(sum(r.cost_usd for r in records.values()
                                            if r.target == "cand-stale"))  # fmt: skip
    primary_cost = registry.get_sample_value(
        "mirrorgate_cost_usd_total", {"route": "shadowed", "target": "echo", "arm": "primary"}
    )
    assert primary_cost == pytest.approx(
        sum(r.cost_usd for r in gw.gateway.store.query(arm=Arm.PRIMARY, route="shadowed"))
    )


def test_opt_out_header_skips_shadows_and_counts_them(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=shadowed(upstream, [{"model": "cand-stale"}]))
    marker = uuid.uuid4().hex
    for _ in range(3):
        ask(gw, marker, **{"x-mirrorgate-shadow": "off"})
    assert received(upstream, marker) == {"echo": 3}
    assert dropped(gw, "cand-stale", "opted_out") == 3


@pytest.mark.parametrize(
    ("candidate", "status"),
    [
        ("cand-broken", Status.UPSTREAM_ERROR),
        ("cand-reset", Status.CONNECT_ERROR),
        ("cand-stall", Status.TIMEOUT),
        ("cand-badchunk", Status.INVALID_RESPONSE),
        ("cand-down", Status.CONNECT_ERROR),
    ],
)
def test_failing_candidates_never_touch_the_client(
    start_gateway: Callable[..., InProcessGateway],
    upstream: MockUpstreamServer,
    candidate: str,
    status: Status,
) -> None:
    timeout_s = STALL_TIMEOUT_S if candidate == "cand-stall" else 1
    extra = shadowed(upstream, [{"model": candidate, "timeout_s": timeout_s}])
    if candidate == "cand-down":
        extra["models"]["cand-down"]["base_url"] = "http://127.0.0.1:9/v1"
    gw = start_gateway(extra=extra)
    response = ask(gw, uuid.uuid4().hex, stream=candidate == "cand-badchunk")
    assert response.headers["x-mirrorgate-arm"] == "primary" and "You said" in response.text
    (record,) = shadow_records(gw, 1)
    assert record.status is status and record.target == candidate
    (pair,) = pairs_for(gw, 1)
    assert pair.candidate_status == status.value and pair.primary_status == "ok"


def test_concurrency_queue_and_budget_limits_drop_and_count(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    shadows = [
        {"model": "cand-slow", "max_concurrency": 1},
        {"model": "cand-stale", "max_usd_per_hour": 1e-9},
    ]
    gw = start_gateway(extra=shadowed(upstream, shadows))
    marker = uuid.uuid4().hex

    async def burst() -> None:
        async with gw.async_client(timeout=10) as client:
            body = {"model": "shadowed", "messages": [{"role": "user", "content": marker}]}
            await asyncio.gather(
                *(client.post("/v1/chat/completions", json=body) for _ in range(6))
            )

    asyncio.run(burst())
    wait_until(lambda: len(gw.gateway.shadows.tasks) == 0, what="shadows done")  # type: ignore[union-attr]
    seen = received(upstream, marker)
    assert seen["echo"] == 6
    assert seen.get("slow-stream", 0) + dropped(gw, "cand-slow", "concurrency") == 6
    assert dropped(gw, "cand-slow", "concurrency") >= 1
    # Spend is known when a call ends, so a burst can overshoot by the calls in flight; once the
    # first call has spent more than the whole hourly budget, every later one is refused.
    assert seen.get("stale", 0) + dropped(gw, "cand-stale", "budget") == 6
    before = dropped(gw, "cand-stale", "budget")
    for _ in range(3):
        ask(gw, marker)
    assert dropped(gw, "cand-stale", "budget") == before + 3

    full = start_gateway(
        extra={**shadowed(upstream, [{"model": "cand-slow"}]), "server": {"max_shadow_calls": 1}},
        db_url=f"sqlite:///{gw.gateway.config.store.url.removeprefix('sqlite:///')}-2",
    )
    gw = full

    async def burst2() -> None:
        async with gw.async_client(timeout=10) as client:
            body = {"model": "shadowed", "messages": [{"role": "user", "content": marker + "2"}]}
            await asyncio.gather(
                *(client.post("/v1/chat/completions", json=body) for _ in range(6))
            )

    asyncio.run(burst2())
    assert dropped(gw, "cand-slow", "queue_full") >= 1


def test_noise_floor_asks_the_primary_twice_off_the_client_path(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=shadowed(upstream, [], noise_sample=1.0))
    marker = uuid.uuid4().hex
    for _ in range(4):
        ask(gw, marker)
    pairs = pairs_for(gw, 4, kind="noise")
    assert all(p.candidate_target == "echo" == p.primary_target for p in pairs)
    assert all(p.exact_equal for p in pairs)  # the mock is deterministic: no noise
    assert received(upstream, marker) == {"echo": 8}
    noise = [r for r in shadow_records(gw, 4) if r.tags == ("noise",)]
    assert len(noise) == 4
    noise_agree = gw.gateway.registry.get_sample_value(
        "mirrorgate_agreement_total", {"route": "shadowed", "target": "echo", "result": "agree"}
    )
    assert noise_agree == 4  # the primary agrees with itself: the noise floor is zero here


def test_shadow_span_links_to_the_primary_span(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gw = start_gateway(
        extra=shadowed(upstream, [{"model": "cand-stale"}]), tracer_provider=provider
    )
    ask(gw, uuid.uuid4().hex)
    spans = wait_until(lambda: len(s := exporter.get_finished_spans()) >= 2 and s, what="spans")
    primary = next(s for s in spans if s.attributes["mirrorgate.arm"] == "primary")
    shadow = next(s for s in spans if s.attributes["mirrorgate.arm"] == "shadow")
    assert [link.context.span_id for link in shadow.links] == [primary.context.span_id]


def test_shadow_sdk_streams_are_unaffected(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=shadowed(upstream, [{"model": "cand-slow"}, {"model": "cand-stall"}]))
    sdk = sdk_client(
        openai.OpenAI(
            base_url=gw.url + "/v1", api_key="k", max_retries=0, http_client=gw.sdk_http()
        )
    )
    chunks = list(
        sdk.chat.completions.create(
            model="shadowed", stream=True, messages=[{"role": "user", "content": "hello"}]
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("You said: hello")


def test_cross_provider_shadows_are_rejected_at_start() -> None:
    text = """
models:
  prod: {provider: openai, base_url: "http://h/v1", model: m}
  claude: {provider: anthropic, base_url: "http://h", model: c}
routes:
  r: {primary: prod, shadows: [{model: claude}]}
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text, {})
    assert [str(p) for p in info.value.problems] == [
        "routes.r.shadows[0].model: 'claude' speaks anthropic but the primary speaks openai; "
        "requests are not translated between wire formats"
    ]


@pytest.mark.parametrize(
    ("agreement", "verdict"),
    [
        ({"mode": "json_fields", "fields": ["max_weight"], "tolerance": 60}, "agree"),
        ({"mode": "numeric", "fields": ["$.max_weight"], "tolerance": 60}, "agree"),
        ({"mode": "json_fields", "fields": ["max_weight"], "tolerance": 10}, "disagree"),
        ({"mode": "numeric", "fields": ["$.missing"]}, "not_applicable"),
    ],
)
def test_the_routes_agreement_settings_decide_for_the_metric_the_judge_and_the_report(
    start_gateway: Callable[..., InProcessGateway],
    upstream: MockUpstreamServer,
    agreement: dict[str, Any],
    verdict: str,
) -> None:
    # The primary answers {"max_weight": 150}, the stale candidate {"max_weight": 100}: unequal
    # as texts and as JSON, equal in the compared field within a tolerance of 60.
    route = {"primary": "rule-follower", "shadows": [{"model": "stale"}], "agreement": agreement}
    gw = start_gateway(extra={"routes": {"shadowed": route}})
    for _ in range(3):
        ask(gw, uuid.uuid4().hex)
    pairs = pairs_for(gw, 3, route="shadowed")
    assert {(p.exact_equal, p.json_equal, p.agreement) for p in pairs} == {(False, False, verdict)}

    registry = gw.gateway.registry
    counted = {
        result: registry.get_sample_value(
            "mirrorgate_agreement_total",
            {"route": "shadowed", "target": "stale", "result": result},
        )
        or 0.0
        for result in ("agree", "disagree")
    }
    judged = agreement_tallies(
        JudgeWindows(gw.gateway.store),
        Arms("shadowed", "rule-follower", "stale"),
        agreement["mode"],
        datetime.now(UTC) - timedelta(hours=1),
    )
    modes = {"shadowed": agreement["mode"]}
    (route_report,) = build_report(
        [], pairs, generated_at=datetime.now(UTC), agreement_modes=modes
    ).routes
    shown = route_report.candidates[0].agreement.agreed
    if verdict == "not_applicable":
        assert counted == {"agree": 0, "disagree": 0}
        assert judged[0] == (0, 0)
        assert shown.n == 0
    else:
        agreed = verdict == "agree"
        assert counted == {"agree": 3 if agreed else 0, "disagree": 0 if agreed else 3}
        assert judged[0] == (0 if agreed else 3, 3)
        assert (shown.successes, shown.n) == (3 if agreed else 0, 3)
