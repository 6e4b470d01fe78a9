"""The proxied endpoints: each path, its wire format, where it goes upstream."""

from __future__ import annotations

from proxy.core.endpoints import ENDPOINTS


def test_every_endpoint_is_keyed_by_the_path_clients_call() -> None:
    assert set(ENDPOINTS) == {
        "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses",
        "/v1/messages",
    }  # fmt: skip
    assert all(path == endpoint.path for path, endpoint in ENDPOINTS.items())
    assert len({e.name for e in ENDPOINTS.values()}) == len(ENDPOINTS)


def test_only_messages_speaks_anthropic_and_its_upstream_path_keeps_v1() -> None:
    wires = {e.name: e.wire for e in ENDPOINTS.values()}
    assert wires.pop("messages") == "anthropic"
    assert set(wires.values()) == {"openai"}
    # OpenAI base URLs end in /v1, Anthropic's are bare hosts.
    assert ENDPOINTS["/v1/messages"].upstream_path == "/v1/messages"
    assert ENDPOINTS["/v1/chat/completions"].upstream_path == "/chat/completions"


def test_streaming_and_the_usage_option() -> None:
    assert not ENDPOINTS["/v1/embeddings"].streams
    asks_for_usage = {e.name for e in ENDPOINTS.values() if e.usage_option}
    # Only chat and legacy completions report usage in a stream when asked to.
    assert asks_for_usage == {"chat.completions", "completions"}
    assert {e.operation for e in ENDPOINTS.values()} == {"chat", "text_completion", "embeddings"}
