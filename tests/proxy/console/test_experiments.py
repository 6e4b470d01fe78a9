"""The experiments pages, drawn from the JSON `GET /admin/experiments/{route}` answers (the shape
of proxy/api/experiments.py: configuration, state, serving weights, the decider's decision with
each arm's lifts and the sample-ratio check, events, warnings)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import httpx
import pytest

from tests.asgi_driver import AppThread, sync_transport
from tests.conftest import InProcessGateway
from tests.proxy.api.test_experiments import experiment_extra
from tests.proxy.console.console_client import (
    ADMIN_TOKEN,
    ENV,
    REVIEWER_TOKENS,
    console_app,
    sign_in,
)

LIFT = {
    "metric": "completion_rate", "scale": "points", "better": "higher",
    "control_value": 0.61, "arm_value": 0.66, "estimate": 0.05, "low": 0.012, "high": 0.088,
    "n_control": 420, "n_arm": 415,
}  # fmt: skip
STATUS: dict[str, Any] = {
    "route": "bot",
    "configured": True,
    "config": {
        "arms": {"control": {"model": "prod"}, "b": {"model": "cand-<b>"}},
        "weights": {"control": 50, "b": 50}, "unit": "user",
        "primary_metric": "completion_rate", "guardrails": ["error_rate", "latency_p95"],
        "minimum_detectable_effect": 0.02,
    },
    "control": "control",
    "experiment": {
        "id": "x1", "state": "running", "revision": 1, "control": "control",
        "models": {"control": "prod", "b": "cand-<b>"},
        "weights_percent": {"control": 50.0, "b": 50.0}, "stopped_arms": [],
        "started_at": "2026-03-01T12:00:00+00:00", "stopped_at": None, "actor": "operator",
        "reason": "<try> b",
    },
    "serving": {"running": True, "weights_percent": {"control": 50.0, "b": 50.0}},
    "warnings": [],
    "decision": {
        "at": "2026-03-01T13:00:00+00:00", "text": "b completes more: ship b",
        "primary_metric": "completion_rate", "guardrails": ["error_rate", "latency_p95"],
        "control": "control", "control_units": 420, "alpha": 0.05, "interval_alpha": 0.05,
        "minimum_detectable_effect": 0.02, "config_changed": False,
        "arms": [{
            "arm": "b", "model": "cand-<b>", "verdict": "ship", "text": "b: +5.0 pt completion",
            "units": 415, "operations": 900, "needs": 0, "eta_s": None, "breached": [],
            "stopped": False,
            "lifts": [LIFT, {**LIFT, "metric": "latency_p95", "scale": "relative",
                             "better": "lower", "estimate": -0.1, "low": -0.2, "high": 0.01}],
        }],
        "srm": {"counts": {"control": 420, "b": 415}, "expected": {"control": 417.5, "b": 417.5},
                "chi2": 0.03, "df": 1, "p_value": 0.86, "alpha": 0.001, "flagged": False},
    },
    "events": [{"kind": "start", "arm": None, "metric": None, "detail": "<started>",
                "actor": "operator", "at": "2026-03-01T12:00:00+00:00"}],
    "store_reachable": True,
}  # fmt: skip


class Experiments:
    """An experiment source holding one route's answer."""

    def __init__(self, answers: Mapping[str, Mapping[str, Any]]) -> None:
        self.answers = answers

    def routes(self) -> Sequence[str]:
        return list(self.answers)

    async def status(self, route: str) -> Mapping[str, Any]:
        return self.answers[route]


@pytest.fixture
def console(start_gateway: Callable[..., InProcessGateway]) -> Iterator[Callable[..., Any]]:
    """A console app on a running gateway's parts, with the experiment source given."""
    gateway = start_gateway(env=ENV)
    threads: list[AppThread] = []

    def serve(source: Experiments | None) -> httpx.Client:
        parts = dataclasses.replace(gateway.gateway.console_parts, experiments=source)
        thread = AppThread(console_app(parts), name="console")
        thread.start()
        threads.append(thread)
        return httpx.Client(transport=sync_transport(thread), base_url=gateway.url)

    yield serve
    for thread in threads:
        thread.stop()


def test_an_experiment_shows_arms_metrics_lifts_and_the_decision(console: Any) -> None:
    client = console(Experiments({"bot": STATUS}))
    assert sign_in(client, ADMIN_TOKEN).status_code == 303
    listing = client.get("/ui/experiments")
    assert 'href="/ui/experiments/bot"' in listing.text and "running" in listing.text
    html = client.get("/ui/experiments/bot").text
    assert "<td>b</td><td>cand-&lt;b&gt;</td><td>50%</td><td>running</td>" in html
    assert "<td>control</td><td>prod</td><td>50%</td><td>control</td>" in html
    assert "error_rate, latency_p95" in html and "user" in html
    assert "b completes more: ship b" in html and 'class="pass">ship</span>' in html
    assert "<td>completion_rate</td><td>0.61</td><td>0.66</td><td>+5.0 pt</td>" in html
    assert "<td>+1.2 pt to +8.8 pt</td>" in html
    assert "<td>-10.0 %</td><td>-20.0 % to +1.0 %</td>" in html
    assert "as the weights say (p = 0.86)" in html
    assert "&lt;started&gt;" in html and "&lt;try&gt; b" in html
    assert "<b>" not in html and "<try>" not in html and "<started>" not in html


def test_a_flagged_split_and_warnings_are_alerts(console: Any) -> None:
    decision = {**STATUS["decision"], "srm": {**STATUS["decision"]["srm"], "flagged": True,
                                              "p_value": 0.0001}}  # fmt: skip
    answer = {**STATUS, "decision": decision, "warnings": ["the configuration <changed>"]}
    client = console(Experiments({"bot": answer}))
    sign_in(client, ADMIN_TOKEN)
    html = client.get("/ui/experiments/bot").text
    assert 'class="problem">Sample ratio: the split does not follow the weights' in html
    assert 'role="alert">the configuration &lt;changed&gt;' in html


def test_without_experiments_the_page_says_so(console: Any) -> None:
    client = console(None)
    sign_in(client, ADMIN_TOKEN)
    assert "This gateway runs no experiments." in client.get("/ui/experiments").text
    assert client.get("/ui/experiments/bot").status_code == 404


def test_reviewers_cannot_see_experiments(console: Any) -> None:
    client = console(Experiments({"bot": STATUS}))
    sign_in(client, REVIEWER_TOKENS[0])
    for path in ("/ui/experiments", "/ui/experiments/bot"):
        assert client.get(path).status_code == 403
    assert not re.search(r'href="/ui/experiments', client.get("/ui/review").text)


def test_the_wired_page_shows_a_started_experiment_of_the_running_gateway(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    """The gateway's own wiring (no source handed in): an experiment started through the admin
    API is on the console's experiments page, its arms and models with it."""
    gateway = start_gateway(extra=experiment_extra(), env=ENV)
    with gateway.client() as api:
        started = api.post(
            "/admin/experiments/bot/start",
            headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
            json={"reason": "try the cheaper one"},
        )
        assert started.status_code == 200, started.text
    client = gateway.client()
    assert sign_in(client, ADMIN_TOKEN).status_code == 303
    listing = client.get("/ui/experiments")
    assert listing.status_code == 200 and "/ui/experiments/bot" in listing.text
    assert "claude-bot" in listing.text  # configured, not started: listed too
    page = client.get("/ui/experiments/bot")
    assert page.status_code == 200, page.text
    for shown in ("running", "cheaper", "terse", "rule-follower", "try the cheaper one"):
        assert shown in page.text, shown
    client.close()
