"""Every dashboard query against Debian's Prometheus scraping a real gateway under traffic.

The scene: `mirrorgate mock-upstream` (a primary that follows the system prompt's rule and fails
every fifth call, a fallback, a stale shadow candidate, an LLM judge), `mirrorgate serve` with a
shadow scored by the judge, a rule with two versions and checks, and Prometheus scraping the
gateway every second. A thread sends traffic (streams and not, a rule change half way, shadow
opt-outs, user feedback) while the tests run each panel's PromQL through Prometheus's HTTP API, as
Grafana would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import wait_until
from tests.dashboard_queries import PanelQuery, load_dashboards, panel_queries, substitute
from tests.e2e.conftest import GatewayProcess, Process, free_port
from tests.e2e.monitoring import PrometheusProcess, elapsed_since, has_finite_value

pytestmark = pytest.mark.e2e

ROUTE = "support-bot"
TARGETS = ("prod", "safe", "cand-a", "cand-b", "judge-model")
"""Every model with exchanges on the route: the judge model too (its calls are arm `judge`)."""
BEHAVIOR = {
    "record_requests": False,
    "default": {"answer": {"type": "echo"}},
    "models": {
        # follows whatever max_weight the system prompt says; every fifth call is a 503
        "prod": {
            "answer": {
                "type": "regex_from_system",
                "pattern": r"max_weight\s*=\s*(\d+)",
                "template": '{"max_weight": {1}}',
            },
            "ttft_ms": 5,
            "error": {"status": 503, "rate": 0.2},
        },
        "safe": {
            "answer": {
                "type": "regex_from_system",
                "pattern": r"max_weight\s*=\s*(\d+)",
                "template": '{"max_weight": {1}}',
            }
        },
        # remember the old rule whatever the prompt says
        "cand-a": {"answer": {"type": "fixed", "text": '{"max_weight": 100}'}, "ttft_ms": 10},
        "cand-b": {"answer": {"type": "fixed", "text": '{"max_weight": 100}'}, "ttft_ms": 8},
        # the LLM judge scoring cand-a's shadow pairs
        "judge": {"answer": {"type": "fixed", "text": '{"score_a": 8, "score_b": 5}'}},
    },
}


def gateway_config(mock_url: str, db_url: str) -> dict[str, Any]:
    def model(name: str, input_price: float, output_price: float) -> dict[str, Any]:
        return {
            "provider": "openai",
            "base_url": mock_url + "/v1",
            "model": name,
            "timeout_s": 5,
            "price": {"input_per_mtok": input_price, "output_per_mtok": output_price},
        }

    return {
        "store": {"url": db_url, "bodies": "none"},
        "models": {
            "prod": model("prod", 0.15, 0.6),
            "safe": model("safe", 2.5, 10.0),
            "cand-a": model("cand-a", 0.1, 0.4),
            "cand-b": model("cand-b", 0.12, 0.5),
            "judge-model": model("judge", 1.0, 2.0),
        },
        "judge": {"model": "judge-model", "sample": 1.0, "max_usd_per_hour": 100},
        "routes": {
            ROUTE: {
                "primary": "prod",
                "fallback": "safe",
                "shadows": [{"model": "cand-a", "sample": 1.0}],
                # A canary the judge rolls back once the rule changes (it keeps the old rule).
                "canary": {
                    "model": "cand-b",
                    "steps": [50],
                    "analysis": {"interval_s": 1, "min_samples": 10, "failure_limit": 3,
                                 "thresholds": {"min_samples_latency": 10}},
                },
                "agreement": {"mode": "json_fields", "fields": ["$.max_weight"]},
            }
        },
        "rules": {
            "shipping-policy": {
                "routes": [ROUTE],
                "checks": [{"name": "valid-json", "type": "json"}],
                # rule-flip probes for the Context awareness panel: prod follows, cand-a is stuck
                "probes": {
                    "parameter": r"max_weight\s*=\s*(?P<value>\d+)",
                    "values": [175],
                    "expect": [{"name": "follows", "type": "json_path", "path": "$.max_weight",
                                "equals": "{value}"}],
                    "targets": ["prod", "cand-a"],
                    "sample": 1.0,
                    "max_per_hour": 100000,
                },
                "versions": {
                    "v1": {"match_prompt": r"max_weight\s*=\s*100"},
                    "v2": {
                        "match_prompt": r"max_weight\s*=\s*150",
                        "checks": [
                            {"name": "max-weight", "type": "json_path", "path": "$.max_weight",
                             "equals": 150},
                        ],
                    },
                },
            }
        },
    }  # fmt: skip


class Traffic:
    """Sends the scene's requests from a thread until stopped (at most `limit` requests)."""

    def __init__(self, url: str, limit: int = 5000) -> None:
        self.url = url
        self.limit = limit
        self.sent = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traffic", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            while not self._stop.is_set() and self.sent < self.limit:
                try:
                    self._one(client, self.sent)
                except httpx.HTTPError as exc:
                    self.errors.append(repr(exc))
                self.sent += 1
                self._stop.wait(0.02)  # pacing, not synchronisation: ~50 requests a second

    def _one(self, client: httpx.Client, n: int) -> None:
        weight = 100 if n < 250 else 150  # the rule changes after 250 requests (~5 s)
        body = {
            "model": ROUTE,
            "stream": n % 2 == 0,
            "messages": [
                {"role": "system", "content": f"Shipping policy: max_weight = {weight} kg."},
                {"role": "user", "content": f"How heavy may parcel {n} be?"},
            ],
        }
        headers = {"x-mirrorgate-shadow": "off"} if n % 7 == 0 else {}
        response = client.post("/v1/chat/completions", json=body, headers=headers)
        response.read()
        request_id = response.headers.get("x-mirrorgate-request-id")
        if request_id and n % 3 == 0:
            feedback: dict[str, Any] = (
                {"request_id": request_id, "corrected": True, "correction": "150 kg"}
                if n % 2 == 0
                else {"request_id": request_id, "score": 5 if n % 4 == 1 else 1}
            )
            client.post("/v1/feedback", json=feedback)


@dataclass
class Scene:
    prometheus: PrometheusProcess
    gateway: GatewayProcess
    traffic: Traffic
    started_at: float

    def variables(self, **overrides: str) -> dict[str, str]:
        """Grafana's variable values: the route, all its targets (as Grafana writes a
        multi-value selection into a regex), and the intervals for a 1 s scrape and step."""
        scrape = self.prometheus.scrape_interval_s
        values = {
            "route": ROUTE,
            "target": "(" + "|".join(TARGETS) + ")",
            # Grafana: max(4 * scrape interval, step + scrape interval)
            "__rate_interval": f"{max(4 * scrape, 1 + scrape):g}s",
            "__range": elapsed_since(self.started_at),
        }
        return {**values, **overrides}

    def run(self, query: PanelQuery, **overrides: str) -> list[dict[str, Any]]:
        expr = substitute(query.expr, self.variables(**overrides))
        if query.instant:
            return self.prometheus.query(expr)
        return self.prometheus.query_range(expr, self.started_at, time.time(), step_s=1.0)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    folder = tmp_path_factory.mktemp("dashboards-live")
    behavior = folder / "behavior.yaml"
    behavior.write_text(yaml.safe_dump(BEHAVIOR))
    mock_port = free_port()
    mock = Process(
        ["mock-upstream", "--port", str(mock_port), "--behavior", str(behavior)],
        folder / "mock.log",
    )
    stack: list[Any] = [mock]
    try:
        mock_url = f"http://127.0.0.1:{mock_port}"
        mock.wait_ready(mock_url + "/_mock/stats", "mock-upstream")
        gateway = GatewayProcess(gateway_config(mock_url, f"sqlite:///{folder / 'gw.db'}"), folder)
        stack.append(gateway)
        prometheus = PrometheusProcess(
            folder / "prometheus",
            free_port(),
            scrape_targets={"mirrorgate": [f"127.0.0.1:{gateway.port}"]},
        )
        stack.append(prometheus)
        prometheus.wait_for_targets_up("mirrorgate")
        started_at = time.time()
        httpx.post(
            f"{gateway.url}/admin/rollouts/{ROUTE}/start", json={}, timeout=10
        ).raise_for_status()
        traffic = Traffic(gateway.url)
        traffic.start()
        stack.append(traffic)
        yield Scene(prometheus, gateway, traffic, started_at)
    finally:
        for part in reversed(stack):  # traffic first, then Prometheus, the gateway, the mock
            if isinstance(part, Process):
                part.terminate()
            else:
                part.stop()


NO_EXPERIMENT_YET = "mirrorgate-experiments"
"""The scene runs no A/B experiment and posts no outcomes, so the Experiments dashboard's
queries have nothing to return here: they are parsed by tests/grafana and wait for a scene with
an experiment."""


def test_every_dashboard_query_returns_data(scene: Scene) -> None:
    pending = {q.key: q for q in panel_queries() if q.dashboard != NO_EXPERIMENT_YET}

    def all_have_data() -> bool:
        for key, query in list(pending.items()):
            if has_finite_value(scene.run(query)):
                del pending[key]
        return not pending

    deadline_s = 60
    start = time.monotonic()
    while not all_have_data() and time.monotonic() - start < deadline_s:
        time.sleep(0.5)  # polling Prometheus with a deadline; not synchronisation by sleep
    assert not scene.traffic.errors[:5]
    assert not pending, "panels without data:\n" + "\n".join(
        f"{q.dashboard} / {q.panel} [{q.ref}]: {substitute(q.expr, scene.variables())}"
        for q in pending.values()
    )


def test_variables_list_the_routes_and_targets(scene: Scene) -> None:
    def label_values(label: str, match: str) -> set[str]:
        return set(scene.prometheus.api(f"label/{label}/values", **{"match[]": match}))

    wait_until(
        lambda: label_values("target", f'mirrorgate_requests_total{{route=~"{ROUTE}"}}')
        == set(TARGETS),
        timeout_s=30,
        what="every target scraped",
    )
    for board in load_dashboards():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        for name in ("route", "target"):
            # label_values(<selector>, <label>) is Grafana's call of this API
            selector, _, label = variables[name]["definition"][
                len("label_values(") : -1
            ].rpartition(", ")
            values = label_values(label, substitute(selector, {"route": ROUTE}))
            assert values == ({ROUTE} if name == "route" else set(TARGETS)), board["uid"]
            nothing = label_values(label, substitute(selector, {"route": "no-such-route"}))
            assert nothing == (set() if name == "target" else {ROUTE})


def test_a_variable_matching_nothing_gives_empty_panels_not_errors(scene: Scene) -> None:
    wait_until(
        lambda: has_finite_value(scene.prometheus.query("sum(mirrorgate_requests_total)")),
        what="traffic scraped",
    )
    checked = 0
    for query in panel_queries():
        for variable, nowhere in (("$route", "no-such-route"), ("$target", "no-such-model")):
            if variable not in query.expr:
                continue
            # Prometheus answers `success` (scene.run fails the test on an error) with no series.
            assert scene.run(query, **{variable[1:]: nowhere}) == [], (query.key, variable)
            checked += 1
    assert checked > 40
