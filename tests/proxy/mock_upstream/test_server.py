"""Running the mock: a real uvicorn on a free port, paced streams, clean start and stop."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import threading
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest

from proxy.mock_upstream.app import create_app
from proxy.mock_upstream.behavior import BehaviorError, parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer, serve
from tests.conftest import wait_until

if TYPE_CHECKING:  # the SDKs load on first use (tests/sdk_imports.py)
    from openai.types.chat import ChatCompletionMessageParam

CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello"}]}


async def body_messages(behavior: dict[str, Any], request: dict[str, Any]) -> list[bytes]:
    """Drive the ASGI app directly and return every body message it sends."""
    app = create_app(parse_behavior(behavior))
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(b"content-type", b"application/json")],
    }
    incoming = [{"type": "http.request", "body": httpx.Request("POST", "/", json=request).read()}]
    sent: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.Event().wait()  # as a server: the client stays until the answer ends
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(message.get("body", b""))

    await app(scope, receive, send)
    return sent


def test_port_zero_binds_a_free_port_and_reports_it() -> None:
    with MockUpstreamServer() as first, MockUpstreamServer() as second:
        assert first.port > 0 and second.port > 0 and first.port != second.port
        assert first.url == f"http://127.0.0.1:{first.port}"
        assert httpx.get(first.url + "/healthz").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(first.url + "/healthz")


def test_stop_ends_serving_without_waiting_for_uvicorns_next_tick() -> None:
    server = MockUpstreamServer()
    server._server.tick_s = 3600.0  # no tick comes while the test runs: only the wake-up ends
    server.start()  # the wait between two
    wait_until(lambda: server._server._exit_asked is not None, what="the main loop waiting")
    stopping = threading.Thread(target=server.stop, daemon=True)
    stopping.start()
    stopping.join(15)
    assert not stopping.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/healthz")


def test_a_behaviour_file_path_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("default:\n  answer: {type: fixed, text: pong}\n")
    with MockUpstreamServer(path) as server:
        body = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}
        reply = httpx.post(server.url + "/v1/chat/completions", json=body).json()
    assert reply["choices"][0]["message"]["content"] == "pong"


def test_a_taken_port_fails_to_start_with_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match="failed to start"):
            MockUpstreamServer(port=port).start()


def test_serve_refuses_a_bad_behaviour_file_before_listening(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("default: {tokens_per_second: fast}\n")
    with pytest.raises(BehaviorError, match=r"default\.tokens_per_second"):
        serve("127.0.0.1", 0, str(bad))


@pytest.mark.anyio
async def test_unpaced_streams_are_one_write_and_paced_ones_event_by_event() -> None:
    fast = await body_messages({}, CHAT)
    paced = await body_messages({"default": {"ttft_ms": 0.01, "tokens_per_second": 1e6}}, CHAT)
    assert b"".join(fast).count(b"data: ") == b"".join(paced).count(b"data: ") > 10
    assert len([m for m in fast if m]) == 1
    assert len([m for m in paced if m]) == b"".join(paced).count(b"data: ")


def test_paced_stream_has_the_same_text_over_a_real_socket() -> None:
    behavior = parse_behavior({"default": {"ttft_ms": 1, "tokens_per_second": 5000}})
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
    with (
        MockUpstreamServer(behavior) as server,
        openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0) as client,
    ):
        chunks = list(client.chat.completions.create(model="m", messages=messages, stream=True))
        whole = client.chat.completions.create(model="m", messages=messages)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content


@pytest.mark.e2e  # the command as a real process: its start, its line, its socket
def test_the_command_prints_one_line_with_both_base_urls_once_listening() -> None:
    # `--port 0`: the line carries the port really bound, so a script can read it.
    command = [sys.executable, "-m", "proxy.cli", "mock-upstream", "--port", "0"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            found = re.fullmatch(
                r"mirrorgate mock-upstream listening on (http://127\.0\.0\.1:(\d+)) "
                r"\(OpenAI base_url (\S+), Anthropic base_url (\S+)\)",
                line,
            )
            assert found is not None, line
            url, _, openai_url, anthropic_url = found.groups()
            assert (openai_url, anthropic_url) == (url + "/v1", url)
            body = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}
            answer = httpx.post(openai_url + "/chat/completions", json=body, timeout=10)
            assert answer.status_code == 200
        finally:
            process.terminate()
            process.wait(timeout=10)
