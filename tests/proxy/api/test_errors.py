"""One translation of errors into answers on the FastAPI side: routers raise; a store outage is
503; a bug in a handler is a 500 in the OpenAI format, logged with its traceback and counted under
component="api". Driven in process through the gateway's ASGI app."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from proxy.api.errors import INTERNAL_ERROR_MESSAGE
from proxy.app.gateway import Gateway
from proxy.core.records import Arm
from proxy.store.errors import StoreUnavailableError
from tests.conftest import gateway_config, seed_sqlite
from tests.proxy.api.test_rollouts import rollout_config
from tests.proxy.store.test_exchanges import make_record


@pytest.fixture
def gateway(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Gateway]:
    seed_sqlite(f"sqlite:///{tmp_path / 'api.db'}", migrated_sqlite)
    config = gateway_config(
        "http://127.0.0.1:9", f"sqlite:///{tmp_path / 'api.db'}", rollout_config()
    )
    built = Gateway(config, registry=CollectorRegistry())
    built.store.migrate()
    yield built
    built.store.close()


def call(gateway: Gateway, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=gateway.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(send())


def internal_errors(gateway: Gateway) -> float:
    value = gateway.registry.get_sample_value(
        "mirrorgate_internal_errors_total", {"component": "api"}
    )
    return value or 0.0


def raising(error: Exception) -> Any:
    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise error

    return fail


def test_a_bug_in_a_handler_is_a_counted_and_logged_500(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-not-for-the-client"
    monkeypatch.setattr(
        gateway.rollouts.store, "recent_verdicts", raising(RuntimeError(f"a bug near {secret}"))
    )
    response = call(gateway, "GET", "/admin/rollouts/bot/verdicts")
    assert response.status_code == 500
    assert response.json() == {
        "error": {
            "message": INTERNAL_ERROR_MESSAGE, "type": "server_error", "param": None,
            "code": None,
        }
    }  # fmt: skip
    assert secret not in response.text  # the exception stays in the log
    assert internal_errors(gateway) == 1
    (logged,) = [r for r in caplog.records if r.name == "mirrorgate.api"]
    assert logged.exc_info is not None and secret in caplog.text
    assert logged.getMessage() == "GET /admin/rollouts/bot/verdicts failed"
    # The next call is served as usual.
    assert call(gateway, "GET", "/admin/rollouts").status_code == 200


def test_a_client_gone_mid_body_is_no_bug(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    # What the feedback handler hears when the client leaves, or its body times out (408).
    async def gone() -> int:
        sent: list[Any] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {
            "type": "http", "method": "POST", "path": "/v1/feedback", "raw_path": b"/v1/feedback",
            "query_string": b"", "root_path": "", "scheme": "http", "http_version": "1.1",
            "headers": [(b"host", b"gw"), (b"content-type", b"application/json"),
                        (b"content-length", b"100")],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
        }  # fmt: skip
        await gateway.app(scope, receive, send)
        return int(sent[0]["status"])

    assert asyncio.run(gone()) == 400  # an answer nobody reads; the server drops it
    assert internal_errors(gateway) == 0
    assert not [r for r in caplog.records if r.name == "mirrorgate.api"]


def test_a_store_outage_is_503_and_no_bug(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    down = StoreUnavailableError("reading verdicts: OperationalError: database is locked")
    monkeypatch.setattr(gateway.rollouts.store, "recent_verdicts", raising(down))
    read = call(gateway, "GET", "/admin/rollouts/bot/verdicts")
    assert read.status_code == 503
    assert read.json()["error"]["type"] == "server_error"
    assert read.json()["error"]["message"] == f"the store cannot be read: {down}"

    monkeypatch.setattr(gateway.rollouts.store, "load", raising(down))
    act = call(gateway, "POST", "/admin/rollouts/bot/start", json={})
    assert act.status_code == 503
    assert act.json()["error"]["message"] == f"nothing changed: {down}"
    assert call(gateway, "GET", "/admin/rollouts").json()["store_reachable"] is False
    assert internal_errors(gateway) == 0


def test_an_illegal_action_is_409_naming_the_phase(gateway: Gateway) -> None:
    response = call(gateway, "POST", "/admin/rollouts/bot/pause", json={})
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["phase"] == "pending" and error["type"] == "invalid_request_error"


def test_feedback_during_an_outage_is_503_and_a_feedback_bug_is_500(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = make_record(route="bot", target="rule-follower", arm=Arm.PRIMARY)
    gateway.recent(served)
    body = {"request_id": served.request_id, "score": 5}
    down = StoreUnavailableError("storing feedback: OperationalError: database is locked")
    monkeypatch.setattr(gateway.feedback.feedback, "add", raising(down))
    refused = call(gateway, "POST", "/v1/feedback", json=body)
    assert refused.status_code == 503
    assert refused.json()["error"]["message"] == (
        f"the store is unavailable; send the feedback again: {down}"
    )
    assert internal_errors(gateway) == 0

    monkeypatch.setattr(gateway.feedback.feedback, "add", raising(TypeError("a bug")))
    broken = call(gateway, "POST", "/v1/feedback", json=body)
    assert broken.status_code == 500
    assert broken.json()["error"]["message"] == INTERNAL_ERROR_MESSAGE
    assert internal_errors(gateway) == 1


def test_gateway_errors_keep_their_own_answers(gateway: Gateway) -> None:
    unknown = call(gateway, "GET", "/admin/rollouts/nonesuch")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"] == "no route 'nonesuch'"
    not_json = call(gateway, "POST", "/v1/feedback", content=b"x", headers={"content-type": "a/b"})
    assert not_json.status_code == 415
    assert internal_errors(gateway) == 0


def test_a_parameter_fastapi_cannot_validate_is_a_400_in_the_openai_format(
    gateway: Gateway,
) -> None:
    """Found by tests/hostile/test_fuzz_endpoints.py: FastAPI answered its own 422."""
    for limit in ("", "abc", "1.5"):
        answer = call(gateway, "GET", f"/admin/rollouts/bot/verdicts?limit={limit}")
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith("query limit: ")


def test_a_path_no_route_matches_is_a_404_in_the_openai_format(gateway: Gateway) -> None:
    """Found by tests/hostile/test_fuzz_endpoints.py: Starlette answered {"detail": ...}."""
    answer = call(gateway, "POST", "/admin/rollouts/a/b/start", json={})
    assert answer.status_code == 404
    assert answer.json()["error"]["message"] == "no such path: /admin/rollouts/a/b/start"
    wrong_method = call(gateway, "DELETE", "/admin/routes")
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "GET"
    assert "Method Not Allowed" in wrong_method.json()["error"]["message"]


def test_an_unknown_path_or_method_answers_in_the_wire_format_of_its_family(
    gateway: Gateway,
) -> None:
    """Not FastAPI's `{"detail": "Not Found"}`, which looks like an upstream 404 passed on."""
    openai = call(gateway, "GET", "/v1/nothing-here")
    assert openai.status_code == 404
    assert set(openai.json()["error"]) == {"message", "type", "param", "code"}
    anthropic = call(gateway, "POST", "/v1/messages/count_tokens", json={})
    assert anthropic.status_code == 404
    assert anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["message"] == "no such path: /v1/messages/count_tokens"
    admin = call(gateway, "GET", "/admin/nothing")
    assert admin.status_code == 404 and "detail" not in admin.json()


def test_a_proxied_endpoint_asked_with_another_method_is_a_405_with_allow(
    gateway: Gateway,
) -> None:
    for method in ("GET", "PUT", "DELETE"):
        chat = call(gateway, method, "/v1/chat/completions")
        assert chat.status_code == 405 and chat.headers["allow"] == "POST"
        assert (
            chat.json()["error"]["message"] == f"{method} /v1/chat/completions: Method Not Allowed"
        )
    messages = call(gateway, "GET", "/v1/messages")
    assert messages.status_code == 405 and messages.headers["allow"] == "POST"
    assert messages.json()["type"] == "error"
    assert messages.json()["error"]["type"] == "invalid_request_error"
    assert internal_errors(gateway) == 0


def test_metrics_carry_no_created_series(gateway: Gateway) -> None:
    """Every counter and histogram would have a `_created` twin that no dashboard reads."""
    call(gateway, "POST", "/v1/chat/completions", json={"model": "nope"})  # counts a rejection
    exposition = call(gateway, "GET", "/metrics").text
    assert 'mirrorgate_rejected_requests_total{endpoint="chat.completions",status="404"}' in (
        exposition
    )
    assert "_created" not in exposition
