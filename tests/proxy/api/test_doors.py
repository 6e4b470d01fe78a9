"""The checks of state-changing admin and webhook calls (proxy/api/doors.py): `Host`, `Origin`
and a JSON body, token or not; admin reads check the `Host` too, other reads stay open to any."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from proxy.api import StateChangeGuard
from proxy.api.doors import split_host
from proxy.config import ConfigError, parse_config
from tests.conftest import InProcessGateway

StartGateway = Callable[..., InProcessGateway]
TOKEN = "t0ken-for-doors"
AUTH = {"authorization": f"Bearer {TOKEN}"}
LOCAL = "http://127.0.0.1:8080"
UNKNOWN_ACTION = "/admin/rollouts/nope/start"  # 404 once past the doors: nothing can change


def guard(**server: object) -> StateChangeGuard:
    doc = {
        "server": server,
        "models": {"m": {"provider": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "x"}},
        "routes": {"r": {"primary": "m"}},
    }
    return StateChangeGuard(parse_config(yaml.safe_dump(doc), env={"MIRRORGATE_ADMIN_TOKEN": "t"}))


def test_host_values_are_split_into_name_and_port() -> None:
    assert split_host("LocalHost:8080", 80) == ("localhost", 8080)
    assert split_host("example.org", 443) == ("example.org", 443)
    assert split_host("[::1]:9", 80) == ("[::1]", 9)
    assert split_host("[::1]", 80) == ("[::1]", 80)
    for bad in ("", ":80", "[::1", "[::1]x", "a:b", "a:123456", "[]:80"):
        assert split_host(bad, 80) is None, bad


def test_loopback_names_pass_only_on_the_port_the_connection_reached() -> None:
    doors = guard()
    local = ("127.0.0.1", 8080)
    for name in ("127.0.0.1", "localhost", "[::1]"):
        assert doors.allows((name, 8080), local)
        assert not doors.allows((name, 8081), local)  # an Origin: a page on another port
        # A Host: `kubectl port-forward 9000:8080` sends its own port; no rebound page sends it.
        assert doors.allows((name, 9000), local, any_loopback_port=True)
        assert not doors.allows(("rebound.example", 8080), local, any_loopback_port=True)
    assert doors.allows(("10.1.2.3", 8080), ("10.1.2.3", 8080))  # the address it reached
    assert not doors.allows(("rebound.example", 8080), local)
    assert not doors.allows(("localhost", 8080), None)


def test_external_url_and_allowed_hosts_add_names() -> None:
    doors = guard(
        host="0.0.0.0",
        external_url="https://gw.example.org",
        allowed_hosts=["Mirrorgate.NS.svc", "am-target:9000", "[fd00::1]:8080"],
    )
    local = ("10.0.0.5", 8080)
    assert doors.allows(("gw.example.org", 443), local)
    assert not doors.allows(("gw.example.org", 8080), local)  # external_url names its port
    assert doors.allows(("mirrorgate.ns.svc", 8080), local)  # no port named: any port
    assert doors.allows(("mirrorgate.ns.svc", 1234), local)
    assert doors.allows(("am-target", 9000), local)
    assert not doors.allows(("am-target", 8080), local)
    assert doors.allows(("[fd00::1]", 8080), local)
    assert not doors.allows(("0.0.0.0", 8080), local)  # a wildcard listen address is no name


def test_allowed_hosts_must_be_bare_names() -> None:
    for bad in ("http://gw.example.org", "gw.example.org/admin", "a b", "gw:port"):
        with pytest.raises(ConfigError) as refused:
            guard(allowed_hosts=[bad])
        assert "server.allowed_hosts" in str(refused.value), bad
    with pytest.raises(ConfigError, match=r"server\.external_url"):
        guard(external_url="gw.example.org")


def test_a_state_change_under_another_host_is_refused_even_with_the_token(
    start_gateway: StartGateway,
) -> None:
    gw = start_gateway(env={"MIRRORGATE_ADMIN_TOKEN": TOKEN})
    with gw.client(base_url=LOCAL, headers=AUTH) as client:
        assert client.post(UNKNOWN_ACTION, json={}).status_code == 404
        for host in ("rebound.example:8080", "127.0.0.1.nip.io:8080", ""):
            refused = client.post(UNKNOWN_ACTION, json={}, headers={"host": host})
            assert refused.status_code == 403, host
            assert "not a name of this gateway" in refused.json()["error"]["message"]
        hook = client.post("/hooks/alertmanager", json={}, headers={"host": "rebound.example"})
        assert hook.status_code == 403
        # `kubectl port-forward 9000:8080` sends its own local port.
        assert (
            client.post(UNKNOWN_ACTION, json={}, headers={"host": "localhost:9000"}).status_code
            == 404
        )
        # Admin reads show rule diffs and rollout reasons: a rebound page must not read them.
        rebound_read = client.get("/admin/rules", headers={"host": "rebound.example:8080"})
        assert rebound_read.status_code == 403
        assert client.get("/admin/rules").status_code == 200
        # Other reads answer whatever the Host: Prometheus and the kubelet send the pod's address.
        assert client.get("/metrics", headers={"host": "10.9.8.7:8080"}).status_code == 200
        assert client.get("/readyz", headers={"host": "10.9.8.7:8080"}).status_code in (200, 503)


def test_a_foreign_origin_is_refused_and_the_own_one_passes(start_gateway: StartGateway) -> None:
    gw = start_gateway()  # no token: loopback, open
    with gw.client(base_url=LOCAL) as client:
        for origin in ("https://evil.example", "null", "http://localhost:9999", "file://"):
            refused = client.post(UNKNOWN_ACTION, json={}, headers={"origin": origin})
            assert refused.status_code == 403, origin
            assert "Origin" in refused.json()["error"]["message"]
        own = client.post(UNKNOWN_ACTION, json={}, headers={"origin": "http://localhost:8080"})
        assert own.status_code == 404


def test_a_state_change_must_be_declared_json(start_gateway: StartGateway) -> None:
    gw = start_gateway()
    with gw.client(base_url=LOCAL) as client:
        shapes = {
            "text/plain": b'{"reason": "x"}',
            "application/x-www-form-urlencoded": b"reason=x",
            "multipart/form-data; boundary=b": b"--b--",
            "": b"",
        }
        for content_type, body in shapes.items():
            headers = {"content-type": content_type} if content_type else {}
            refused = client.post(UNKNOWN_ACTION, content=body, headers=headers)
            assert refused.status_code == 415, content_type
            assert "application/json" in refused.json()["error"]["message"]
        charset = {"content-type": "Application/JSON; charset=utf-8"}
        assert client.post(UNKNOWN_ACTION, content=b"{}", headers=charset).status_code == 404
