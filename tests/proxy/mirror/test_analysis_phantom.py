"""phantom_rule on live traffic: after a rule change from max_weight 100 to 150, the answers that
still say 100 fail it on every arm, counted per arm and rule version; the canary judge's
check_pass_rate then holds such a candidate to account like any other check."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from analyzers.checks import run_checks
from proxy.config import parse_config
from proxy.core.records import Arm, CheckRecord
from proxy.core.rollout_state import Action, Phase
from proxy.gateway import RuleValues
from proxy.gateway.routing import RouteTable
from proxy.mirror import CompiledRules
from proxy.mirror.analysis import answer_of
from proxy.observability.metrics import GatewayMetrics
from proxy.rollout.controller import RolloutController
from proxy.rollout.manager import RolloutManager
from proxy.store.exchanges import Store
from proxy.store.judge_windows import JudgeWindows
from proxy.store.leadership import Leadership
from proxy.store.rollouts import RolloutStore
from proxy.store.rule_events import RuleEvent, RuleEventStore
from tests.conftest import InProcessGateway, seed_sqlite, wait_until

PARAMETER = r"max_weight\s*=\s*(?P<value>\d+)"
PHANTOM = {
    "routes": {
        "rule-follower": {
            "primary": "rule-follower",
            "shadows": [{"model": "stale", "sample": 1.0}],
        }
    },
    "rules": {
        "shipping": {
            "routes": ["rule-follower", "stale"],
            "checks": [{"name": "phantom", "type": "phantom_rule", "parameter": PARAMETER}],
            "versions": {
                "v1": {"match_prompt": r"max_weight\s*=\s*100"},
                "v2": {"match_prompt": r"max_weight\s*=\s*150"},
            },
        }
    },
}


def ask(gw: InProcessGateway, route: str, limit: int) -> httpx.Response:
    body: dict[str, Any] = {
        "model": route,
        "messages": [
            {"role": "system", "content": f"Answer in JSON. max_weight = {limit} kg"},
            {"role": "user", "content": "How heavy can a parcel be?"},
        ],
    }
    response = gw.http.post("/v1/chat/completions", json=body)
    response.raise_for_status()
    return response


def counted(gw: InProcessGateway, target: str, arm: str, version: str, result: str) -> float:
    labels = {
        "route": "rule-follower" if arm == "shadow" or target == "rule-follower" else target,
        "target": target, "arm": arm, "rule": "shipping", "rule_version": version,
        "check": "phantom", "result": result,
    }  # fmt: skip
    return gw.gateway.registry.get_sample_value("mirrorgate_check_results_total", labels) or 0.0


def test_answers_that_keep_the_old_value_fail_per_arm_and_version(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(extra=PHANTOM)
    for _ in range(2):
        assert ask(gw, "rule-follower", 100).headers["x-mirrorgate-rule-version"] == "v1"
        ask(gw, "stale", 100)
    # v1 has no earlier version: everyone passes, the stale model included.
    wait_until(lambda: counted(gw, "stale", "shadow", "v1", "pass") == 2, what="v1 shadows")
    wait_until(lambda: counted(gw, "stale", "primary", "v1", "pass") == 2, what="v1 stale")
    assert counted(gw, "rule-follower", "primary", "v1", "pass") == 2
    v2 = [ask(gw, "rule-follower", 150) for _ in range(3)] + [ask(gw, "stale", 150)]
    assert {r.headers["x-mirrorgate-rule-version"] for r in v2} == {"v2"}
    wait_until(lambda: counted(gw, "stale", "shadow", "v2", "fail") == 3, what="v2 shadows")
    wait_until(lambda: counted(gw, "stale", "primary", "v2", "fail") == 1, what="v2 stale")
    assert counted(gw, "rule-follower", "primary", "v2", "pass") == 3
    assert counted(gw, "rule-follower", "primary", "v2", "fail") == 0
    assert counted(gw, "stale", "shadow", "v2", "pass") == 0
    # The stored verdict says which value, of which version.
    stale_id = v2[-1].headers["x-mirrorgate-request-id"]
    (record,) = wait_until(
        lambda: [c for c in gw.gateway.store.query_checks(request_id=stale_id)],
        what="the stored verdict",
    )
    assert (record.rule_version, record.result) == ("v2", "fail")
    assert (
        record.reason == "the answer states value '100' of version v1, not the current value '150'"
    )
    # And the events carry each version's value.
    events = wait_until(lambda: RuleEventStore(gw.gateway.store).events()[1:], what="v2 event")
    assert [(e.version, e.rule_value) for e in RuleEventStore(gw.gateway.store).events()] == [
        ("v1", "100"), ("v2", "150"),
    ]  # fmt: skip
    assert events


def test_the_reasoning_of_a_non_streamed_answer_is_checked() -> None:
    anthropic = {
        "content": [
            {"type": "thinking", "thinking": "I remember 100 kg.", "signature": "x"},
            {"type": "text", "text": '{"max_weight": 150}'},
        ]
    }
    assert answer_of("messages", '{"max_weight": 150}', anthropic).reasoning == "I remember 100 kg."
    chat = {"choices": [{"message": {"content": "150", "reasoning_content": "It was 100."}}]}
    assert answer_of("chat.completions", "150", chat).reasoning == "It was 100."
    responses = {
        "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Use 100."}]},
            {"type": "message", "content": [{"type": "output_text", "text": "150"}]},
        ]
    }
    assert answer_of("responses", "150", responses).reasoning == "Use 100."
    assert answer_of("chat.completions", "150", None).reasoning == ""


LOW_TRAFFIC = f"""
models:
  prod: {{provider: openai, base_url: "http://127.0.0.1:9/v1", model: prod}}
  cand: {{provider: openai, base_url: "http://127.0.0.1:9/v1", model: cand}}
routes:
  bot:
    primary: prod
    canary:
      model: cand
      steps: [50]
      step_interval_s: 60
      analysis: {{min_samples: 20, interval_s: 1, failure_limit: 1, metrics: [check_pass_rate]}}
rules:
  shipping:
    routes: [bot]
    checks: [{{name: phantom, type: phantom_rule, parameter: '{PARAMETER}'}}]
    versions:
      v1: {{match_prompt: 'max_weight\\s*=\\s*100'}}
      v2: {{match_prompt: 'max_weight\\s*=\\s*150'}}
"""


def test_the_canary_judge_rolls_back_a_candidate_that_keeps_the_old_value(
    tmp_path: Path, migrated_sqlite: Path
) -> None:
    config = parse_config(LOW_TRAFFIC, {})
    values = RuleValues.from_config(config)
    values.opened("shipping", "v1", "100")
    values.opened("shipping", "v2", "150")
    rules = CompiledRules(config, values)
    checks = rules.checks_for("shipping", "v2")

    def verdicts(arm: Arm, target: str, text: str, n: int, at: datetime) -> list[CheckRecord]:
        (result,) = run_checks(checks, answer_of("chat.completions", text, None))
        return [
            CheckRecord(
                request_id=f"{target}-{i}", route="bot", target=target, arm=arm, rule="shipping",
                rule_version="v2", check=result.name, result=result.result, reason=result.reason,
                created_at=at,
            )
            for i in range(n)
        ]  # fmt: skip

    async def scenario(store: Store) -> tuple[Phase | None, str]:
        now = datetime.now(UTC)
        metrics = GatewayMetrics(CollectorRegistry())
        manager = RolloutManager(config, RolloutStore(store), RouteTable(config), metrics)
        await manager.act("bot", Action.START, reason="test", actor="operator")
        events = RuleEventStore(store)
        events.add(RuleEvent("shipping", "v1", None, now - timedelta(hours=1), "a", "bot", None))
        events.add(RuleEvent("shipping", "v2", "v1", now, "b", "bot", None, rule_value="150"))
        later = now + timedelta(seconds=1)
        store.write_batch(
            verdicts(Arm.PRIMARY, "prod", '{"max_weight": 150}', 200, later)
            + verdicts(Arm.CANARY, "cand", '{"max_weight": 100}', 200, later)
        )
        controller = RolloutController(
            config, manager, JudgeWindows(store), Leadership(store), metrics
        )
        changes = await controller.tick(force=True)
        return (changes[0].after.phase if changes else None), (
            changes[0].after.reason if changes else ""
        )

    seed_sqlite(f"sqlite:///{tmp_path / 'judge.db'}", migrated_sqlite)
    with Store(f"sqlite:///{tmp_path / 'judge.db'}") as store:
        store.migrate()
        phase, reason = asyncio.run(scenario(store))
    assert phase is Phase.ROLLED_BACK
    assert "check_pass_rate" in reason and "phantom" in reason
