"""Two gateways in one process share the API, public and console routes (built once per process)
but each answers with its own parts: its own admin and reviewer tokens, its own routes, its own
rollouts, its own metrics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter

from tests.conftest import InProcessGateway
from tests.proxy.console.console_client import sign_in, signed_in

BOT = {"routes": {"bot": {"primary": "rule-follower", "canary": {"model": "stale", "steps": [25]}}}}


def test_each_gateway_answers_with_its_own_token_and_routes(
    start_gateway: Callable[..., InProcessGateway], tmp_path: Path
) -> None:
    with_bot = start_gateway(env={"MIRRORGATE_ADMIN_TOKEN": "alpha"}, extra=BOT)
    without = start_gateway(
        db_url=f"sqlite:///{tmp_path / 'other.db'}", env={"MIRRORGATE_ADMIN_TOKEN": "beta"}
    )
    alpha = {"Authorization": "Bearer alpha"}
    beta = {"Authorization": "Bearer beta"}

    assert with_bot.http.get("/admin/routes", headers=beta).status_code == 403
    assert without.http.get("/admin/routes", headers=alpha).status_code == 403
    assert without.http.get("/admin/rollouts/bot", headers=alpha).status_code == 403

    mine = with_bot.http.get("/admin/routes", headers=alpha)
    theirs = without.http.get("/admin/routes", headers=beta)
    assert mine.status_code == theirs.status_code == 200
    assert "bot" in {r["name"] for r in mine.json()["routes"]}
    assert "bot" not in {r["name"] for r in theirs.json()["routes"]}

    assert with_bot.http.get("/admin/rollouts/bot", headers=alpha).status_code == 200
    assert without.http.get("/admin/rollouts/bot", headers=beta).status_code == 404
    assert without.http.get("/admin/experiments/bot", headers=beta).status_code == 404


def test_each_console_signs_in_only_its_own_tokens(
    start_gateway: Callable[..., InProcessGateway], tmp_path: Path
) -> None:
    first = start_gateway(
        env={
            "MIRRORGATE_ADMIN_TOKEN": "alpha",
            "MIRRORGATE_REVIEWER_TOKENS": "alpha-reviewer-t0ken-1",
        }
    )
    second = start_gateway(
        db_url=f"sqlite:///{tmp_path / 'other.db'}",
        env={
            "MIRRORGATE_ADMIN_TOKEN": "beta",
            "MIRRORGATE_REVIEWER_TOKENS": "beta-reviewer-t0ken-22",
        },
    )

    for token in ("beta", "beta-reviewer-t0ken-22"):
        assert sign_in(first.client(), token).status_code == 401
    for token in ("alpha", "alpha-reviewer-t0ken-1"):
        assert sign_in(second.client(), token).status_code == 401

    admin = signed_in(first, "alpha")
    assert admin.get("/ui/rollouts").status_code == 200
    reviewer = signed_in(second, "beta-reviewer-t0ken-22")
    assert reviewer.get("/ui/rollouts").status_code == 403  # a reviewer there, no admin
    assert reviewer.get("/ui").headers["location"] == "/ui/review"

    # a session of one gateway is no session at the other (each signs with its own store's key)
    stray = second.client(cookies=dict(admin.cookies))
    assert stray.get("/ui/rollouts").headers["location"].startswith("/ui/signin")


def test_each_gateway_lists_its_own_routes_and_metrics(
    start_gateway: Callable[..., InProcessGateway], tmp_path: Path
) -> None:
    marked = CollectorRegistry()
    Counter("side_marker", "A family only the first gateway's registry has.", registry=marked).inc()
    with_bot = start_gateway(extra=BOT, registry=marked)
    without = start_gateway(db_url=f"sqlite:///{tmp_path / 'other.db'}")

    assert "bot" in {m["id"] for m in with_bot.http.get("/v1/models").json()["data"]}
    assert "bot" not in {m["id"] for m in without.http.get("/v1/models").json()["data"]}
    assert (
        with_bot.http.get("/readyz").status_code == without.http.get("/readyz").status_code == 200
    )
    assert "side_marker_total 1.0" in with_bot.http.get("/metrics").text
    assert "side_marker" not in without.http.get("/metrics").text
