"""Rule-flip probes through a gateway (in process) in front of real mock upstreams."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from proxy.config import ConfigError, parse_config
from proxy.core.records import Arm, ExchangeRecord, ProbeRecord
from proxy.core.sampling import sampled
from proxy.mirror import ProbeDispatcher, probe_id
from proxy.mirror.overload import LoopLoadMonitor
from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.store import ProbeStore
from tests.conftest import InProcessGateway, wait_until

PARAMETER = r"max_weight\s*=\s*(?P<value>\d+)"
JSON_EXPECT = [
    {"name": "follows", "type": "json_path", "path": "$.max_weight", "equals": "{value}"}
]
SYSTEM = "You are the shipping desk. Rules: max_weight = 100 (kg); be polite."


def probed(
    primary: str = "rule-follower",
    targets: list[str] | None = None,
    route: dict[str, Any] | None = None,
    models: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
    **probes: Any,
) -> dict[str, Any]:
    """The extra config of a route `probed` governed by rule `shipping` with probes."""
    spec: dict[str, Any] = {
        "parameter": PARAMETER, "values": [150], "expect": JSON_EXPECT, "sample": 1.0, **probes,
    }  # fmt: skip
    if targets is not None:
        spec["targets"] = targets
    extra: dict[str, Any] = {
        "routes": {"probed": {"primary": primary, **(route or {})}},
        "rules": {"shipping": {"routes": ["probed"], "probes": spec}},
    }
    if models:
        extra["models"] = models
    if server:
        extra["server"] = server
    return extra


def stalling(upstream: MockUpstreamServer) -> dict[str, Any]:
    """A model that never answers, with a timeout far beyond any test's wait."""
    return {
        "stall-long": {
            "provider": "openai", "base_url": upstream.url + "/v1", "model": "stall",
            "timeout_s": 60, "total_timeout_s": 60,
        }
    }  # fmt: skip


def chat(marker: str, system: Any = SYSTEM, stream: bool = False) -> dict[str, Any]:
    return {
        "model": "probed",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"{marker} how heavy may a parcel be?"},
        ],
        "stream": stream,
    }


def ask(gw: InProcessGateway, body: dict[str, Any], path: str = "/v1/chat/completions",
        **headers: str) -> httpx.Response:  # fmt: skip
    response = gw.http.post(path, json=body, headers=headers, timeout=10)
    response.raise_for_status()
    return response


def received(upstream: MockUpstreamServer, marker: str) -> list[dict[str, Any]]:
    return [r["body"] for r in upstream.app.recorder.requests() if marker in str(r["body"])]


def settled(gw: InProcessGateway) -> ProbeDispatcher:
    probes = gw.gateway.probes
    assert probes is not None
    wait_until(lambda: len(probes.tasks) == 0, what="probes done")
    return probes


def probe_rows(gw: InProcessGateway, count: int) -> list[ProbeRecord]:
    store = ProbeStore(gw.gateway.store)
    return wait_until(  # type: ignore[no-any-return]
        lambda: len(r := store.recent("shipping", limit=1000)) >= count and r,
        what=f"{count} probe rows",
    )


def probe_calls(gw: InProcessGateway, count: int) -> list[ExchangeRecord]:
    store = gw.gateway.store
    return wait_until(  # type: ignore[no-any-return]
        lambda: len(r := store.query(arm=Arm.PROBE, limit=10_000)) >= count and r,
        what=f"{count} probe calls",
    )


def dropped(gw: InProcessGateway, target: str, reason: str) -> float:
    labels = {"route": "probed", "target": target, "reason": reason}
    return gw.gateway.registry.get_sample_value("mirrorgate_probe_dropped_total", labels) or 0.0


def results(gw: InProcessGateway, target: str, result: str) -> float:
    labels = {"route": "probed", "target": target, "rule": "shipping", "result": result}
    return gw.gateway.registry.get_sample_value("mirrorgate_probe_results_total", labels) or 0.0


@pytest.mark.parametrize("stream", [False, True])
def test_a_probe_is_the_clients_request_with_only_the_value_changed_and_is_scored(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer, stream: bool
) -> None:
    gw = start_gateway(extra=probed(targets=["rule-follower", "stale", "echo"]))
    marker = uuid.uuid4().hex
    response = ask(gw, chat(marker, stream=stream))
    assert "100" in response.text  # the client got the primary's answer to its own prompt
    request_id = response.headers["x-mirrorgate-request-id"]
    rows = {r.target: r for r in probe_rows(gw, 3)}
    bodies = received(upstream, marker)
    (client,) = [b for b in bodies if "max_weight = 100" in str(b)]
    probes = {b["model"]: b for b in bodies if "max_weight = 150" in str(b)}
    assert sorted(probes) == ["echo", "rule-follower", "stale"]
    for name, body in probes.items():
        expected = copy.deepcopy(client)
        expected["model"] = name
        expected["messages"][0]["content"] = SYSTEM.replace("= 100", "= 150")
        assert body == expected  # every other field and byte of the prompt as the client's
    # The follower follows, the model answering the old rule is stuck, the echo is neither.
    assert {t: r.result for t, r in rows.items()} == {
        "rule-follower": "followed", "stale": "stuck", "echo": "other",
    }  # fmt: skip
    assert rows["rule-follower"].answered_value == "150"
    assert rows["stale"].answered_value == "100" and rows["echo"].answered_value is None
    calls = {c.target: c for c in probe_calls(gw, 3)}
    (live,) = wait_until(
        lambda: gw.gateway.store.query(request_id=request_id, arm=Arm.PRIMARY), what="record"
    )
    for target, row in rows.items():
        assert (row.request_id, row.route, row.rule) == (request_id, "probed", "shipping")
        assert (row.original_value, row.asked_value) == ("100", "150")
        assert row.probe_id == probe_id(request_id, target)
        call = calls[target]
        assert call.pair_id == row.probe_id and call.tags == ("probe",)
        assert call.request_id == request_id and call.streamed is stream
        assert (call.rule, call.rule_version) == ("shipping", live.rule_version)
        assert row.rule_version == live.rule_version and row.cost_usd == call.cost_usd > 0
        assert results(gw, target, row.result) == 1
    cost = gw.gateway.registry.get_sample_value(
        "mirrorgate_cost_usd_total", {"route": "probed", "target": "stale", "arm": "probe"}
    )
    assert cost == pytest.approx(calls["stale"].cost_usd)
    # Probe answers are no rule-check verdicts of the live version (only the client's answer).
    assert gw.gateway.store.query(arm=Arm.PRIMARY, route="probed") == [live]


def test_probe_answers_are_not_checked_against_the_live_version(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    extra = probed(targets=["rule-follower", "stale"])
    check = {"name": "max-100", "type": "json_path", "path": "$.max_weight", "equals": 100}
    extra["rules"]["shipping"]["checks"] = [check]
    gw = start_gateway(extra=extra)
    response = ask(gw, chat(uuid.uuid4().hex))
    request_id = response.headers["x-mirrorgate-request-id"]
    probe_rows(gw, 2)
    store = gw.gateway.store
    (verdict,) = wait_until(lambda: store.query_checks(request_id=request_id), what="verdict")
    settled(gw)
    assert (verdict.arm, verdict.target, verdict.result) == (Arm.PRIMARY, "rule-follower", "pass")
    assert store.query_checks(request_id=request_id) == [verdict]  # the probes' answers: none


def test_configure_swaps_the_probe_settings_and_keeps_the_hours_counts(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=probed(targets=["stale"], max_per_hour=1))
    ask(gw, chat(uuid.uuid4().hex))
    probe_rows(gw, 1)
    probes = settled(gw)
    config = gw.gateway.config
    rule = config.rules["shipping"]
    assert rule.probes is not None
    edited = rule.probes.model_copy(update={"targets": ["stale", "echo"]})
    rules = {"shipping": rule.model_copy(update={"probes": edited})}
    probes.configure(config.model_copy(update={"rules": rules}))
    ask(gw, chat(uuid.uuid4().hex))
    settled(gw)
    assert dropped(gw, "stale", "rate") == 1  # the hour's count carried over
    assert {r.target for r in probe_rows(gw, 2)} == {"stale", "echo"}
    probes.configure(config.model_copy(update={"rules": {}}))  # probes removed from the rule
    ask(gw, chat(uuid.uuid4().hex))
    settled(gw)
    assert len(probe_rows(gw, 2)) == 2 and dropped(gw, "stale", "rate") == 1


def test_default_targets_are_the_primary_shadows_and_canary(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    route = {"shadows": [{"model": "stale", "sample": 0.0}], "canary": {"model": "echo"}}
    gw = start_gateway(extra=probed(route=route))
    ask(gw, chat(uuid.uuid4().hex))
    rows = probe_rows(gw, 3)
    assert sorted(r.target for r in rows) == ["echo", "rule-follower", "stale"]


@pytest.mark.parametrize("sample", [0.0, 0.3, 1.0])
def test_sampling_is_the_deterministic_share_of_requests(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer, sample: float
) -> None:
    gw = start_gateway(extra=probed(targets=["stale"], sample=sample))
    marker = uuid.uuid4().hex
    ids = [ask(gw, chat(marker)).headers["x-mirrorgate-request-id"] for _ in range(30)]
    expected = {i for i in ids if sampled(i, "\x00probe:shipping", sample)}
    if sample == 0.3:
        assert 0 < len(expected) < 30
    settled(gw)
    if expected:
        probe_rows(gw, len(expected))
    assert {r.request_id for r in ProbeStore(gw.gateway.store).recent("shipping", limit=100)} == (
        expected
    )
    assert sum(1 for b in received(upstream, marker) if b["model"] == "stale") == len(expected)


def test_budget_and_rate_limits_drop_and_count(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=probed(targets=["stale"], max_usd_per_hour=1e-9))
    ask(gw, chat(uuid.uuid4().hex))
    probe_rows(gw, 1)  # the first probe spends more than the whole hourly budget
    for _ in range(3):
        ask(gw, chat(uuid.uuid4().hex))
    assert dropped(gw, "stale", "budget") == 3

    gw = start_gateway(
        extra=probed(targets=["stale"], max_per_hour=2, max_usd_per_hour=None),
        db_url=f"sqlite:///{gw.gateway.config.store.url.removeprefix('sqlite:///')}-2",
    )
    for _ in range(5):
        ask(gw, chat(uuid.uuid4().hex))
    settled(gw)
    assert len(probe_rows(gw, 2)) == 2
    assert dropped(gw, "stale", "rate") == 3


def test_a_stalled_target_never_delays_the_client_and_is_cut_at_shutdown(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    extra = probed(
        targets=["stall-long", "stale"],
        max_concurrency=1,
        models=stalling(upstream),
        server={"drain_timeout_s": 0.2},
    )
    gw = start_gateway(extra=extra)
    probes = gw.gateway.probes
    assert probes is not None
    first = ask(gw, chat(uuid.uuid4().hex))
    # The client has its answer while its probe of the stalled model is still in flight.
    assert "100" in first.text
    assert probes.inflight[("shipping", "stall-long")] == 1
    for _ in range(2):
        ask(gw, chat(uuid.uuid4().hex))
    assert dropped(gw, "stall-long", "concurrency") == 2
    assert probes.inflight[("shipping", "stall-long")] == 1
    assert len(probe_rows(gw, 3)) == 3  # the other target's probes went on meanwhile
    assert {r.target for r in probe_rows(gw, 3)} == {"stale"}
    gw.stop()
    assert dropped(gw, "stall-long", "shutdown") == 1
    assert gw.gateway.store.query(arm=Arm.PROBE, target="stall-long") == []


def test_the_gateway_wide_cap_opt_out_and_no_value_drop_and_count(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    extra = probed(
        targets=["stall-long", "stale"],
        models=stalling(upstream),
        server={"max_shadow_calls": 1, "drain_timeout_s": 0.2},
    )
    gw = start_gateway(extra=extra)
    ask(gw, chat(uuid.uuid4().hex))
    assert dropped(gw, "stale", "queue_full") == 1  # the stalled probe holds the only slot
    ask(gw, chat(uuid.uuid4().hex), **{"x-mirrorgate-shadow": "off"})
    assert dropped(gw, "stale", "opted_out") == dropped(gw, "stall-long", "opted_out") == 1
    ask(gw, chat(uuid.uuid4().hex, system="max_weight = 150"))  # the only value is the original
    assert dropped(gw, "stale", "no_value") == dropped(gw, "stall-long", "no_value") == 1


def test_overload_sheds_every_probe(
    start_gateway: Callable[..., InProcessGateway],
    upstream: MockUpstreamServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The busy share's moving average over 0.1 s instead of 0.5 s: a fully busy loop reads as
    # overloaded after ~0.12 s instead of ~0.6 s (the smoothing itself: tests/proxy/mirror/
    # test_overload.py).
    monkeypatch.setitem(LoopLoadMonitor.__init__.__kwdefaults__, "busy_window_s", 0.1)
    # A CPU clock that runs as fast as the wall clock: the loop reads as 100 % busy.
    gw = start_gateway(extra=probed(targets=["stale", "echo"]), cpu_clock=time.perf_counter)
    probes = gw.gateway.probes
    assert probes is not None
    wait_until(lambda: probes.overload is not None and probes.overload.overloaded, what="overload")
    assert gw.gateway.shadows is None  # no shadows: the probes run the monitor themselves
    busy = gw.gateway.registry.get_sample_value("mirrorgate_event_loop_busy_ratio")
    assert busy is not None and busy > 0.7  # the monitor's reading, exposed
    marker = uuid.uuid4().hex
    ask(gw, chat(marker))
    assert dropped(gw, "stale", "overload") == dropped(gw, "echo", "overload") == 1
    assert [b["model"] for b in received(upstream, marker)] == ["rule-follower"]


def test_the_clients_answer_and_record_are_the_same_with_and_without_probes(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    without = start_gateway(extra={"routes": {"probed": {"primary": "rule-follower"}},
                                   "rules": {"shipping": {"routes": ["probed"]}}})  # fmt: skip
    url = without.gateway.config.store.url.removeprefix("sqlite:///")
    with_probes = start_gateway(
        extra=probed(targets=["stale", "echo"]), db_url=f"sqlite:///{url}-2"
    )
    marker = uuid.uuid4().hex
    seen = []
    for gw in (without, with_probes):
        response = ask(gw, chat(marker, stream=True))
        request_id = response.headers["x-mirrorgate-request-id"]
        record = wait_until(
            lambda gw=gw, rid=request_id: gw.gateway.store.query(request_id=rid, arm=Arm.PRIMARY),
            what="record",
        )[0]
        seen.append((response.content, record))
    settled(with_probes)
    (body_a, a), (body_b, b) = seen

    def same(record: ExchangeRecord) -> tuple[Any, ...]:
        return (
            record.arm, record.target, record.status, record.http_status, record.usage,
            record.cost_usd, record.response_text, record.rule, record.rule_version,
            record.tags, record.pair_id, record.streamed,
        )  # fmt: skip

    assert same(a) == same(b)
    strip = [line for line in body_a.split(b"\n") if b'"content"' in line]
    assert len(strip) > 1  # a real stream, compared chunk by chunk (their ids differ)
    text = [line.split(b'"content":')[1] for line in strip]
    assert text == [line.split(b'"content":')[1] for line in body_b.split(b"\n")
                    if b'"content"' in line]  # fmt: skip


def test_anthropic_and_responses_system_prompts_are_probed(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(
        extra=probed(
            primary="rule-follower-claude", targets=["rule-follower-claude", "stale-claude"]
        )
    )
    marker = uuid.uuid4().hex
    body = {
        "model": "probed", "max_tokens": 50,
        "system": [{"type": "text", "text": "intro"}, {"type": "text", "text": SYSTEM}],
        "messages": [{"role": "user", "content": marker}],
    }  # fmt: skip
    ask(gw, body, "/v1/messages")
    rows = {r.target: r.result for r in probe_rows(gw, 2)}
    assert rows == {"rule-follower-claude": "followed", "stale-claude": "stuck"}
    sent = [b for b in received(upstream, marker) if "max_weight = 150" in str(b)]
    assert {b["model"] for b in sent} == {"rule-follower", "stale"}
    for probe in sent:
        assert probe["system"] == [
            {"type": "text", "text": "intro"},
            {"type": "text", "text": SYSTEM.replace("= 100", "= 150")},
        ]
        assert probe["messages"] == body["messages"] and probe["max_tokens"] == 50

    gw = start_gateway(
        extra=probed(targets=["rule-follower", "stale"]),
        db_url=f"sqlite:///{gw.gateway.config.store.url.removeprefix('sqlite:///')}-2",
    )
    marker = uuid.uuid4().hex
    body = {"model": "probed", "instructions": SYSTEM, "input": marker}
    ask(gw, body, "/v1/responses")
    rows = {r.target: r.result for r in probe_rows(gw, 2)}
    assert rows == {"rule-follower": "followed", "stale": "stuck"}
    sent = [b for b in received(upstream, marker) if "max_weight = 150" in str(b)]
    assert {b["instructions"] for b in sent} == {SYSTEM.replace("= 100", "= 150")}


@pytest.mark.parametrize(
    "system",
    [
        "no rule in this prompt",
        [{"type": "image_url", "image_url": {"url": "data:,"}}, {"type": "file", "file": {}}],
    ],
)
def test_requests_without_the_parameter_are_not_probed(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer, system: Any
) -> None:
    gw = start_gateway(extra=probed(targets=["stale"]))
    marker = uuid.uuid4().hex
    response = gw.http.post("/v1/chat/completions", json=chat(marker, system=system), timeout=10)
    assert response.status_code < 500
    settled(gw)
    assert [b["model"] for b in received(upstream, marker)] in (["rule-follower"], [])
    assert ProbeStore(gw.gateway.store).recent("shipping") == []
    assert dropped(gw, "stale", "no_value") == 0


def test_a_megabyte_system_prompt_is_probed_with_only_the_value_changed(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    # The mock reads a megabyte prompt slowly: the model's timeout leaves it time.
    patient = {"provider": "openai", "base_url": upstream.url + "/v1", "model": "rule-follower",
               "timeout_s": 60}  # fmt: skip
    gw = start_gateway(
        extra=probed(primary="patient", targets=["patient"], models={"patient": patient})
    )
    marker = uuid.uuid4().hex
    filler = "z" * (1 << 20)
    system = f"{filler} max_weight = 100 {filler[:1000]}"
    ask(gw, chat(marker, system=system))
    (row,) = probe_rows(gw, 1)
    assert row.result == "followed"
    (probe,) = [b for b in received(upstream, marker) if "= 150" in b["messages"][0]["content"]]
    assert probe["model"] == "rule-follower"
    assert probe["messages"][0]["content"] == system.replace("= 100", "= 150")


# --- free text ----------------------------------------------------------------------------------

TEXT_BEHAVIOR = {
    "default": {"answer": {"type": "echo"}},
    "models": {
        "text-follower": {
            "answer": {
                "type": "regex_from_system",
                "pattern": r"max_weight\s*=\s*(\d+)",
                "template": "You may ship parcels of up to {1} kg.",
            }
        },
        "text-stale": {"answer": {"type": "fixed", "text": "You may ship up to 100kg."}},
    },
}


@pytest.fixture(scope="module")
def text_upstream() -> Iterator[MockUpstreamServer]:
    with MockUpstreamServer(parse_behavior(TEXT_BEHAVIOR)) as server:
        yield server


def test_free_text_answers_scored_with_a_regex(
    start_gateway: Callable[..., InProcessGateway], text_upstream: MockUpstreamServer
) -> None:
    models = {
        name: {"provider": "openai", "base_url": text_upstream.url + "/v1", "model": name,
               "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
        for name in ("text-follower", "text-stale", "text-echo")
    }  # fmt: skip
    expect = [{"name": "says-limit", "type": "regex", "pattern": "up to {value} ?kg"}]
    extra = probed(
        primary="text-follower",
        targets=["text-follower", "text-stale", "text-echo"],
        models=models,
        expect=expect,
        values=[],
        scale=1.5,
        parameter=r"max_weight\s*=\s*(?P<value>\d+)",
    )
    gw = start_gateway(extra=extra)
    ask(gw, chat(uuid.uuid4().hex))
    rows = {r.target: r for r in probe_rows(gw, 3)}
    assert {t: r.result for t, r in rows.items()} == {
        "text-follower": "followed", "text-stale": "stuck", "text-echo": "other",
    }  # fmt: skip
    assert {r.asked_value for r in rows.values()} == {"150"}  # 100 * 1.5, an integer still


# --- configuration --------------------------------------------------------------------------------


def config_problems(probes: dict[str, Any]) -> list[str]:
    doc = {
        "models": {
            "prod": {"provider": "openai", "base_url": "http://h/v1", "model": "m"},
            "claude": {"provider": "anthropic", "base_url": "http://h", "model": "c"},
        },
        "routes": {"r": {"primary": "prod"}},
        "rules": {"shipping": {"routes": ["r"], "probes": probes}},
    }
    import yaml

    try:
        parse_config(yaml.safe_dump(doc), {})
    except ConfigError as exc:
        return [str(p) for p in exc.problems]
    return []


def test_config_cross_checks_name_the_key_path() -> None:
    base = {"parameter": PARAMETER, "values": [150], "expect": JSON_EXPECT}
    assert config_problems(base) == []
    assert config_problems({**base, "targets": ["prod", "nope", "claude"]}) == [
        "rules.shipping.probes.targets[1]: model 'nope' is not defined",
        "rules.shipping.probes.targets[2]: 'claude' speaks anthropic but route 'r' speaks "
        "openai; requests are not translated between wire formats",
    ]
    bad_path = [{"name": "p", "type": "json_path", "path": "$..x", "equals": "{value}"}]
    (problem,) = config_problems({**base, "expect": bad_path})
    assert problem.startswith("rules.shipping.probes.expect[0].path: ")
    twice = [*JSON_EXPECT, *JSON_EXPECT]
    assert config_problems({**base, "expect": twice}) == [
        "rules.shipping.probes.expect[1].name: duplicate check name 'follows'"
    ]


@pytest.mark.parametrize(
    ("probes", "where"),
    [
        ({"parameter": "max_weight = (\\d+)", "values": [1]}, "rules.shipping.probes.parameter"),
        ({"parameter": PARAMETER}, "rules.shipping.probes"),
        ({"parameter": PARAMETER, "values": [1], "sample": 2}, "rules.shipping.probes.sample"),
        ({"parameter": PARAMETER, "values": [1], "targets": "prod"},
         "rules.shipping.probes.targets"),
        ({"parameter": PARAMETER, "values": list(range(101))}, "rules.shipping.probes.values"),
        ({"parameter": PARAMETER, "values": [1], "expect": []}, "rules.shipping.probes.expect"),
        ({"parameter": "(?P<value>\\d*)", "values": [1]}, "rules.shipping.probes.parameter"),
        ({"parameter": "(?P<value>[", "values": [1]}, "rules.shipping.probes.parameter"),
        ({"parameter": PARAMETER, "values": [{"a": 1}]}, "rules.shipping.probes.values"),
        ({"parameter": PARAMETER, "values": [1], "max_per_hour": 0},
         "rules.shipping.probes.max_per_hour"),
    ],
)  # fmt: skip
def test_hostile_probe_settings_are_refused(probes: dict[str, Any], where: str) -> None:
    problems = config_problems({"expect": JSON_EXPECT, **probes})
    assert problems, probes
    assert problems and all(p.startswith(where) for p in problems), problems


def test_probe_tasks_are_only_built_when_a_rule_has_probes(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(extra={"rules": {"plain": {"routes": ["echo"]}}})
    assert gw.gateway.probes is None
    assert all(not isinstance(o, ProbeDispatcher) for o in gw.gateway.proxy.observers)


def test_the_hourly_cap_counts_every_replicas_probes_from_the_store(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway(extra=probed(targets=["stale"], max_per_hour=2, max_usd_per_hour=None))
    # Another replica (or warm-up traffic) probed "stale" twice ten minutes ago: the fleet's
    # hourly cap of 2 is spent, though this process has not probed at all.
    earlier = datetime.now(UTC) - timedelta(minutes=10)
    others = []
    for i in range(2):
        others.append(
            ProbeRecord(
                probe_id=f"other-{i}", request_id=f"other-r-{i}", route="probed", target="stale",
                rule="shipping", rule_version="v1", created_at=earlier, original_value="100",
                asked_value="150", result="followed", answered_value="150", cost_usd=0.0,
            )
        )  # fmt: skip
    gw.gateway.store.write_batch(others)
    probes = gw.gateway.probes
    assert probes is not None
    wait_until(
        lambda: probes.fleet_seen.get(("shipping", "stale"), (0, 0.0))[0] == 2,
        what="the fleet's spend read from the store",
    )
    ask(gw, chat(uuid.uuid4().hex))
    settled(gw)
    assert dropped(gw, "stale", "rate") == 1
    assert len(ProbeStore(gw.gateway.store).recent("shipping", limit=10)) == 2  # no new probe
