"""Scoring an evaluation set's `judge` cases (a rubric, no reference) with the LLM judge.

After the run, each `judge` case's candidate answers are judged against the primary's answer to
the same case, by the model of the config's `judge` section, with its rubric and the case's
appended (`analyzers.judge_prompt`): primary first, and again candidate first unless
`judge.both_orders` is false, each answer's scores averaged. The judge's 1..10 becomes a score
of 0..1 handed to `EvalScorer.add_judgement`; the primary's is the mean of its scores against
every candidate. A case whose primary or candidate did not answer, or whose judge gave no
usable scores, stays not scored. The judge's calls are counted and costed, not stored.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from analyzers.judge_prompt import (
    DEFAULT_RUBRIC,
    average_orders,
    judge_request,
    parse_scores,
    request_text,
    with_case_rubric,
)
from proxy.config import JudgeSpec
from proxy.core import ENDPOINTS, Arm
from proxy.upstream import CallContext, ModelCaller

from .evalscoring import EvalScorer
from .evalset import EvalSet
from .runner import JobOutcome


@dataclass(slots=True)
class JudgeTally:
    """What judging the set's `judge` cases took."""

    calls: int = 0
    failed: int = 0
    """Calls that failed or gave no usable scores."""
    cost_usd: float = 0.0
    judged: int = 0
    """Candidate answers scored."""


async def _ask(
    caller: ModelCaller, spec: JudgeSpec, item_id: str, rubric: str, request: str,
    answer_a: str, answer_b: str, tally: JudgeTally,
) -> tuple[float, float] | None:  # fmt: skip
    anthropic = caller.clients[spec.model].spec.provider == "anthropic"
    path, payload = judge_request(rubric, request, answer_a, answer_b, anthropic=anthropic)
    ctx = CallContext(
        f"judge:{item_id}", "eval-judge", ENDPOINTS[path], payload, False, False, [],
        tags=("eval", "judge"),
    )  # fmt: skip
    attempt = await caller.open(ctx, spec.model, Arm.JUDGE)
    status = attempt.response.status_code if attempt.response is not None else 0
    record = caller.record(ctx, attempt, status, time.perf_counter(), own_clock=True)
    tally.calls += 1
    tally.cost_usd += record.cost_usd
    scores = None
    if attempt.error is None and attempt.parsed is not None:
        scores = parse_scores(caller.answer_text(ctx, attempt))
    if scores is None:
        tally.failed += 1
    return scores


async def judge_cases(
    caller: ModelCaller,
    spec: JudgeSpec,
    evalset: EvalSet,
    outcomes: Sequence[JobOutcome],
    primary: str,
    scorer: EvalScorer,
) -> JudgeTally:
    """Judge every `judge` case's answers against `primary`'s; the scores go to `scorer`."""
    rubric = spec.rubric or DEFAULT_RUBRIC
    answers: dict[tuple[str, str], str] = {}
    requests: dict[str, str] = {}
    for outcome in outcomes:
        if outcome.ok and outcome.record is not None:
            key = (outcome.job.candidate, outcome.job.request_id)
            answers[key] = outcome.record.response_text or ""
            requests.setdefault(outcome.job.request_id, request_text(outcome.job.body))
    models = sorted({model for model, _ in answers} - {primary})
    tally = JudgeTally()
    for item in evalset.items:
        base = answers.get((primary, item.item_id))
        if item.method != "judge" or base is None:
            continue
        instructions = with_case_rubric(rubric, item.expect)
        request = requests[item.item_id]
        primary_scores = []
        for model in models:
            mine = answers.get((model, item.item_id))
            if mine is None:
                continue
            first = await _ask(caller, spec, item.item_id, instructions, request, base, mine, tally)
            second = None
            if first is not None and spec.both_orders:
                second = await _ask(
                    caller, spec, item.item_id, instructions, request, mine, base, tally
                )
                if second is None:
                    continue
            if first is None:
                continue
            theirs, ours = average_orders(first, second)
            scorer.add_judgement(model, item.item_id, ours / 10)
            primary_scores.append(theirs / 10)
            tally.judged += 1
        if primary_scores:
            scorer.add_judgement(primary, item.item_id, sum(primary_scores) / len(primary_scores))
    return tally
