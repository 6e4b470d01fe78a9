"""Scoring eval items by their method: the route's rule checks resolved as the gateway resolves
them, and JSON equality (pure: a config in, scores out)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import yaml

from proxy.config import parse_config
from proxy.core.records import Arm, ExchangeRecord, Status
from proxy.replay.evalscoring import EvalScorer, RouteChecks
from proxy.replay.evalset import read_eval_set
from proxy.replay.runner import JobOutcome

MODEL = {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
CONFIG = parse_config(
    yaml.safe_dump(
        {
            "models": {"prod": MODEL},
            "routes": {"support-bot": {"primary": "prod"}, "plain": {"primary": "prod"}},
            "rules": {
                "shipping": {
                    "routes": ["support-bot"],
                    "version": "header:x-rule-version",  # no headers offline: prompt decides
                    "checks": [{"name": "valid-json", "type": "json"}],
                    "versions": {
                        "v1": {
                            "match_prompt": r"max_weight\s*=\s*100",
                            "checks": [
                                {"name": "max-weight", "type": "json_path",
                                 "path": "$.max_weight", "equals": 100}
                            ],
                        },
                        "v2": {
                            "match_prompt": r"max_weight\s*=\s*150",
                            "checks": [
                                {"name": "max-weight", "type": "json_path",
                                 "path": "$.max_weight", "equals": 150}
                            ],
                        },
                    },
                }
            },
        }
    ),
    env={},
)  # fmt: skip


def test_the_routes_checks_are_those_of_the_version_the_system_prompt_resolves_to() -> None:
    checks = RouteChecks(CONFIG)
    assert checks.governs("support-bot") and not checks.governs("plain")
    body = {"messages": [{"role": "system", "content": "max_weight = 150"}]}
    rule, version, found = checks.resolve("support-bot", "chat.completions", body)
    assert (rule, version) == ("shipping", "v2")
    assert [c.name for c in found] == ["valid-json", "max-weight"]
    # No system prompt: no version, only the rule's own checks.
    rule, version, found = checks.resolve("support-bot", "chat.completions", {"messages": []})
    assert (version, [c.name for c in found]) == (None, ["valid-json"])


def outcome(job: object, text: str) -> JobOutcome:
    record = ExchangeRecord(
        request_id="x", route="eval:set", target="cand", upstream_model="m", arm=Arm.SHADOW,
        endpoint="chat.completions", provider="openai", streamed=False,
        started_at=datetime.now(UTC), duration_s=0.1, ttft_s=None, overhead_s=0.0,
        status=Status.OK, http_status=200, cost_usd=0.0, response_text=text,
    )  # fmt: skip
    return JobOutcome(job, record, None)  # type: ignore[arg-type]


def test_each_item_is_scored_by_its_own_method(tmp_path: Path) -> None:
    lines = [
        {"id": "t", "input": "q", "expect": "Paris"},
        {"id": "j", "input": "q", "expect": {"json": {"a": 1, "b": [1, 2]}}},
        {"id": "c", "input": "q", "system": "max_weight = 150", "score": "checks",
         "route": "support-bot"},
    ]  # fmt: skip
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    evalset = read_eval_set(path)
    assert evalset.problems == ()
    jobs = {job.request_id: job for job in evalset.jobs({"cand": CONFIG.models["prod"]})}
    scorer = EvalScorer(evalset, RouteChecks(CONFIG))

    def correct(item: str, answer: str) -> bool | None:
        score = scorer.score(outcome(jobs[item], answer))
        assert score is not None
        return score.correct

    assert correct("t", " paris. ") is True
    assert correct("j", '{"b": [1, 2],\n "a": 1}') is True
    assert correct("j", '{"a": 1, "b": [2, 1]}') is False
    assert correct("c", '{"max_weight": 150}') is True
    assert correct("c", '{"max_weight": 100}') is False  # v2's check fails
    assert correct("c", "150 kg") is False  # not JSON: valid-json fails
    score = scorer.score(outcome(jobs["c"], '{"max_weight": 100}'))
    assert score is not None
    assert {r.name: r.result for r in score.checks} == {"valid-json": "pass", "max-weight": "fail"}
