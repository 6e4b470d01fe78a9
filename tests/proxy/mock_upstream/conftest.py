"""One real mock upstream for this directory, and SDK clients pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer
from tests.conftest import TLS_CONTEXT

RULE_FOLLOWER = {
    "type": "regex_from_system",
    "pattern": r"max_weight\s*=\s*(\d+)",
    "template": '{"max_weight": {1}}',
    "default": '{"max_weight": null}',
}

BEHAVIOR: dict[str, Any] = {
    "default": {"answer": {"type": "echo", "answer_tokens": 40}, "stream_chunk_tokens": 3},
    "models": {
        "follower": {"answer": RULE_FOLLOWER},
        "stale": {"answer": '{"max_weight": 100}'},
        "cached": {"cached_tokens": 3},
        "silent": {"usage": False},
        "down": {"error": {"status": 503}},
        "limited": {"error": {"status": 429, "message": "slow down"}},
        "overloaded": {"error": {"status": 529}},
        "every-fifth": {"error": {"status": 500, "rate": 0.2}},
        "junk": {"garbage": {}},
        "cut": {"disconnect_mid_stream": {"after_chunks": 3}},
        "broken": {"malformed_chunk": {"after_chunks": 2, "data": "{oops"}},
        "reset": {"reset": {}},
        "hang": {"timeout": {}},
        "late": {"timeout": {"stall_s": 0.05}},
        "slow": {"latency_ms": 600_000},
    },
}


@pytest.fixture(scope="session")
def mock_server() -> Iterator[MockUpstreamServer]:
    with MockUpstreamServer(parse_behavior(BEHAVIOR)) as server:
        yield server


@pytest.fixture
def oai(mock_server: MockUpstreamServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=mock_server.url + "/v1", api_key="sk-test", max_retries=0,
        http_client=openai.DefaultHttpxClient(verify=TLS_CONTEXT),
    ) as c:  # fmt: skip
        yield c


@pytest.fixture
def claude(mock_server: MockUpstreamServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=mock_server.url, api_key="sk-ant", max_retries=0,
        http_client=anthropic.DefaultHttpxClient(verify=TLS_CONTEXT),
    ) as c:  # fmt: skip
        yield c


@pytest.fixture
def raw(mock_server: MockUpstreamServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=mock_server.url, timeout=5, verify=TLS_CONTEXT) as c:
        yield c
