"""Reloading the configuration in process: applied, unchanged, rejected with every problem by key
path, the fixed sections named, hostile files and bodies, and rollout state kept."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from proxy.app.reload import ReloadResult, config_changes
from proxy.config import load_config
from tests.conftest import InProcessGateway, gateway_config, wait_until

TOKEN = "t0ken-for-tests"
AUTH = {"authorization": f"Bearer {TOKEN}"}
ENV = {"MIRRORGATE_ADMIN_TOKEN": TOKEN}

StartGateway = Callable[..., InProcessGateway]


def started(
    start_gateway: StartGateway, tmp_path: Path
) -> tuple[InProcessGateway, Path, dict[str, Any]]:
    """A gateway started from a file (its reload source); the file's document to edit."""
    path = tmp_path / "mirrorgate.yaml"
    gw = start_gateway(env=ENV, source=lambda: load_config(path, env=ENV))
    doc = gw.gateway.config.model_dump(mode="json")
    write(path, doc)
    return gw, path, doc


def write(path: Path, doc: dict[str, Any]) -> None:
    # libyaml's emitter where PyYAML has it: the same YAML as safe_dump, and the whole config
    # (every default of every section) written in Python was most of this module's time
    path.write_text(yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))


def reload(client: httpx.Client, **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("json", {})
    return client.post("/admin/reload", headers={**AUTH, **kwargs.pop("headers", {})}, **kwargs)


def chat(client: httpx.Client, route: str) -> httpx.Response:
    body = {"model": route, "messages": [{"role": "user", "content": "hi"}]}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response


def metric(client: httpx.Client, line_start: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_an_unchanged_file_is_unchanged(start_gateway: StartGateway, tmp_path: Path) -> None:
    gw, _, _ = started(start_gateway, tmp_path)
    answer = reload(gw.http)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "result": "unchanged",
        "generation": 1,
        "changed": [],
        "not_reloaded": [],
    }
    assert metric(gw.http, 'mirrorgate_config_reloads_total{result="unchanged"}') == 1


def test_a_new_route_and_a_new_primary_are_served_at_once(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    gw, path, doc = started(start_gateway, tmp_path)
    edited = copy.deepcopy(doc)
    edited["routes"]["fresh"] = {"primary": "echo"}
    other = next(name for name in edited["models"] if name != "echo")
    edited["routes"]["echo"]["primary"] = other
    edited["server"]["max_shadow_calls"] = doc["server"]["max_shadow_calls"] + 1
    write(path, edited)
    answer = reload(gw.http)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["result"] == "applied" and body["generation"] == 2
    assert body["changed"] == ["routes.echo", "routes.fresh"]
    assert body["not_reloaded"] == ["server.max_shadow_calls"]
    # The running value of a fixed key stays.
    assert gw.gateway.config.server.max_shadow_calls == doc["server"]["max_shadow_calls"]
    assert chat(gw.http, "fresh").status_code == 200
    served = gw.http.get("/admin/routes", headers=AUTH).json()["routes"]
    assert {r["name"]: r["primary"] for r in served}["echo"] == other
    assert metric(gw.http, "mirrorgate_config_generation ") == 2
    assert metric(gw.http, 'mirrorgate_config_reloads_total{result="applied"}') == 1


def test_unchanged_models_keep_their_clients(start_gateway: StartGateway, tmp_path: Path) -> None:
    gw, path, doc = started(start_gateway, tmp_path)
    before = dict(gw.gateway.clients)
    edited = copy.deepcopy(doc)
    edited["models"]["echo"]["timeout_s"] = 3
    write(path, edited)
    assert reload(gw.http).json()["changed"] == ["models.echo"]
    after = gw.gateway.clients
    assert after["echo"] is not before["echo"] and after["echo"].spec.timeout_s == 3
    assert all(after[n] is c for n, c in before.items() if n != "echo")
    assert before["echo"] in gw.gateway.retired_clients  # not closed under a request


def test_a_replaced_client_is_closed_once_no_planned_request_can_use_it(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    gw, path, doc = started(start_gateway, tmp_path)
    edited = copy.deepcopy(doc)
    edited["models"]["echo"]["total_timeout_s"] = 0.05
    write(path, edited)
    assert reload(gw.http).json()["changed"] == ["models.echo"]
    short_lived = gw.gateway.clients["echo"]
    edited["models"]["echo"]["timeout_s"] = 3
    write(path, edited)
    assert reload(gw.http).json()["changed"] == ["models.echo"]
    assert short_lived in gw.gateway.retired_clients

    async def retired() -> None:  # on the gateway's loop: its retirements, awaited
        tasks = [t for t in asyncio.all_tasks() if t.get_name() == "gateway:retire:echo"]
        assert len(tasks) == 2  # the first client (10 times 60 s to go) and the short-lived one
        await asyncio.wait(tasks, timeout=30, return_when=asyncio.FIRST_COMPLETED)

    asyncio.run_coroutine_threadsafe(retired(), gw.loop).result(60)
    assert short_lived not in gw.gateway.retired_clients
    assert short_lived.http.pool.idle_connections == 0
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(short_lived.http.pool.acquire(1))
    assert chat(gw.http, "echo").status_code == 200  # the new client serves


@pytest.mark.parametrize(
    ("content", "where"),
    [
        ("models: [unclosed", ""),
        ("a: &a [x, x, x, x, x, x, x, x, x]\n"
         + "".join(f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                   for p, c in zip("abcdefgh", "bcdefghi", strict=True)), ""),
        (None, ""),
        ("#" * (4 * 1024 * 1024 + 1), ""),
        ("\udcff".encode("utf-8", "surrogatepass").decode("latin-1"), ""),
    ],
    ids=["malformed", "yaml-bomb", "removed", "oversized", "not-utf8"],
)  # fmt: skip
def test_a_broken_file_is_rejected_and_the_running_config_stays(
    start_gateway: StartGateway, tmp_path: Path, content: str | None, where: str
) -> None:
    gw, path, _ = started(start_gateway, tmp_path)
    running = gw.gateway.config
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content.encode("latin-1"))
    answer = reload(gw.http)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["error"]["type"] == "config_rejected"
    assert body["problems"] and all(p["path"] == where for p in body["problems"])
    assert gw.gateway.config is running
    assert chat(gw.http, "echo").status_code == 200
    assert metric(gw.http, 'mirrorgate_config_reloads_total{result="rejected"}') == 1


def test_a_file_failing_cross_checks_names_every_problem(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    gw, path, doc = started(start_gateway, tmp_path)
    edited = copy.deepcopy(doc)
    edited["routes"]["echo"]["primary"] = "no-such-model"
    edited["routes"]["other"] = {"primary": "nor-this-one"}
    write(path, edited)
    answer = reload(gw.http)
    assert answer.status_code == 422
    paths = {p["path"] for p in answer.json()["problems"]}
    assert {"routes.echo.primary", "routes.other.primary"} <= paths
    assert gw.gateway.routes.get("other") is None


def test_the_endpoint_refuses_hostile_calls(start_gateway: StartGateway, tmp_path: Path) -> None:
    gw, _, _ = started(start_gateway, tmp_path)
    client = gw.http
    assert client.post("/admin/reload", json={}).status_code == 401  # no token
    wrong_host = reload(client, headers={"host": "evil.example"})
    assert wrong_host.status_code == 403
    not_json = client.post(
        "/admin/reload", headers={**AUTH, "content-type": "text/plain"}, content=b"{}"
    )
    assert not_json.status_code == 415
    garbage = client.post(
        "/admin/reload", headers={**AUTH, "content-type": "application/json"}, content=b"{nope"
    )
    assert garbage.status_code == 400
    assert reload(client, json=[1]).status_code == 400
    assert reload(client, json={"path": "/etc/passwd"}).status_code == 400
    huge = reload(client, json={"x": "y" * 5000})
    assert huge.status_code == 413
    empty = client.post(
        "/admin/reload", headers={**AUTH, "content-type": "application/json"}, content=b""
    )
    assert empty.status_code == 200 and empty.json()["result"] == "unchanged"
    # None of the refused calls reloaded anything.
    assert metric(client, 'mirrorgate_config_reloads_total{result="unchanged"}') == 1


def test_a_gateway_without_a_file_answers_409(start_gateway: StartGateway) -> None:
    gw = start_gateway(env=ENV)
    answer = reload(gw.http)
    assert answer.status_code == 409 and "not started from a configuration file" in answer.text


def test_rollout_state_survives_and_follows_the_new_route_set(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    gw, path, doc = started(start_gateway, tmp_path)
    other = next(name for name in doc["models"] if name != "echo")
    edited = copy.deepcopy(doc)
    edited["routes"]["echo"]["canary"] = {"model": other}
    write(path, edited)
    assert reload(gw.http).json()["result"] == "applied"
    start = gw.http.post("/admin/rollouts/echo/start", headers=AUTH, json={"reason": "t"})
    assert start.status_code == 200, start.text
    phase = gw.http.get("/admin/rollouts/echo", headers=AUTH).json()["phase"]
    # An unrelated edit: the running rollout keeps its phase and its canary traffic.
    edited["routes"]["fresh"] = {"primary": "echo"}
    victim = next(n for n in doc["routes"] if n not in ("echo", other))
    del edited["routes"][victim]
    write(path, edited)
    assert reload(gw.http).json()["changed"] == sorted(["routes.fresh", f"routes.{victim}"])
    state = gw.http.get("/admin/rollouts/echo", headers=AUTH).json()
    assert state["phase"] == phase
    assert gw.gateway.routes.get("echo").canary is not None  # type: ignore[union-attr]
    assert gw.gateway.routes.get(victim) is None
    assert victim not in gw.gateway.rollouts.states()
    assert gw.gateway.routes.get("fresh") is not None


def test_config_changes_names_key_paths() -> None:
    old = gateway_config("http://127.0.0.1:9", "sqlite:///a.db")
    new = gateway_config("http://127.0.0.1:9", "sqlite:///b.db", {"server": {"port": 7}})
    changed, fixed = config_changes(old, new)
    assert changed == [] and set(fixed) == {"store.url", "server.port"}


def test_a_second_reload_waits_for_the_first(start_gateway: StartGateway, tmp_path: Path) -> None:
    gw, _, _ = started(start_gateway, tmp_path)
    reloader = gw.gateway.reloader
    assert reloader is not None

    async def both() -> list[ReloadResult]:
        outcomes = await asyncio.gather(reloader.reload("a"), reloader.reload("b"))
        return [o.result for o in outcomes]

    results = asyncio.run_coroutine_threadsafe(both(), gw.loop).result(30)
    assert results == [ReloadResult.UNCHANGED, ReloadResult.UNCHANGED]


def test_alert_sinks_and_the_judge_are_swapped_in(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    gw, path, doc = started(start_gateway, tmp_path)
    assert gw.gateway.alerts is None
    other = next(name for name in doc["models"] if name != "echo")
    edited = copy.deepcopy(doc)
    edited["routes"]["echo"]["shadows"] = [{"model": other, "sample": 1.0}]
    write(path, edited)
    # No shadow dispatcher was started with this gateway: the answer says so.
    (missing,) = reload(gw.http).json()["not_reloaded"]
    assert missing.startswith("routes.echo.shadows")

    gw2, path2, doc2 = started_with(start_gateway, tmp_path / "b", shadows_of=other)
    shadows = gw2.gateway.shadows
    assert shadows is not None and shadows.judge is None
    edited = copy.deepcopy(doc2)
    edited["judge"] = {"model": "echo", "sample": 1.0}
    edited["alerts"]["sinks"] = [{"type": "webhook", "url": "http://127.0.0.1:9/hook"}]
    write(path2, edited)
    body = reload(gw2.http).json()
    assert body["result"] == "applied" and {"judge", "alerts.sinks"} <= set(body["changed"])
    assert shadows.judge is not None and shadows.judge.spec.model == "echo"
    assert gw2.gateway.alerts is not None and gw2.gateway.rollouts.alerts is gw2.gateway.alerts
    edited["judge"] = None
    edited["alerts"]["sinks"] = []
    write(path2, edited)
    assert reload(gw2.http).json()["result"] == "applied"
    assert shadows.judge is None and gw2.gateway.alerts is None


def started_with(
    start_gateway: StartGateway, folder: Path, *, shadows_of: str
) -> tuple[InProcessGateway, Path, dict[str, Any]]:
    """Like `started`, with route `echo` shadowed by `shadows_of` from the start."""
    folder.mkdir()
    path = folder / "mirrorgate.yaml"
    extra = {"routes": {"echo": {"primary": "echo", "shadows": [{"model": shadows_of}]}}}
    gw = start_gateway(
        db_url=f"sqlite:///{folder / 'gw.db'}",
        extra=extra,
        env=ENV,
        source=lambda: load_config(path, env=ENV),
    )
    doc = gw.gateway.config.model_dump(mode="json")
    write(path, doc)
    return gw, path, doc


def test_a_routes_operation_field_is_read_from_the_next_request_on(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    gw, path, doc = started(start_gateway, tmp_path)
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"ticket": "t-77"}}  # fmt: skip

    def operation_of(answer: httpx.Response) -> str | None:
        request_id = answer.headers["x-mirrorgate-request-id"]
        store = gw.gateway.store
        (record,) = wait_until(lambda: store.query(request_id=request_id), what="stored")
        return record.operation_id

    assert operation_of(gw.http.post("/v1/chat/completions", json=body)) is None
    edited = copy.deepcopy(doc)
    edited["routes"]["echo"]["operation_field"] = "metadata.ticket"
    write(path, edited)
    answer = reload(gw.http)
    assert answer.status_code == 200 and answer.json()["changed"] == ["routes.echo"]
    assert operation_of(gw.http.post("/v1/chat/completions", json=body)) == "t-77"
