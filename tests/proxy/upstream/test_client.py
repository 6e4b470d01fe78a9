"""The headers an upstream model gets (proxy/upstream/client.py): its own key in place of the
client's, the client's credentials only to a model that opts in, never a cookie."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import ModelSpec
from proxy.upstream import UpstreamClient

PRIMARY_ORIGIN = "https://api.example.com:443"
CLIENT = [
    (b"Authorization", b"Bearer client-key"),
    (b"x-api-key", b"client-anthropic-key"),
    (b"api-key", b"client-azure-key"),
    (b"Cookie", b"session=browser-secret"),
    (b"x-user-id", b"u1"),
    (b"x-mirrorgate-rule-version", b"v2"),
    (b"content-type", b"application/json"),
]


def client(base_url: str = "https://api.example.com/v1", **spec: Any) -> UpstreamClient:
    model = ModelSpec(provider="openai", base_url=base_url, model="m", **spec)
    return UpstreamClient("m", model, env={"KEY": "own-key"})


def sent(upstream: UpstreamClient, credentials_for: str | None = PRIMARY_ORIGIN) -> dict[str, str]:
    return {k.decode().lower(): v.decode() for k, v in upstream.headers(CLIENT, credentials_for)}


def test_a_model_with_its_own_key_never_sends_the_clients() -> None:
    headers = sent(client(api_key_env="KEY"))
    assert headers["authorization"] == "Bearer own-key"
    assert "x-api-key" not in headers and "api-key" not in headers and "cookie" not in headers
    assert headers["x-user-id"] == "u1" and "x-mirrorgate-rule-version" not in headers


def test_without_a_key_or_an_opt_in_a_model_sends_no_credentials() -> None:
    # The default is none at all, even on the very origin the client's credentials were meant for.
    for url in ("https://api.example.com/v1", "https://API.example.com:443/v1",
                "https://other.example.com/v1"):  # fmt: skip
        headers = sent(client(url))
        assert not {"authorization", "x-api-key", "api-key", "cookie"} & set(headers), url
        assert headers["x-user-id"] == "u1"
    assert "authorization" not in sent(client(pass_client_key=False))


def test_pass_client_key_true_forwards_the_clients_credentials_on_client_calls_only() -> None:
    for url in ("https://api.example.com/v1", "https://other.example.com/v1"):
        opted_in = sent(client(url, pass_client_key=True))
        assert opted_in["authorization"] == "Bearer client-key", url
        assert opted_in["x-api-key"] == "client-anthropic-key"
        assert opted_in["api-key"] == "client-azure-key"
        assert "cookie" not in opted_in
    # The judge's and replays' calls carry no client's credentials, opted in or not.
    assert "authorization" not in sent(client(pass_client_key=True), credentials_for=None)


def test_an_own_key_and_pass_client_key_true_exclude_each_other() -> None:
    with pytest.raises(ValueError, match="exclude each other"):
        client(api_key_env="KEY", pass_client_key=True)
    assert (
        client(api_key_env="KEY", pass_client_key=False).passes_client_key(PRIMARY_ORIGIN) is False
    )


def test_origin_spells_out_the_port() -> None:
    assert client("http://127.0.0.1:9999/v1").origin == "http://127.0.0.1:9999"
    assert client("http://Gateway.local/v1").origin == "http://gateway.local:80"
    assert client("https://[::1]/v1").origin == "https://[::1]:443"
    assert client("https://[::1]:8443").origin == "https://[::1]:8443"
