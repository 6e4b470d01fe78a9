"""The access log and the upstream-failure warnings, heard from a real gateway in process."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from proxy.core import Arm, ExchangeRecord, Status
from proxy.gateway import AccessLog
from tests.conftest import InProcessGateway, wait_until

MESSAGES = [{"role": "user", "content": "a secret sk-abcdefghijklmnop1234"}]
FALLEN = {"routes": {"fallen": {"primary": "broken", "fallback": "echo"}}}


def lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger]


def at_least(caplog: pytest.LogCaptureFixture, n: int) -> list[logging.LogRecord] | None:
    """The access lines once there are `n` (they are written after the answer's last byte)."""
    access = lines(caplog, "mirrorgate.access")
    return access if len(access) >= n else None


def ask(gw: InProcessGateway, model: str, **body: object) -> int:
    payload = {"model": model, "messages": MESSAGES, **body}
    return gw.http.post("/v1/chat/completions", json=payload).status_code


def test_each_answered_request_gets_one_access_line_with_its_fields_and_never_its_body(
    start_gateway: Callable[..., InProcessGateway], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "mirrorgate.access")
    gw = start_gateway()
    assert ask(gw, "echo") == 200
    assert ask(gw, "echo", stream=True) == 200
    plain, streamed = wait_until(lambda: at_least(caplog, 2))
    fields = plain.__dict__
    assert (fields["route"], fields["arm"], fields["target"]) == ("echo", "primary", "echo")
    assert (fields["status"], fields["http_status"], fields["streamed"]) == ("ok", 200, False)
    assert fields["tokens_in"] > 0 and fields["tokens_out"] > 0 and fields["cost_usd"] > 0
    assert fields["duration_ms"] > 0 and fields["ttft_ms"] is None
    assert len(fields["request_id"]) == 32
    assert streamed.__dict__["streamed"] is True and streamed.__dict__["ttft_ms"] > 0
    # Neither the prompt, the answer nor a credential reaches the log.
    assert "sk-abcdef" not in caplog.text and "a secret" not in caplog.text


def test_a_request_refused_before_its_route_gets_a_line_with_what_is_known(
    start_gateway: Callable[..., InProcessGateway], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "mirrorgate.access")
    gw = start_gateway()
    assert ask(gw, "no-such-route") == 404
    not_json = gw.http.post(
        "/v1/chat/completions", content=b"{", headers={"content-type": "text/plain"}
    )
    assert not_json.status_code == 415
    unknown, media = wait_until(lambda: at_least(caplog, 2))
    assert unknown.__dict__["status"] == "refused" and unknown.__dict__["http_status"] == 404
    assert unknown.__dict__["error_class"] == "RouteNotFound"
    assert media.__dict__["http_status"] == 415
    assert media.__dict__["request_id"] == not_json.headers["x-mirrorgate-request-id"]


def test_an_upstream_failure_is_one_warning_with_its_class_and_target_then_the_fallback(
    start_gateway: Callable[..., InProcessGateway], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gw = start_gateway(extra=FALLEN)
    assert ask(gw, "fallen") == 200
    assert ask(gw, "reset") == 502
    wait_until(lambda: at_least(caplog, 2))
    abandoned, failed = lines(caplog, "mirrorgate.upstream")
    assert abandoned.levelno == logging.WARNING and failed.levelno == logging.WARNING
    assert abandoned.__dict__["target"] == "broken" and abandoned.__dict__["http_status"] == 503
    assert "trying the fallback" in abandoned.getMessage()
    assert failed.__dict__["target"] == "reset" and failed.__dict__["status"] == "connect_error"
    assert failed.__dict__["error_class"] in failed.getMessage()
    served, broke = lines(caplog, "mirrorgate.access")
    assert (served.__dict__["arm"], served.__dict__["target"]) == ("fallback", "echo")
    assert broke.__dict__["http_status"] == 502


def record(status: Status = Status.OK, http_status: int = 200) -> ExchangeRecord:
    from datetime import UTC, datetime

    return ExchangeRecord(
        "r1", "bot", "prod", "m", Arm.PRIMARY, "chat.completions", "openai", False,
        datetime.now(UTC), 0.1, None, 0.001, status, http_status,
        request_body="secret body", response_body="secret answer",
    )  # fmt: skip


class Done:
    """The two fields of a finished exchange the access log reads."""

    def __init__(self, rec: ExchangeRecord) -> None:
        self.record, self.final = rec, True


def test_a_sample_keeps_that_share_of_successes_and_every_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "mirrorgate.access")
    draws = iter([0.05, 0.5, 0.95, 0.99])
    log = AccessLog(sample=0.1, draw=lambda: next(draws))
    for _ in range(3):
        log.exchange_finished(Done(record()))  # type: ignore[arg-type]
    log.exchange_finished(Done(record(Status.UPSTREAM_ERROR, 429)))  # type: ignore[arg-type]
    kept = lines(caplog, "mirrorgate.access")
    assert [r.__dict__["http_status"] for r in kept] == [200, 429]
    assert next(draws) == 0.99  # an error draws nothing: it is logged whatever the sample


def test_nothing_is_built_for_a_line_the_level_leaves_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "mirrorgate.access")
    AccessLog().exchange_finished(Done(record()))  # type: ignore[arg-type]
    assert lines(caplog, "mirrorgate.access") == []
