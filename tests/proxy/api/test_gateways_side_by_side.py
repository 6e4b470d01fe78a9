"""Two gateways in one process share the API routers (built once per process) but each answers
with its own parts: its own admin token, its own routes, its own rollouts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.conftest import InProcessGateway

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
