"""The feedback attack of issue 12 and its relatives, against a real gateway on 127.0.0.1.

Issue 12: `/v1/feedback` took posts without a token and `x-mirrorgate-arm: canary` told the
client which answers to "correct"; 71 corrections rolled a healthy canary back in 3 s. Here the
same client is refused without a token (401), slowed beyond its rate (429), and — holding a valid
token — counts at most `max_corrections_per_caller` in the judge's correction rate, so the healthy
canary stays; many honest callers still roll a bad canary back. Plus forged, expired and replayed
tokens, header injection and huge bodies.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.app import GatewayServer
from proxy.core import FeedbackTokens
from proxy.store import FeedbackStore
from tests.conftest import MockUpstreamServer, wait_until

pytestmark = pytest.mark.e2e  # a real uvicorn server on 127.0.0.1 and raw sockets

ROUTE = "bot"
APP_TOKEN = "hostile-app-token-0123456789"
ADMIN = {"MIRRORGATE_ADMIN_TOKEN": "hostile-admin-0123456789"}
ADMIN_AUTH = {"authorization": f"Bearer {ADMIN['MIRRORGATE_ADMIN_TOKEN']}"}
PUBLIC = {"host": "0.0.0.0"}  # a public deploy: nothing open without a token
KEY = "k" * 40
CAP = 5


def canary_config(upstream_url: str, server: dict[str, Any] | None = None) -> dict[str, Any]:
    """A route whose canary (the same echo model: healthy) is judged on corrections alone,
    often, on few answers, and rolled back at the first failing look."""
    analysis = {"interval_s": 0.05, "min_samples": 20, "metrics": ["correction_rate"],
                "failure_limit": 1, "max_corrections_per_caller": CAP}  # fmt: skip
    return {
        "server": {**PUBLIC, **(server or {})},
        "models": {
            "cand": {"provider": "openai", "base_url": upstream_url + "/v1", "model": "echo"}
        },
        "routes": {
            ROUTE: {
                "primary": "echo",
                "canary": {
                    "model": "cand",
                    "steps": [50],
                    "step_interval_s": 3600,
                    "analysis": analysis,
                },
            }
        },
    }


class Client:
    """A client of one gateway: answers with their feedback tokens, feedback, the rollout."""

    def __init__(self, gw: GatewayServer) -> None:
        self.gw = gw
        self.http = httpx.Client(base_url=gw.url, timeout=10)

    def answers(self, n: int) -> list[httpx.Response]:
        out = []
        for i in range(n):
            body = {"model": ROUTE, "messages": [{"role": "user", "content": f"q{i}"}]}
            response = self.http.post("/v1/chat/completions", json=body)
            assert response.status_code == 200
            out.append(response)
        store = self.gw.gateway.store
        wait_until(lambda: store.count(route=ROUTE) >= n, what="the answers written")
        return out

    def feedback(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        return self.http.post("/v1/feedback", json=body, headers=headers)

    def rollout(self) -> dict[str, Any]:
        body: dict[str, Any] = self.http.get(f"/admin/rollouts/{ROUTE}", headers=ADMIN_AUTH).json()
        return body

    def correction_verdicts(self) -> list[dict[str, Any]]:
        url = f"/admin/rollouts/{ROUTE}/verdicts?limit=1000"
        rows = self.http.get(url, headers=ADMIN_AUTH).json()["verdicts"]
        return [v for v in rows if v["metric"] == "correction_rate"]

    def start_rollout(self) -> None:
        self.http.post(
            f"/admin/rollouts/{ROUTE}/start", headers=ADMIN_AUTH, json={}
        ).raise_for_status()


def canary_ones(answers: list[httpx.Response]) -> list[httpx.Response]:
    return [a for a in answers if a.headers["x-mirrorgate-arm"] == "canary"]


def correct(request_id: str) -> dict[str, Any]:
    return {"request_id": request_id, "corrected": True, "correction": "wrong"}


@pytest.fixture
def start(
    start_gateway_server: Callable[..., GatewayServer], upstream: MockUpstreamServer
) -> Iterator[Callable[..., Client]]:
    clients: list[Client] = []

    def started(server: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Client:
        extra = canary_config(upstream.url, server)
        clients.append(Client(start_gateway_server(extra=extra, env={**ADMIN, **(env or {})})))
        return clients[-1]

    yield started
    for client in clients:
        client.http.close()


# --- the attack of the issue --------------------------------------------------------------------


def test_without_a_token_the_attack_is_401_and_the_canary_stays(
    start: Callable[..., Client],
) -> None:
    client = start()
    client.start_rollout()
    answers = canary_ones(client.answers(60))
    statuses = {client.feedback(correct(a.headers["x-mirrorgate-request-id"])).status_code
                for a in answers}  # fmt: skip
    assert statuses == {401}
    assert client.gw.gateway.registry.get_sample_value(
        "mirrorgate_feedback_rejected_total", {"reason": "unauthenticated"}
    ) == len(answers)
    assert client.rollout()["phase"] != "rolled_back"


def test_harvested_signed_tokens_at_full_speed_meet_the_rate_limit(
    start: Callable[..., Client],
) -> None:
    client = start(server={"feedback_rate_per_s": 0.5, "feedback_burst": 10})
    client.start_rollout()
    answers = canary_ones(client.answers(100))
    began = time.monotonic()
    statuses = [
        client.feedback(
            correct(a.headers["x-mirrorgate-request-id"]),
            **{"x-mirrorgate-feedback-token": a.headers["x-mirrorgate-feedback-token"]},
        ).status_code
        for a in answers
    ]
    refilled = (time.monotonic() - began) * 0.5  # the bucket's refill while they were sent
    accepted = statuses.count(201)
    assert 10 <= accepted <= 10 + refilled + 1
    assert statuses.count(429) == len(answers) - accepted
    assert client.rollout()["phase"] != "rolled_back"


def test_a_token_holder_correcting_every_canary_answer_moves_the_rate_by_the_cap_only(
    start: Callable[..., Client],
) -> None:
    client = start(server={"feedback_burst": 1000}, env={"MIRRORGATE_FEEDBACK_TOKENS": APP_TOKEN})
    client.start_rollout()
    answers = canary_ones(client.answers(150))
    assert len(answers) >= 50
    auth = {"authorization": f"Bearer {APP_TOKEN}"}
    for a in answers:  # every canary answer "corrected", as fast as it goes
        assert (
            client.feedback(correct(a.headers["x-mirrorgate-request-id"]), **auth).status_code
            == 201
        )
    # The judge looks every 50 ms: wait for a look that saw every answer and the corrections
    # (or for the rollback that a look without the cap makes: 100% corrected against 0%).
    seen = f"{CAP}/{len(answers)} vs 0/"

    def look_or_rollback() -> dict[str, Any] | None:
        if client.rollout()["phase"] == "rolled_back":
            return {"verdict": "rolled back", "reason": "the healthy canary was rolled back"}
        return next((v for v in client.correction_verdicts() if v["reason"].startswith(seen)),
                    None)  # fmt: skip

    verdict = wait_until(look_or_rollback, what=f"a look counting {seen}")
    assert verdict["reason"].startswith(seen), verdict
    assert all(v["verdict"] != "fail" for v in client.correction_verdicts())
    assert client.rollout()["phase"] != "rolled_back"


def test_honest_corrections_from_many_callers_still_roll_a_bad_canary_back(
    start: Callable[..., Client],
) -> None:
    client = start(server={"feedback_burst": 1000}, env={"MIRRORGATE_FEEDBACK_TOKENS": APP_TOKEN})
    client.start_rollout()
    answers = canary_ones(client.answers(150))
    auth = {"authorization": f"Bearer {APP_TOKEN}"}
    for i, a in enumerate(answers[:40]):  # forty users, one correction each
        body = {**correct(a.headers["x-mirrorgate-request-id"]), "user": f"user-{i}"}
        assert client.feedback(body, **auth).status_code == 201
    state = wait_until(
        lambda: (body := client.rollout())["phase"] == "rolled_back" and body,
        what="the rollback by honest corrections",
    )
    assert state["actor"] == "judge"


# --- tokens --------------------------------------------------------------------------------------


@pytest.fixture
def signed(start: Callable[..., Client]) -> tuple[Client, list[httpx.Response]]:
    client = start(env={"MIRRORGATE_FEEDBACK_SIGNING_KEY": KEY})
    return client, client.answers(3)


def ids(response: httpx.Response) -> tuple[str, str]:
    return response.headers["x-mirrorgate-request-id"], response.headers[
        "x-mirrorgate-feedback-token"
    ]


def test_every_answer_carries_a_plain_token(
    signed: tuple[Client, list[httpx.Response]],
) -> None:
    _, answers = signed
    tokens = [ids(a)[1] for a in answers]
    assert len(set(tokens)) == len(tokens)
    assert all(re.fullmatch(r"mgf1\.[0-9]{10}\.[A-Za-z0-9_-]{43}", t) for t in tokens)


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda rid, tok, other: (other, tok), id="replayed-for-another-request"),
        pytest.param(lambda rid, tok, other: (rid, tok[:-2] + "AA"), id="altered-mac"),
        pytest.param(
            lambda rid, tok, other: (rid, tok.replace("mgf1.", "mgf1.9", 1)), id="moved-expiry"
        ),
        pytest.param(
            lambda rid, tok, other: (
                rid,
                FeedbackTokens(3600, b"another-key-entirely-000000").issue(rid, 1e9 * 2),
            ),
            id="signed-with-another-key",
        ),
        pytest.param(lambda rid, tok, other: (rid, "mgf1.1.x"), id="made-up"),
        pytest.param(lambda rid, tok, other: (rid, tok * 20), id="huge"),
    ],
)
def test_forged_or_replayed_tokens_are_401(
    signed: tuple[Client, list[httpx.Response]], forge: Callable[..., tuple[str, str]]
) -> None:
    client, answers = signed
    (rid, tok), (other, _) = ids(answers[0]), ids(answers[1])
    request_id, token = forge(rid, tok, other)
    response = client.feedback(correct(request_id), **{"x-mirrorgate-feedback-token": token})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert KEY not in response.text


def test_an_expired_token_is_401_and_says_so(
    signed: tuple[Client, list[httpx.Response]],
) -> None:
    client, answers = signed
    rid, _ = ids(answers[0])
    old = FeedbackTokens(60, KEY.encode()).issue(rid, 1_000_000_000.0)  # expired in 2001
    assert old is not None
    response = client.feedback(correct(rid), **{"x-mirrorgate-feedback-token": old})
    assert response.status_code == 401 and "expired" in response.json()["error"]["message"]
    assert (
        client.gw.gateway.registry.get_sample_value(
            "mirrorgate_feedback_rejected_total", {"reason": "expired"}
        )
        == 1
    )


def raw(port: int, request: bytes) -> bytes:
    """Send `request` as is on a new connection; the whole answer (the server closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def feedback_request(body: bytes, *headers: bytes) -> bytes:
    lines = [b"POST /v1/feedback HTTP/1.1", b"host: 127.0.0.1", b"content-type: application/json",
             b"connection: close", b"content-length: %d" % len(body), *headers]  # fmt: skip
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def test_header_injection_gets_nothing_stored(
    signed: tuple[Client, list[httpx.Response]],
) -> None:
    client, answers = signed
    rid, tok = ids(answers[0])
    body = orjson.dumps(correct(rid))
    attempts = [
        # A token with a header smuggled after it: refused by the parser or by the check.
        feedback_request(body, b"x-mirrorgate-feedback-token: " + tok.encode() + b"\rx-a: 1"),
        feedback_request(body, b"x-mirrorgate-feedback-token: " + tok.encode() + b"\x00"),
        # Bytes that are no token at all (latin-1, control characters).
        feedback_request(body, b"x-mirrorgate-feedback-token: mgf1.1.\xff\xfe\x01"),
        feedback_request(body, b"authorization: Bearer \xff" + b"a" * 30),
        # The token is sound, the request id in the body carries a header break.
        feedback_request(
            orjson.dumps(correct(rid + "\r\nx-mirrorgate-arm: canary")),
            b"x-mirrorgate-feedback-token: " + tok.encode(),
        ),
    ]
    for attempt in attempts:
        answer = raw(client.gw.port, attempt)
        status = int(answer.split(b" ", 2)[1])
        assert status in (400, 401), answer[:300]
    assert FeedbackStore(client.gw.gateway.store).query() == []


def test_huge_bodies_without_a_token_are_refused_before_they_are_read(
    signed: tuple[Client, list[httpx.Response]],
) -> None:
    client, answers = signed
    rid, tok = ids(answers[0])
    huge = orjson.dumps({**correct(rid), "correction": "x" * (3 * 1024 * 1024)})
    headers = {"content-type": "application/json"}
    assert client.http.post("/v1/feedback", content=huge, headers=headers).status_code == 401
    with_token = client.http.post(
        "/v1/feedback", content=huge,
        headers={"content-type": "application/json", "x-mirrorgate-feedback-token": tok},
    )  # fmt: skip
    assert with_token.status_code == 413
    # A header the size of a body is a token of nobody.
    response = client.feedback(correct(rid), **{"x-mirrorgate-feedback-token": "A" * 60_000})
    assert response.status_code in (401, 431)
    # The honest post still works after all of it.
    ok = client.feedback(correct(rid), **{"x-mirrorgate-feedback-token": tok})
    assert ok.status_code == 201
