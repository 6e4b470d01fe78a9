"""A built set's `judge` cases scored by the LLM judge through `mirrorgate replay --eval-set`:
each candidate's answer against the primary's, with the case's rubric, in both orders (the
position bias cancelled) or, with `judge.both_orders: false`, primary first only. The fake
judge (`judge` of the session's mock upstream) always says A 8, B 5: a judge that favours
whatever it sees first."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.mock_upstream.server import MockUpstreamServer
from proxy.store import EvalStore, Store
from tests.proxy.replay.test_command import (
    PRICE,
    per_model,
    replay,
    sent,
    store,
    table,
    write_config,
)

__all__ = ["store"]  # the fixture, shared with the replay command's tests


def judged_config(
    tmp_path: Path, upstream: MockUpstreamServer, judge_model: str = "judge", **judge: Any
) -> Path:
    path = write_config(tmp_path, upstream)
    doc = yaml.safe_load(path.read_text())
    doc["models"]["judge"] = {
        "provider": "openai", "base_url": upstream.url + "/v1", "model": judge_model,
        "price": PRICE,
    }  # fmt: skip
    doc["judge"] = {"model": "judge", **judge}
    path.write_text(yaml.safe_dump(doc))
    return path


def built_set(tmp_path: Path, marker: str) -> Path:
    """A set as `evalset build` writes it, for route support-bot: one case to judge, one with
    a reference."""
    directory = tmp_path / "support"
    directory.mkdir()
    lines = [
        {"id": "r1", "task": "refund", "input": f"Refund my order [{marker}]", "score": "judge",
         "rubric": "Offers a refund <and> names the 14-day window"},
        {"id": "t1", "task": "greet", "input": f"Say hi [{marker}]", "expect": "hi"},
    ]  # fmt: skip
    (directory / "cases.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (directory / "held_out.jsonl").write_text("")
    manifest = {"name": "support", "version": 1, "route": "support-bot", "content_hash": "h"}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def judge_calls(upstream: MockUpstreamServer, marker: str) -> list[dict[str, Any]]:
    return [b for b in sent(upstream, marker) if b["model"] == "judge"]


@pytest.mark.usefixtures("store")
def test_both_orders_cancel_the_judges_position_bias(
    tmp_path: Path, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    config = judged_config(tmp_path, upstream)
    code = replay(config, "--candidate", "stale", "--eval-set", str(built_set(tmp_path, marker)))
    out, err = capsys.readouterr()
    assert code == 0, err
    calls = judge_calls(upstream, marker)
    assert len(calls) == 2  # one case, one candidate, both orders
    prompts = [c["messages"][1]["content"] for c in calls]
    system = calls[0]["messages"][0]["content"]
    assert "Offers a refund <and> names the 14-day window" in system
    stale = '{"max_weight": 100}'
    first_a = prompts[0].split("Answer B:")[0]
    second_a = prompts[1].split("Answer B:")[0]
    assert stale not in first_a and stale in second_a  # the primary first, then the candidate
    # A 8, B 5 in both orders: each answer averages 6.5, a pass (6 of 10 passes).
    rows = table(out, "group")
    assert (
        rows["task=refund"]["stale correct"] == "1/1 100%"
        and rows["task=refund"]["prod correct"] == "1/1 100%"
    )
    assert "judge judge: 1 answers judged against prod (both orders), 2 calls, 0 unusable" in out
    assert per_model(upstream, marker)["stale"] == 2


def test_one_order_leaves_the_bias_in_and_the_run_keeps_the_scores(
    tmp_path: Path, store: Store, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    config = judged_config(tmp_path, upstream, both_orders=False)
    code = replay(config, "--candidate", "stale", "--eval-set", str(built_set(tmp_path, marker)))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert len(judge_calls(upstream, marker)) == 1
    rows = table(out, "group")
    # Primary first: it gets the 8 (passes), the candidate the 5 (fails).
    assert (
        rows["task=refund"]["prod correct"] == "1/1 100%"
        and rows["task=refund"]["stale correct"] == "0/1 0%"
    )
    assert "(primary first only), 1 calls" in out
    stored = EvalStore(store)
    latest = stored.latest_run("support", "stale")
    assert latest is not None
    runs = {r.model: r for r in stored.group(latest.run_group)}
    assert runs["stale"].strata["task=refund"].passed == 0
    assert runs["prod"].strata["task=refund"].passed == 1


@pytest.mark.usefixtures("store")
def test_without_a_judge_section_the_case_stays_not_scored(
    tmp_path: Path, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    config = write_config(tmp_path, upstream)
    code = replay(config, "--candidate", "stale", "--eval-set", str(built_set(tmp_path, marker)))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert judge_calls(upstream, marker) == []
    assert "answers judged against" not in out
    # neither right nor wrong: left out of the count, and said so
    assert table(out, "group")["task=refund"]["stale correct"] == "- (1 unjudged)"


@pytest.mark.usefixtures("store")
@pytest.mark.parametrize("judge_model", ["broken", "stale", "garbage"])
def test_a_judge_that_fails_or_answers_nonsense_scores_nothing(
    tmp_path: Path, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str],
    judge_model: str,
) -> None:  # fmt: skip
    """503s, an answer without scores, a body that is not JSON: the case stays not scored, the
    run goes on and says how many of the judge's answers were unusable."""
    marker = uuid.uuid4().hex
    config = judged_config(tmp_path, upstream, judge_model=judge_model)
    code = replay(config, "--candidate", "stale", "--eval-set", str(built_set(tmp_path, marker)))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "0 answers judged against prod (both orders), 1 calls, 1 unusable" in out
    # neither right nor wrong: left out of the count, and said so
    assert table(out, "group")["task=refund"]["stale correct"] == "- (1 unjudged)"
