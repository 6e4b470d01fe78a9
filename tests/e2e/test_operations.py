"""Business operations end to end: the official openai and anthropic SDKs call a real `mirrorgate
serve` process with `extra_headers={"x-mirrorgate-operation": ...}`, the application posts the
operation's outcomes, and the admin summary and /metrics say what it cost and how it ended."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.conftest import wait_until
from tests.e2e.conftest import GatewayProcess

APP_TOKEN = "e2e-outcome-app-token-0123456789"
ADMIN_TOKEN = "e2e-outcome-admin-token"
ENV = {"MIRRORGATE_FEEDBACK_TOKENS": APP_TOKEN, "MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN}
OPERATION = "support-ticket 8812/e2e"


@pytest.fixture
def gateway(tmp_path: Path, mock_process: str) -> Iterator[GatewayProcess]:
    price = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    config = {
        "store": {"url": f"sqlite:///{tmp_path / 'ops.db'}", "bodies": "none"},
        "models": {
            "echo": {"provider": "openai", "base_url": mock_process + "/v1", "model": "echo",
                     "price": price},
            "broken": {"provider": "openai", "base_url": mock_process + "/v1", "model": "broken",
                       "price": price},
            "claude": {"provider": "anthropic", "base_url": mock_process, "model": "echo",
                       "price": price},
        },
        "routes": {
            "classify": {"primary": "broken", "fallback": "echo"},
            "answer": {"primary": "claude", "operation_field": "metadata.user_id"},
        },
    }  # fmt: skip
    process = GatewayProcess(config, tmp_path, env=ENV)
    yield process
    process.terminate()


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_an_operation_of_openai_and_anthropic_calls_is_costed_and_its_outcomes_counted(
    gateway: GatewayProcess,
) -> None:
    header = {"x-mirrorgate-operation": OPERATION}
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as oai:
        classified = oai.chat.completions.with_raw_response.create(
            model="classify", messages=[{"role": "user", "content": "Where is my parcel?"}],
            extra_headers=header,
        )  # fmt: skip
    assert classified.headers["x-mirrorgate-arm"] == "fallback"  # broken primary, tried again
    with anthropic.Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude:
        answered = claude.messages.with_raw_response.create(
            model="answer", max_tokens=64, extra_headers=header,
            messages=[{"role": "user", "content": "Answer the customer."}],
        )  # fmt: skip
        assert answered.parse().content
        # The route's body field names the operation when no header does.
        claude.messages.create(
            model="answer", max_tokens=64, metadata={"user_id": "by-body-field"},
            messages=[{"role": "user", "content": "hello"}],
        )  # fmt: skip
        with pytest.raises(anthropic.BadRequestError, match="x-mirrorgate-operation"):
            claude.messages.create(
                model="answer", max_tokens=8, messages=[{"role": "user", "content": "x"}],
                extra_headers={"x-mirrorgate-operation": "x" * 129},
            )  # fmt: skip
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        app = {"authorization": f"Bearer {APP_TOKEN}"}
        body = {"operation_id": OPERATION, "completed": True, "corrected": False, "value": 42.0}
        posted = http.post("/v1/outcomes", json=body, headers=app)
        assert posted.status_code == 201, posted.text
        assert posted.json()["recorded"] == ["completed", "corrected", "value"]
        # The end user's UI holds only an answer's signed token: that is enough for its operation.
        token = answered.headers["x-mirrorgate-feedback-token"]
        adopted = http.post("/v1/outcomes", json={"operation_id": OPERATION, "adopted": True},
                            headers={"x-mirrorgate-feedback-token": token})  # fmt: skip
        assert adopted.status_code == 201, adopted.text
        again = http.post("/v1/outcomes", json=body, headers=app)
        assert again.json()["duplicates"] == ["completed", "corrected", "value"]
        admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        url = "/admin/operations/" + OPERATION.replace(" ", "%20").replace("/", "%2F")
        summary = wait_until(
            lambda: (s := http.get(url, headers=admin).json())["calls"] == 3 and s,
            what="the operation's three calls",
        )
        assert (summary["route"], summary["routes"]) == ("classify", ["classify", "answer"])
        assert (summary["requests"], summary["fallbacks"], summary["errors"]) == (2, 1, 0)
        assert summary["cost_usd"] > 0 and summary["latency_s"] > 0
        assert set(summary["outcomes"]) == {"completed", "corrected", "value", "adopted"}
        by_body = http.get("/admin/operations/by-body-field", headers=admin).json()
        assert by_body["route"] == "answer" and by_body["calls"] == 1
        metrics = http.get("/metrics").text
    labels = {"route": "classify", "arm": "primary"}
    assert metric(metrics, "mirrorgate_operations_total", **labels, outcome="completed") == 1
    assert metric(metrics, "mirrorgate_operations_total", **labels, outcome="not_corrected") == 1
    assert metric(metrics, "mirrorgate_operations_total", **labels, outcome="adopted") == 1
    assert metric(metrics, "mirrorgate_operation_cost_usd_count", **labels) == 1
    observed = metric(metrics, "mirrorgate_operation_cost_usd_sum", **labels)
    assert observed == pytest.approx(summary["cost_usd"])
