"""The offline gate at `rollout start` (`canary.require_eval`), through the admin API and the
CLI: no run or a regressing run is refused with the numbers, a good run is allowed, `force`
with a reason is recorded and shown in the status."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from proxy.cli.main import build_parser, cmd_rollout
from proxy.store import EvalRun, EvalStore, StratumScore
from tests.asgi_driver import sync_transport
from tests.conftest import InProcessGateway
from tests.proxy.api.test_rollouts import AUTH, ENV, TOKEN, rollout, rollout_config

pytestmark = pytest.mark.usefixtures("quick_rollout_ticks")
StartGateway = Callable[..., InProcessGateway]


def gate_config(**gate: Any) -> dict[str, Any]:
    config = rollout_config()
    config["routes"]["bot"]["canary"]["require_eval"] = {
        "set": "sets/support",
        "max_drop": 0.02,
        "max_age": "7d",
        "min_cases": 10,
        **gate,
    }
    return config


def runs(
    group: str,
    candidate: dict[str, tuple[int, int]],
    primary: dict[str, tuple[int, int]],
    *,
    age: timedelta = timedelta(hours=1),
) -> list[EvalRun]:
    started = datetime.now(UTC) - age

    def run(model: str, role: str, strata: dict[str, tuple[int, int]]) -> EvalRun:
        return EvalRun(
            run_group=group, set_name="support", set_version=3, set_hash="sha256:x",
            route="bot", model=model, role=role, config_fingerprint="f" * 16,
            started_at=started,
            strata={k: StratumScore(cases=c, passed=p) for k, (c, p) in strata.items()},
        )  # fmt: skip

    return [run("rule-follower", "primary", primary), run("stale", "candidate", candidate)]


PRIMARY = {"all": (100, 85), "difficulty=easy": (80, 67), "difficulty=hard": (20, 18),
           "task=legal": (4, 4)}  # fmt: skip
REGRESSING = {"all": (100, 80), "difficulty=easy": (80, 70), "difficulty=hard": (20, 10),
              "task=legal": (4, 4)}  # fmt: skip
GOOD = {"all": (100, 86), "difficulty=easy": (80, 68), "difficulty=hard": (20, 18),
        "task=legal": (4, 0)}  # fmt: skip


def start(gw: InProcessGateway, body: dict[str, Any] | None = None) -> Any:
    return gw.http.post("/admin/rollouts/bot/start", headers=AUTH, json=body or {})


def test_no_run_and_a_regressing_run_are_refused_with_the_numbers(
    start_gateway: StartGateway,
) -> None:
    gw = start_gateway(extra=gate_config(), env=ENV)
    refused = start(gw)
    assert refused.status_code == 409
    assert "no evaluation run of stale on set support" in refused.json()["error"]["message"]
    EvalStore(gw.gateway.store).add_runs(runs("g1", REGRESSING, PRIMARY))
    refused = start(gw)
    assert refused.status_code == 409
    message = refused.json()["error"]["message"]
    assert "difficulty=hard: 10/20 50.0% vs primary 18/20 90.0% (-40.0 points)" in message
    assert "difficulty=easy" not in message  # better than the primary there
    status = rollout(gw.http)
    assert status["phase"] == "pending"
    evidence = status["offline_evidence"]
    assert evidence["required"] is True and evidence["allowed"] is False
    hard = next(s for s in evidence["strata"] if s["stratum"] == "difficulty=hard")
    assert hard["blocking"] is True and hard["drop"] == pytest.approx(0.4)


def test_a_good_run_is_allowed_and_a_small_stratum_never_blocks(
    start_gateway: StartGateway,
) -> None:
    gw = start_gateway(extra=gate_config(), env=ENV)
    EvalStore(gw.gateway.store).add_runs(runs("g1", REGRESSING, PRIMARY, age=timedelta(days=1)))
    EvalStore(gw.gateway.store).add_runs(runs("g2", GOOD, PRIMARY))  # the newest counts
    started = start(gw)
    assert started.status_code == 200, started.text
    status = rollout(gw.http)
    assert status["phase"] == "progressing"
    evidence = status["offline_evidence"]
    assert evidence["allowed"] is True and evidence["candidate_run"]["run_group"] == "g2"
    legal = next(s for s in evidence["strata"] if s["stratum"] == "task=legal")
    assert legal["counted"] is False and legal["blocking"] is False  # 0/4, too few to count
    assert status["transitions"][-1]["evidence"]["offline_gate"]["allowed"] is True
    assert evidence["override"] is None


def test_a_run_older_than_max_age_is_refused(start_gateway: StartGateway) -> None:
    gw = start_gateway(extra=gate_config(max_age="12h"), env=ENV)
    EvalStore(gw.gateway.store).add_runs(runs("g1", GOOD, PRIMARY, age=timedelta(days=2)))
    refused = start(gw)
    assert refused.status_code == 409
    assert "2.0d old; require_eval.max_age is 12.0h" in refused.json()["error"]["message"]


def test_force_needs_a_reason_and_the_override_is_kept(start_gateway: StartGateway) -> None:
    gw = start_gateway(extra=gate_config(), env=ENV)
    EvalStore(gw.gateway.store).add_runs(runs("g1", REGRESSING, PRIMARY))
    for body in ({"force": True}, {"force": True, "reason": "   "}, {"force": "yes"},
                 {"force": True, "reason": "x" * 2000}, {"forced": True}):  # fmt: skip
        assert start(gw, body).status_code == 400, body
    assert rollout(gw.http)["phase"] == "pending"
    forced = start(gw, {"force": True, "reason": "hotfix INC-42, eval rerun tomorrow"})
    assert forced.status_code == 200, forced.text
    status = rollout(gw.http)
    assert status["phase"] == "progressing"
    override = status["offline_evidence"]["override"]
    assert override["reason"] == "hotfix INC-42, eval rerun tomorrow"
    assert "difficulty=hard" in override["refused"]
    # Persisted with the transition: a restart or another replica shows the same.
    kept = status["transitions"][-1]["evidence"]["offline_override"]
    assert kept == override


def test_the_cli_refuses_prints_the_numbers_and_forces_with_a_reason(
    start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MIRRORGATE_ADMIN_TOKEN", TOKEN)
    gw = start_gateway(extra=gate_config(), env=ENV)
    EvalStore(gw.gateway.store).add_runs(runs("g1", REGRESSING, PRIMARY))
    transport = sync_transport(gw.app_thread)

    def cli(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        parsed = build_parser().parse_args(["rollout", *args, "--url", gw.url])
        code = cmd_rollout(parsed, transport)
        out, err = capsys.readouterr()
        return code, out, err

    code, _, err = cli("start", "bot")
    assert code == 1 and "offline gate" in err and "10/20 50.0% vs primary 18/20" in err
    with pytest.raises(SystemExit) as usage:
        cli("start", "bot", "--force")
    assert usage.value.code == 2
    assert "--force needs --reason" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli("pause", "bot", "--force", "--reason", "x")
    code, _, err = cli("start", "bot", "--force", "--reason", "known regression, accepted")
    assert (code, err) == (0, "")
    code, out, _ = cli("status", "bot")
    assert code == 0
    assert "offline gate (set support): refuses" in out
    assert "overridden at start: known regression, accepted" in out
    assert "BLOCKS" in out and "too few" in out
