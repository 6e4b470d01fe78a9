"""Hostile: the gateway's doors. Who can change things (an override that opens the admin API, a
web page posting to loopback, a rebound DNS name) and where a client's credentials go (every
arm that calls an upstream). Real sockets on 127.0.0.1, real gateways, `mock-upstream` as the
only fake."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry

from proxy.app.serve import GatewayServer
from proxy.cli.main import main
from proxy.config import load_config, parse_config
from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer
from tests.alerts.alert_factory import ALERTMANAGER_PAYLOAD as ALERT
from tests.conftest import wait_until
from tests.e2e.conftest import free_port

pytestmark = pytest.mark.e2e  # `mirrorgate serve` processes, real servers and raw sockets

TOKEN = "doors-admin-token"
CLIENT_SECRETS = {
    "authorization": "Bearer client-secret-key",
    "x-api-key": "client-anthropic-key",
    "api-key": "client-azure-key",
    "cookie": "session=browser-secret",
}
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key", "cookie")


def raw_request(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, bytes]:
    """One request written byte by byte (the `Host` exactly as given, none when absent), read
    to the server's close: (status, body)."""
    head = f"{method} {path} HTTP/1.1\r\n"
    for name, value in {**headers, "content-length": str(len(body)), "connection": "close"}.items():
        head += f"{name}: {value}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n" + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    response = b"".join(chunks)
    status_line, _, rest = response.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


# --- 1. `serve --host` cannot open the admin API --------------------------------------------------


def _serve(config: Path, *flags: str, token: bool, timeout_s: float = 60) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "MIRRORGATE_ADMIN_TOKEN"}
    if token:
        env["MIRRORGATE_ADMIN_TOKEN"] = TOKEN
    return subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(config), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _config_file(folder: Path, host: str) -> Path:
    doc = {
        "server": {"host": host, "port": 8080},
        "store": {"url": f"sqlite:///{folder / 'gw.db'}"},
        "models": {"m": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}},
        "routes": {"r": {"primary": "m"}},
    }
    path = folder / f"mirrorgate-{host.replace(':', '_')}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.e2e
@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_serve_host_beyond_loopback_without_the_token_refuses_to_start(
    tmp_path: Path, host: str
) -> None:
    config = _config_file(tmp_path, "127.0.0.1")  # the file alone is fine
    process = _serve(config, "--host", host, "--port", str(free_port()), token=False)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1, (out, err)
    assert err.splitlines() == [
        f"mirrorgate: {config}: 1 problem(s)",
        f"  server.admin_token_env: MIRRORGATE_ADMIN_TOKEN must be set when listening on {host} "
        "(the admin API is only open without a token on loopback)",
    ]
    assert not (tmp_path / "gw.db").exists()  # refused before anything started


@pytest.mark.e2e
def test_serve_host_override_with_the_token_starts_and_the_token_holds(tmp_path: Path) -> None:
    config = _config_file(tmp_path, "0.0.0.0")  # the chart's file: valid only with the token
    assert load_config(config, env={"MIRRORGATE_ADMIN_TOKEN": TOKEN}).server.host == "0.0.0.0"
    port = free_port()
    # Listening for real, on loopback only: the override is what is served.
    process = _serve(config, "--host", "127.0.0.1", "--port", str(port), token=True)
    try:

        def ready() -> bool:
            assert process.poll() is None, process.communicate()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout_s=30, what="mirrorgate serve --host 127.0.0.1")
        assert httpx.get(f"http://127.0.0.1:{port}/admin/routes").status_code == 401
        authorized = {"authorization": f"Bearer {TOKEN}"}
        routes = httpx.get(f"http://127.0.0.1:{port}/admin/routes", headers=authorized)
        assert routes.status_code == 200
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert process.returncode == 0


# --- 2. a web page cannot post to the admin API ------------------------------------------------


@pytest.fixture
def rollout_gateway(
    tmp_path: Path, upstream: MockUpstreamServer, migrated_sqlite: Path
) -> Iterator[Callable[..., GatewayServer]]:
    started: list[GatewayServer] = []

    def start(env: dict[str, str]) -> GatewayServer:
        database = tmp_path / f"gw-{len(started)}.db"
        database.write_bytes(migrated_sqlite.read_bytes())
        model = {"provider": "openai", "base_url": upstream.openai_url, "model": "echo"}
        doc = {
            "server": {"port": 0},
            "store": {"url": f"sqlite:///{database}", "flush_interval_ms": 10},
            "models": {"prod": model, "cand": {**model, "model": "cand"}},
            "routes": {
                "bot": {
                    "primary": "prod",
                    "canary": {"model": "cand", "steps": [10, 50], "step_interval_s": 3600,
                               "analysis": {"interval_s": 3600}},
                }
            },
        }  # fmt: skip
        config = parse_config(yaml.safe_dump(doc), env=env)
        gateway = GatewayServer(config, env=env, registry=CollectorRegistry()).__enter__()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


CSRF_SHAPES: list[tuple[str, dict[str, str], bytes, int]] = [
    # A `<form enctype="text/plain">` can spell a JSON object: only the type gives it away.
    ("text/plain form post", {"content-type": "text/plain"}, b'{"reason": "csrf"}', 415),
    ("urlencoded form", {"content-type": "application/x-www-form-urlencoded"}, b"to=x", 415),
    ("multipart form", {"content-type": "multipart/form-data; boundary=x"}, b"--x--\r\n", 415),
    ("bodiless fetch", {}, b"", 415),
    ("JSON type, empty body", {"content-type": "application/json"}, b"", 400),
    ("foreign Origin", {"origin": "https://evil.example"}, b"{}", 403),
    ("sandboxed page (Origin null)", {"origin": "null"}, b"{}", 403),
    ("loopback Origin, other port", {"origin": "http://127.0.0.1:1"}, b"{}", 403),
]


@pytest.mark.parametrize("with_token", [False, True], ids=["tokenless", "token"])
def test_cross_site_and_rebinding_posts_change_nothing(
    rollout_gateway: Callable[..., GatewayServer], with_token: bool
) -> None:
    env = {"MIRRORGATE_ADMIN_TOKEN": TOKEN} if with_token else {}
    gateway = rollout_gateway(env)
    port = gateway.port
    auth = {"authorization": f"Bearer {TOKEN}"} if with_token else {}
    own = {"host": f"127.0.0.1:{port}", **auth}
    json_type = {"content-type": "application/json"}
    status, _ = raw_request(port, "POST", "/admin/rollouts/bot/start", {**own, **json_type}, b"{}")
    assert status == 200

    def state() -> dict[str, Any]:
        status, body = raw_request(port, "GET", "/admin/rollouts/bot", own)
        assert status == 200
        parsed: dict[str, Any] = orjson.loads(body)
        return parsed

    before = state()
    assert before["phase"] == "progressing"
    tried = 0
    for what, headers, body, expected in CSRF_SHAPES:
        for action in ("rollback", "abort", "pause"):
            status, answer = raw_request(
                port, "POST", f"/admin/rollouts/bot/{action}", {**own, **headers}, body
            )
            assert status == expected, (what, action, answer)
            assert orjson.loads(answer)["error"]["message"], what
            tried += 1
    # (`localhost` on another port passes: `kubectl port-forward` sends its own local port, and
    # no browser page can make a request to this port carry it.)
    rebound = ("rebound.example", f"rebound.example:{port}", f"127.0.0.1.nip.io:{port}", "0.0.0.0")
    targets = (
        ("/admin/rollouts/bot/rollback", b"{}"),
        ("/hooks/alertmanager", orjson.dumps(ALERT)),
    )
    for host in rebound:
        for path, body in targets:
            status, answer = raw_request(
                port, "POST", path, {**auth, **json_type, "host": host}, body
            )
            assert status == 403 and b"not a name of this gateway" in answer, (host, path)
            tried += 1
    status, answer = raw_request(
        port, "POST", "/admin/rollouts/bot/rollback", {**auth, **json_type}, b"{}"
    )
    assert status == 403, answer  # no Host at all
    as_text = {**own, "content-type": "text/plain"}
    assert raw_request(port, "POST", "/hooks/alertmanager", as_text, orjson.dumps(ALERT))[0] == 415
    after = state()
    assert (after["phase"], after["revision"]) == (before["phase"], before["revision"])
    assert [t["action"] for t in after["transitions"]] == ["start"]
    assert tried == len(CSRF_SHAPES) * 3 + 8
    # Reads answer under any Host (Prometheus and the kubelet send the pod's address)...
    assert raw_request(port, "GET", "/metrics", {"host": "10.1.2.3:8080"})[0] == 200
    assert raw_request(port, "GET", "/readyz", {"host": "10.1.2.3:8080"})[0] == 200
    # ...and the gateway's own names still act, as the CLI does.
    by_name = {
        **own,
        **json_type,
        "host": f"localhost:{port}",
        "origin": f"http://localhost:{port}",
    }
    status, _ = raw_request(port, "POST", "/admin/rollouts/bot/pause", by_name, b'{"reason": "op"}')
    assert status == 200 and state()["phase"] == "paused"


def test_the_rollout_command_still_drives_a_guarded_gateway(
    rollout_gateway: Callable[..., GatewayServer],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gateway = rollout_gateway({"MIRRORGATE_ADMIN_TOKEN": TOKEN})
    monkeypatch.setenv("MIRRORGATE_ADMIN_TOKEN", TOKEN)
    phases = []
    for action in ("start", "pause", "resume", "abort"):
        assert main(["rollout", action, "bot", "--url", gateway.url]) == 0, capsys.readouterr()
        state = httpx.get(
            f"{gateway.url}/admin/rollouts/bot", headers={"authorization": f"Bearer {TOKEN}"}
        )
        phases.append(state.json()["phase"])
    assert phases == ["progressing", "paused", "progressing", "aborted"]


# --- 3. client credentials go only where the client sent them -------------------------------------


@pytest.fixture(scope="module")
def two_hosts() -> Iterator[tuple[MockUpstreamServer, MockUpstreamServer]]:
    """Two upstreams on two origins (two ports), each setting a cookie on every answer."""
    behavior = parse_behavior({"response_headers": {"set-cookie": "upstream=tracker"}})
    with MockUpstreamServer(behavior) as here, MockUpstreamServer(behavior) as there:
        yield here, there


def _arms_config(here: str, there: str, closed_port: int, database: Path) -> dict[str, Any]:
    def model(url: str, name: str, **more: Any) -> dict[str, Any]:
        return {"provider": "openai", "base_url": f"{url}/v1", "model": name, **more}

    return {
        "server": {"port": 0},
        "store": {"url": f"sqlite:///{database}", "flush_interval_ms": 10},
        "models": {
            "prod": model(here, "prod-m", pass_client_key=True),
            "shadow-b": model(there, "shadow-m"),
            "optin-b": model(there, "optin-m", pass_client_key=True),
            "keyed-b": model(there, "keyed-m", api_key_env="OWN_KEY"),
            "optout-a": model(here, "optout-m"),  # the primary's host is no licence by itself
            "canary-b": model(there, "canary-m"),
            "broken": model(f"http://127.0.0.1:{closed_port}", "broken-m", connect_timeout_s=1),
            "fallback-b": model(there, "fallback-m"),
            "judge-b": model(there, "judge-m"),
        },
        "routes": {
            "shadowed": {
                "primary": "prod",
                "noise_sample": 1.0,
                "shadows": [
                    {"model": m, "sample": 1.0}
                    for m in ("shadow-b", "optin-b", "keyed-b", "optout-a")
                ],
            },
            "canaried": {
                "primary": "prod",
                "canary": {
                    "model": "canary-b",
                    "steps": [100],
                    "step_interval_s": 3600,
                    "sticky": "none",
                    "analysis": {"interval_s": 3600},
                },
            },
            "fallen": {"primary": "broken", "fallback": "fallback-b"},
        },
        "judge": {"model": "judge-b", "sample": 1.0},
    }


def test_credentials_reach_only_the_models_that_opt_in(
    two_hosts: tuple[MockUpstreamServer, MockUpstreamServer],
    tmp_path: Path,
    migrated_sqlite: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here, there = two_hosts
    here.app.recorder.clear()
    there.app.recorder.clear()
    database = tmp_path / "arms.db"
    database.write_bytes(migrated_sqlite.read_bytes())
    doc = _arms_config(here.url, there.url, free_port(), database)
    env = {"OWN_KEY": "gateway-own-key"}
    config = parse_config(yaml.safe_dump(doc), env=env)
    with GatewayServer(config, env=env, registry=CollectorRegistry()) as gateway:
        with httpx.Client(base_url=gateway.url, timeout=10) as client:
            started = client.post("/admin/rollouts/canaried/start", json={})
            assert started.status_code == 200, started.text
            answers = {}
            for route in ("shadowed", "canaried", "fallen"):
                answer = client.post(
                    "/v1/chat/completions",
                    headers=CLIENT_SECRETS,
                    json={"model": route, "messages": [{"role": "user", "content": "hi"}]},
                )
                assert answer.status_code == 200, answer.text
                answers[route] = answer
        assert answers["canaried"].headers["x-mirrorgate-arm"] == "canary"
        assert answers["fallen"].headers["x-mirrorgate-arm"] == "fallback"
        for route, answer in answers.items():  # no arm's cookie reaches the client
            assert "set-cookie" not in answer.headers, route

        def calls() -> dict[str, list[dict[str, str]]]:
            seen: dict[str, list[dict[str, str]]] = {}
            for server, origin in ((here, "here"), (there, "there")):
                for request in server.app.recorder.requests():
                    name = f"{origin}:{request['body']['model']}"
                    seen.setdefault(name, []).append(request["headers"])
            return seen

        expected = {
            "here:prod-m", "here:optout-m", "there:shadow-m", "there:optin-m", "there:keyed-m",
            "there:canary-m", "there:fallback-m", "there:judge-m",
        }  # fmt: skip
        wait_until(lambda: expected <= set(calls()) and len(calls()["here:prod-m"]) >= 2,
                   timeout_s=15, what="every arm called")  # fmt: skip
    seen = calls()

    def credentials(name: str) -> list[dict[str, str]]:
        return [
            {h: headers[h] for h in CREDENTIAL_HEADERS if h in headers} for headers in seen[name]
        ]

    client_keys = {k: v for k, v in CLIENT_SECRETS.items() if k != "cookie"}
    # The primary and its noise floor (the primary asked again): opted in, on the meant host.
    assert credentials("here:prod-m") == [client_keys] * len(seen["here:prod-m"])
    assert credentials("there:optin-m") == [client_keys]  # opted in, on another host
    assert credentials("there:keyed-m") == [{"authorization": "Bearer gateway-own-key"}]
    for name in ("here:optout-m", "there:shadow-m", "there:canary-m", "there:fallback-m",
                 "there:judge-m"):  # fmt: skip
        assert all(found == {} for found in credentials(name)), (name, credentials(name))
    leaked = [
        name for name, requests in seen.items()
        for headers in requests if "session=browser-secret" in str(headers)
    ]  # fmt: skip
    assert leaked == []
    # check-config names every arm that will call without a key, and the opt-in elsewhere.
    config_file = tmp_path / "arms.yaml"
    config_file.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("OWN_KEY", "gateway-own-key")
    assert main(["check-config", str(config_file)]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if "warning: models." in line]
    named = sorted(line.split("warning: ")[1].split(":")[0] for line in warnings)
    assert named == [
        "models.canary-b", "models.fallback-b", "models.judge-b", "models.optin-b.pass_client_key",
        "models.optout-a", "models.shadow-b",
    ]  # fmt: skip
