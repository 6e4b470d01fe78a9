"""LLM-as-judge (optional, off by default): a configured model scores a candidate's answer against
the primary's on sampled shadow pairs, off the client path. What it is asked and how its answer
is read is `analyzers.judge_prompt`, shared with replay's judging of rubric cases.

Two known biases of judge models are countered. **Position**: each pair is judged twice (unless
`judge.both_orders` is false), once with the primary's answer first and once with the
candidate's first, and the two scores of each answer are averaged. **Length**: the rubric tells
the judge not to reward length, and to mark answers down for padding. Calls are sampled
deterministically (a hash of the pair id), budgeted per hour, and never block anything: the
scores become findings (`analyzer="judge"`) of the pair and
observations of `mirrorgate_judge_score{route, candidate, answer}`.

Each call of the judge model is recorded as an exchange of arm `judge` (the judged request's id
and route, the judge model as target, the pair's id) and counted like any exchange
(`mirrorgate_requests_total`, `mirrorgate_tokens_total`, `mirrorgate_cost_usd_total` with
`arm="judge"`): what the judge costs shows next to what the candidates cost. Readers of client
traffic (the rollout judge's windows, replay, feedback, the report's corrections) read only the
serving arms, so a judge call is never mistaken for one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from analyzers.judge_prompt import (
    DEFAULT_RUBRIC,
    average_orders,
    judge_request,
    parse_scores,
    request_text,
)
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
        request = request_text(payload)
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
        second = (
            await self._ask(request, candidate_text, primary_text, candidate)  # candidate first
            if self.spec.both_orders
            else None
        )
        if first is None or (self.spec.both_orders and second is None):
            return
        primary_score, candidate_score = average_orders(first, second)
        scores = self.metrics.judge_score
        scores.labels(candidate.route, candidate.target, "candidate").observe(candidate_score)
        scores.labels(candidate.route, candidate.target, "primary").observe(primary_score)
        now = datetime.now(UTC)
        values = [
            ("candidate_score", candidate_score),
            ("primary_score", primary_score),
            (JUDGE_SCORE_DELTA, candidate_score - primary_score),
        ]
        if second is not None:  # one order alone cannot tell the position's bias
            values.append(("position_bias", ((first[0] - second[1]) + (second[0] - first[1])) / 2))
        orders = "both orders averaged" if second is not None else "primary first only"
        for name, value in values:
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
                    detail=f"judged by {self.spec.model}, {orders}",
                    pair_id=candidate.pair_id,
                )
            )

    async def _ask(
        self, request: str, answer_a: str, answer_b: str, judged: ExchangeRecord
    ) -> tuple[float, float] | None:
        """One call of the judge model (recorded and counted as an exchange of arm `judge` of the
        judged request); its (score_a, score_b), or None when it gave no usable scores."""
        path, payload = judge_request(
            self.rubric, request, answer_a, answer_b, anthropic=self.provider == "anthropic"
        )
        endpoint = ENDPOINTS[path]
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
