"""LLM-as-judge (optional, off by default): a configured model scores a candidate's answer against
the primary's on sampled shadow pairs, off the client path.

Two known biases of judge models are countered. **Position**: each pair is judged twice, once
with the primary's answer first and once with the candidate's first, and the two scores of each
answer are averaged. **Length**: the rubric tells the judge not to reward length, and to mark
answers down for padding. Calls are sampled deterministically (a hash of the pair id), budgeted per
hour, and never block anything: the scores become findings (`analyzer="judge"`) of the pair and
observations of `mirrorgate_judge_score{route, candidate, answer}`.

Each call of the judge model is recorded as an exchange of arm `judge` (the judged request's id
and route, the judge model as target, the pair's id) and counted like any exchange
(`mirrorgate_requests_total`, `mirrorgate_tokens_total`, `mirrorgate_cost_usd_total` with
`arm="judge"`): what the judge costs shows next to what the candidates cost. Readers of client
traffic (the rollout judge's windows, replay, feedback, the report's corrections) read only the
serving arms, so a judge call is never mistaken for one.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from proxy.config import JudgeSpec
from proxy.core import (
    ENDPOINTS,
    JUDGE_ANALYZER,
    JUDGE_SCORE_DELTA,
    Arm,
    ExchangeRecord,
    FindingRecord,
    HourlySpend,
    RecordSink,
    Status,
    TaskSet,
    sampled,
)
from proxy.observability import GatewayMetrics
from proxy.upstream import Attempt, CallContext, ModelCaller

log = logging.getLogger("mirrorgate.judge")

DEFAULT_RUBRIC = """You compare two answers to the same request and score each from 1 to 10.
Judge correctness first (including following the instructions and policies in the request),
then helpfulness and clarity. Do not reward length: a longer answer is not better, and padding,
repetition or needless detail lowers the score. Ignore the order in which answers are shown.
Reply with JSON only: {"score_a": <1-10>, "score_b": <1-10>, "reason": "<one sentence>"}"""

_SCORES = re.compile(r"\{.*\}", re.DOTALL)


def _request_text(payload: dict[str, Any]) -> str:
    messages = payload.get("messages")
    if isinstance(messages, list):
        parts = []
        for message in messages[-6:]:
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                parts.append(f"{message.get('role', 'user')}: {message['content']}")
        return "\n".join(parts)[:20_000]
    return str(payload.get("input") or payload.get("prompt") or "")[:20_000]


def parse_scores(text: str) -> tuple[float, float] | None:
    """(score_a, score_b) from the judge's answer, or None when it did not give both in 1..10."""
    match = _SCORES.search(text)
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
        a, b = float(data["score_a"]), float(data["score_b"])
    except (ValueError, KeyError, TypeError):
        return None
    if not (1 <= a <= 10 and 1 <= b <= 10):
        return None
    return a, b


class Judge:
    """Scores sampled shadow pairs with the configured judge model."""

    def __init__(
        self,
        spec: JudgeSpec,
        caller: ModelCaller,
        sink: RecordSink,
        metrics: GatewayMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self.caller = caller
        self.sink = sink
        """Where the judge's findings and the exchanges of its calls go (the recorder)."""
        self.metrics = metrics
        self.clock = clock
        self.rubric = spec.rubric or DEFAULT_RUBRIC
        self.spend = HourlySpend()
        self.tasks = TaskSet("judge")
        self.provider = caller.clients[spec.model].spec.provider

    def offer(
        self,
        payload: dict[str, Any],
        primary: ExchangeRecord,
        primary_text: str,
        candidate: ExchangeRecord,
        candidate_text: str,
    ) -> bool:
        """Judge this pair in the background if it is sampled and the budget allows."""
        if candidate.pair_id is None or not sampled(candidate.pair_id, "judge", self.spec.sample):
            return False
        if primary.status is not Status.OK or candidate.status is not Status.OK:
            return False
        limit = self.spec.max_usd_per_hour
        if limit is not None and self.spend.last_hour(self.clock()) >= limit:
            return False
        request = _request_text(payload)
        self.tasks.spawn(
            self._judge(request, primary, primary_text, candidate, candidate_text), "pair"
        )
        return True

    async def _judge(
        self,
        request: str,
        primary: ExchangeRecord,
        primary_text: str,
        candidate: ExchangeRecord,
        candidate_text: str,
    ) -> None:
        first = await self._ask(request, primary_text, candidate_text, candidate)  # primary first
        second = await self._ask(request, candidate_text, primary_text, candidate)  # candidate
        if first is None or second is None:
            return
        primary_score = (first[0] + second[1]) / 2
        candidate_score = (first[1] + second[0]) / 2
        scores = self.metrics.judge_score
        scores.labels(candidate.route, candidate.target, "candidate").observe(candidate_score)
        scores.labels(candidate.route, candidate.target, "primary").observe(primary_score)
        now = datetime.now(UTC)
        for name, value in (
            ("candidate_score", candidate_score),
            ("primary_score", primary_score),
            (JUDGE_SCORE_DELTA, candidate_score - primary_score),
            ("position_bias", ((first[0] - second[1]) + (second[0] - first[1])) / 2),
        ):
            self.sink(
                FindingRecord(
                    request_id=candidate.request_id,
                    route=candidate.route,
                    target=candidate.target,
                    arm=Arm.SHADOW,
                    analyzer=JUDGE_ANALYZER,
                    name=name,
                    created_at=now,
                    value=value,
                    detail=f"judged by {self.spec.model}, both orders averaged",
                    pair_id=candidate.pair_id,
                )
            )

    async def _ask(
        self, request: str, answer_a: str, answer_b: str, judged: ExchangeRecord
    ) -> tuple[float, float] | None:
        """One call of the judge model (recorded and counted as an exchange of arm `judge` of the
        judged request); its (score_a, score_b), or None when it gave no usable scores."""
        content = (
            f"Request:\n{request}\n\nAnswer A:\n{answer_a[:20_000]}\n\n"
            f"Answer B:\n{answer_b[:20_000]}"
        )
        if self.provider == "anthropic":
            endpoint = ENDPOINTS["/v1/messages"]
            payload: dict[str, Any] = {
                "system": self.rubric,
                "max_tokens": 200,
                "messages": [{"role": "user", "content": content}],
            }
        else:
            endpoint = ENDPOINTS["/v1/chat/completions"]
            payload = {
                "messages": [
                    {"role": "system", "content": self.rubric},
                    {"role": "user", "content": content},
                ],
                "max_tokens": 200,
                "temperature": 0,
            }
        ctx = CallContext(
            judged.request_id, judged.route, endpoint, payload, False, False, [], tags=("judge",),
            operation_id=judged.operation_id,  # the operation's cost includes its judging
        )  # fmt: skip
        attempt = await self.caller.open(ctx, self.spec.model, Arm.JUDGE)
        attempt.pair_id = judged.pair_id
        record = self.caller.record(ctx, attempt, _http_status(attempt), time.perf_counter(),
                                    own_clock=True)  # fmt: skip
        self.spend.add(self.clock(), record.cost_usd)
        self.metrics.observe(record)
        self.sink(record)
        if attempt.error is not None or attempt.parsed is None:
            log.warning("judge %s failed: %s", self.spec.model, attempt.error_class)
            return None
        scores = parse_scores(self.caller.answer_text(ctx, attempt))
        if scores is None:
            log.warning("judge %s gave no usable scores", self.spec.model)
        return scores

    async def stop(self, timeout_s: float) -> None:
        """Give running judgements `timeout_s`, then cancel the rest."""
        await self.tasks.wait(timeout_s)
        await self.tasks.cancel_all()


def _http_status(attempt: Attempt) -> int:
    """The status a judge call records, as a shadow's does: the model's HTTP status, the gateway's
    error status (502, 504) when the call failed, 0 when nothing answered."""
    if attempt.error is not None:
        return attempt.error.status
    return attempt.response.status_code if attempt.response is not None else 0
