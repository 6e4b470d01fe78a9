"""A gateway killed with SIGKILL mid-rollout comes back in the same phase, step and weight, with
the same rollout and the same users on the canary (issue 5, point 2)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.core.sampling import sampled
from tests.e2e.conftest import GatewayProcess, RolloutClient

pytestmark = pytest.mark.e2e

USERS = [f"user-{i}" for i in range(40)]
STEPS = [30, 60, 90]
# A healthy canary (echo never errs) judged on errors only, climbing a step every 0.5 s.
CLIMBING = {
    "steps": STEPS,
    "step_interval_s": 0.5,
    "canary": "echo",
    "metrics": ["error_rate"],
    "thresholds": {"error_rate_increase": 0.2},
}
KEPT = ("phase", "step", "weight_percent", "rollout_id", "revision", "candidate", "baseline",
        "started_at", "step_started_at", "serving")  # fmt: skip


def test_a_gateway_killed_mid_rollout_comes_back_in_the_same_phase_and_step(
    tmp_path: Path,
    start_rollout_gateway: Callable[..., GatewayProcess],
    rollout_client: RolloutClient,
) -> None:
    client = rollout_client
    db_url = f"sqlite:///{tmp_path / 'rollout.db'}"
    gateway = start_rollout_gateway(db_url, **CLIMBING)
    assert client.act(gateway, "start").status_code == 200

    # Traffic until the judge has advanced the canary past its first step; then pause it there.
    for i in range(3000):
        client.ask(gateway, USERS[i % len(USERS)])
        if i % 10 == 9 and client.rollout(gateway)["step"] >= 1:
            break
    paused = client.act(gateway, "pause")
    assert paused.status_code == 200 and paused.json()["changed"] is True, paused.text
    before = client.rollout(gateway)
    assert before["phase"] == "paused" and before["step"] >= 1
    assert before["weight_percent"] == STEPS[before["step"]]
    arms = client.arms(gateway, USERS)
    rate = before["weight_percent"] / 100
    assert arms == {
        u: "canary" if sampled(u, before["rollout_id"], rate) else "primary" for u in USERS
    }
    assert set(arms.values()) == {"primary", "canary"}

    # SIGKILL: no drain, no shutdown hook; only what was persisted survives.
    gateway.proc.kill()
    gateway.proc.wait(10)
    assert gateway.proc.returncode == -signal.SIGKILL

    again = start_rollout_gateway(db_url, **CLIMBING)
    after = client.rollout(again)
    assert {k: after[k] for k in KEPT} == {k: before[k] for k in KEPT}
    assert after["transitions"] == before["transitions"]
    assert [t["action"] for t in after["transitions"]] == ["pause"] + ["advance"] * before[
        "step"
    ] + ["start"]
    assert client.arms(again, USERS) == arms  # the same users on the canary: the same salt
