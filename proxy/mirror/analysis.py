"""Rule checks and analyzer plugins on every arm's answers, off the client path.

Each finished exchange is handed to `AnalysisWorker.submit` with its answer (text and tool
calls), and each shadow pair to `submit_pair`. The worker runs on its own thread, so even a slow
check or plugin never holds up the event loop:

- for a request that carried a rule version (a governed route's request with a system prompt:
  one without, such as an embeddings call, carries none and is not checked) it runs the rule
  set's checks for every version plus the version's own (`rules.<r>.checks` +
  `rules.<r>.versions.<v>.checks`), counts each verdict in
  `mirrorgate_check_results_total` and records it (`check_results` table);
- it runs every analyzer plugin named in `analyzers:` (`analyze_exchange`, `analyze_pair`),
  records their findings (`findings` table, `mirrorgate_analyzer_findings_total`); a plugin that
  raises is logged and counted in `mirrorgate_analyzer_errors_total`, and nothing else is affected.

A full queue drops the work and counts it in `mirrorgate_analysis_dropped_total`; it never blocks
the client.

The event loop does not wake the worker for each answer while traffic flows: the worker, once it
has drained the queue, looks again after `POLL_S` on its own timer, and only after a whole period
without work does it sleep until the next answer wakes it. Waking a thread from the loop for every
answer cost the loop ~65 µs per answer at ~190 req/s (py-spy, the GIL holder's samples): the woken
thread preempts the loop on its core while the loop holds the GIL, then waits for it.

Metric labels stay bounded: a version named in config is its own label; other versions
(fingerprints, templates, header values) are `pending` until they pass the rule's
`version_support`, then labelled as they come for the first `MAX_VERSION_LABELS` of a rule, then
`other`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from analyzers import (
    Analyzer,
    AnalyzerFailure,
    Answer,
    Check,
    ExchangeView,
    Finding,
    PairView,
    ToolCall,
    run_safely,
)
from analyzers.checks import compile_check, run_checks
from analyzers.phantom import PhantomRuleCheck
from analyzers.rule_version import extract_system_prompt
from proxy.config import MirrorgateConfig
from proxy.core import CheckRecord, ExchangeRecord, FindingRecord
from proxy.gateway import ExchangeObserver, FinishedExchange, RuleValues, VersionValues
from proxy.observability import GatewayMetrics

log = logging.getLogger("mirrorgate.analysis")

MAX_VERSION_LABELS = 20
PENDING_LABEL = "pending"
"""The `rule_version` label of a version that has not passed `version_support` yet."""
_STOP = object()


class CompiledRules:
    """Every rule set's checks, compiled once at start (the config loader already proved they
    compile).

    phantom_rule checks are compiled unbound and bound per (rule, version) to the values `values`
    knows then (the version's value, the earlier versions'); the bound list is cached until the
    rule's revision changes (a version opened or its value became known), at most
    `BOUND_CACHE_MAX` (rule, version) pairs.
    """

    BOUND_CACHE_MAX = 4096

    def __init__(self, config: MirrorgateConfig, values: RuleValues | None = None) -> None:
        self._base: dict[str, list[Check]] = {}
        self._versions: dict[tuple[str, str], list[Check]] = {}
        self._named: dict[str, frozenset[str]] = {}
        self._values = values
        self._phantom: set[str] = set()
        self._bound: OrderedDict[tuple[str, str], tuple[int, list[Check]]] = OrderedDict()
        self._lock = threading.Lock()
        for name, rule in config.rules.items():
            self._base[name] = [compile_check(_fields(c)) for c in rule.checks]
            self._named[name] = frozenset(rule.versions)
            for version, spec in rule.versions.items():
                self._versions[(name, version)] = [compile_check(_fields(c)) for c in spec.checks]
            checks = [*rule.checks, *(c for v in rule.versions.values() for c in v.checks)]
            if any(c.type == "phantom_rule" for c in checks):
                self._phantom.add(name)

    def checks_for(self, rule: str, version: str) -> list[Check]:
        checks = [*self._base.get(rule, ()), *self._versions.get((rule, version), ())]
        if rule not in self._phantom or self._values is None:
            return checks
        key = (rule, version)
        revision = self._values.revision(rule)
        with self._lock:
            cached = self._bound.get(key)
            if cached is not None and cached[0] == revision:
                self._bound.move_to_end(key)
                return cached[1]
        context = self._values.context(rule, version)
        bound = [_bind(check, version, context) for check in checks]
        with self._lock:
            self._bound[key] = (context.revision if context else revision, bound)
            self._bound.move_to_end(key)
            if len(self._bound) > self.BOUND_CACHE_MAX:
                self._bound.popitem(last=False)
        return bound

    def is_named(self, rule: str, version: str) -> bool:
        return version in self._named.get(rule, frozenset())


def _bind(check: Check, version: str, context: VersionValues | None) -> Check:
    """A phantom_rule check bound to the version's values; any other check as it is."""
    if not isinstance(check, PhantomRuleCheck):
        return check
    if context is None:
        return check.bind(version, None, (), known=False)
    return check.bind(version, context.current, context.earlier, known=context.known)


def _fields(check: Any) -> dict[str, Any]:
    return check.model_dump(by_alias=True, exclude_none=True)  # type: ignore[no-any-return]


def answer_of(endpoint: str, text: str, body: Mapping[str, Any] | None) -> Answer:
    """The answer to check: its text, and the tool calls and reasoning of a non-streamed body
    (chat: `message.reasoning_content`, as OpenAI-compatible providers return it; Responses: the
    summary texts of `reasoning` items; Anthropic: the `thinking` blocks). A stream's reasoning
    is not captured."""
    calls: list[ToolCall] = []
    reasoning: list[str] = []
    if body is not None:
        if endpoint == "chat.completions":
            choices = body.get("choices") or [{}]
            message = choices[0].get("message") if isinstance(choices[0], dict) else None
            if isinstance(message, dict) and isinstance(message.get("reasoning_content"), str):
                reasoning.append(message["reasoning_content"])
            for call in (message or {}).get("tool_calls") or ():
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    calls.append(
                        ToolCall(str(function.get("name", "")), str(function.get("arguments", "")))
                    )
        elif endpoint == "responses":
            for item in body.get("output") or ():
                if isinstance(item, dict) and item.get("type") == "function_call":
                    calls.append(
                        ToolCall(str(item.get("name", "")), str(item.get("arguments", "")))
                    )
                elif isinstance(item, dict) and item.get("type") == "reasoning":
                    for part in item.get("summary") or ():
                        if isinstance(part, dict) and isinstance(part.get("text"), str):
                            reasoning.append(part["text"])
        elif endpoint == "messages":
            for block in body.get("content") or ():
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    arguments = orjson.dumps(block.get("input", {})).decode()
                    calls.append(ToolCall(str(block.get("name", "")), arguments))
                elif isinstance(block, dict) and block.get("type") == "thinking":
                    if isinstance(block.get("thinking"), str):
                        reasoning.append(block["thinking"])
    return Answer(text=text, tool_calls=tuple(calls), reasoning="\n".join(reasoning))


POLL_S = 0.02
"""How long the worker waits, after draining its queue, before it looks again (see the module
docstring): what an answer's checks may lag behind it while traffic flows."""


class AnalysisWorker(ExchangeObserver):
    """Runs rule checks and analyzer plugins on a thread of its own (see the module docstring)."""

    def __init__(
        self,
        rules: CompiledRules,
        analyzers: Sequence[Analyzer],
        metrics: GatewayMetrics,
        sink: Callable[[CheckRecord | FindingRecord], object],
        queue_size: int = 10_000,
    ) -> None:
        self.rules = rules
        self.analyzers = list(analyzers)
        self.metrics = metrics
        self.sink = sink
        self._queue_size = queue_size
        self._items: deque[Any] = deque()
        self._wake = threading.Event()
        self._idle = False
        """The worker sleeps until woken: the next `_put` wakes it."""
        self._labels: dict[str, set[str]] = {}
        self.version_open: Callable[[str, str], bool] | None = None
        """Whether a rule version has passed `version_support` (the rule tracker's `is_open`):
        one that has not is labelled `pending`, so no client-chosen string becomes a label."""
        self._thread = threading.Thread(target=self._run, name="mirrorgate-analysis", daemon=True)
        self.analysed = 0
        """Exchanges and pairs analysed so far (read by tests and the demo)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """Analyse what is queued (up to `timeout_s`), then end the thread."""
        self._items.append(_STOP)
        self._wake.set()
        self._thread.join(timeout_s)

    def exchange_finished(self, done: FinishedExchange) -> None:
        """Every attempt of the client path is analysed (the abandoned one too: its checks say
        what the model answered, though the client never saw it)."""
        record = done.record
        if record.rule is None and not self.analyzers:
            return
        prompt = ""
        if self.analyzers:
            ctx = done.ctx
            prompt = (
                ctx.system_prompt
                if ctx.system_prompt is not None
                else extract_system_prompt(ctx.endpoint.name, ctx.payload)
            )
        self.submit(record, answer_of(done.ctx.endpoint.name, done.text, done.parsed), prompt)

    def submit(self, record: ExchangeRecord, answer: Answer, system_prompt: str = "") -> None:
        """Queue one answer; never blocks (a full queue drops and counts)."""
        if record.rule is None and not self.analyzers:
            return
        self._put(("exchange", record, answer, system_prompt))

    def submit_pair(
        self,
        primary: ExchangeRecord,
        primary_answer: Answer,
        candidate: ExchangeRecord,
        candidate_answer: Answer,
        kind: str,
    ) -> None:
        """Queue one pair for the analyzer plugins; never blocks."""
        if self.analyzers:
            self._put(("pair", primary, primary_answer, candidate, candidate_answer, kind))

    def _put(self, item: tuple[Any, ...]) -> None:
        # On the event loop, once per exchange: a deque append (atomic under the GIL) and, only
        # when the worker sleeps untimed, one wake-up (see the module docstring). Appending
        # before looking at the flag, while the worker raises it before its last look at the
        # queue, loses no item.
        items = self._items
        if len(items) >= self._queue_size:
            self.metrics.analysis_dropped.inc()
            return
        items.append(item)
        if self._idle:
            self._wake.set()

    def _run(self) -> None:
        items = self._items
        while True:
            if not items and not self._wake.wait(POLL_S) and not items:
                # A whole period without work: sleep until `_put` (or `stop`) wakes us.
                self._idle = True
                if not items:
                    self._wake.wait()
                self._idle = False
            self._wake.clear()
            while items:
                item = items.popleft()
                if item is _STOP:
                    return
                try:
                    if item[0] == "exchange":
                        self._exchange(*item[1:])
                    else:
                        self._pair(*item[1:])
                except Exception:
                    log.exception("analysis failed for one answer")
                self.analysed += 1

    def _exchange(self, record: ExchangeRecord, answer: Answer, system_prompt: str) -> None:
        if record.rule is not None and record.rule_version is not None:
            self._check(record, answer)
        if self.analyzers:
            view = _view(record, answer, system_prompt)
            for analyzer in self.analyzers:
                findings, failure = run_safely(analyzer, "exchange", view)
                self._keep(record, analyzer, findings, failure, None)

    def _pair(
        self,
        primary: ExchangeRecord,
        primary_answer: Answer,
        candidate: ExchangeRecord,
        candidate_answer: Answer,
        kind: str,
    ) -> None:
        view = PairView(
            _view(primary, primary_answer, ""),
            _view(candidate, candidate_answer, ""),
            "noise" if kind == "noise" else "shadow",
        )
        for analyzer in self.analyzers:
            findings, failure = run_safely(analyzer, "pair", view)
            self._keep(candidate, analyzer, findings, failure, candidate.pair_id)

    def _keep(
        self,
        record: ExchangeRecord,
        analyzer: Analyzer,
        findings: Sequence[Finding],
        failure: AnalyzerFailure | None,
        pair_id: str | None,
    ) -> None:
        if failure is not None:
            self.metrics.analyzer_errors.labels(failure.analyzer).inc()
            log.warning(
                "analyzer %s failed on %s (%s)",
                failure.analyzer,
                record.request_id,
                failure.message,
            )
            return
        now = datetime.now(UTC)
        for finding in findings:
            self.metrics.analyzer_findings.labels(finding.analyzer, finding.name).inc()
            self.sink(
                FindingRecord(
                    request_id=record.request_id, route=record.route, target=record.target,
                    arm=record.arm, analyzer=finding.analyzer, name=finding.name, created_at=now,
                    value=finding.value, label=finding.label, detail=finding.detail,
                    pair_id=pair_id, severity=finding.severity,
                )
            )  # fmt: skip

    def _check(self, record: ExchangeRecord, answer: Answer) -> None:
        rule, version = record.rule or "", record.rule_version or ""
        checks = self.rules.checks_for(rule, version)
        if not checks:
            return
        label = self._version_label(rule, version)
        now = datetime.now(UTC)
        for result in run_checks(checks, answer):
            self.metrics.check_results.labels(
                record.route, record.target, record.arm.value, rule, label, result.name,
                result.result,
            ).inc()  # fmt: skip
            self.sink(
                CheckRecord(
                    request_id=record.request_id, route=record.route, target=record.target,
                    arm=record.arm, rule=rule, rule_version=version, check=result.name,
                    result=result.result, reason=result.reason, created_at=now,
                    pair_id=record.pair_id, sticky_unit=record.sticky_unit,
                )
            )  # fmt: skip

    def _version_label(self, rule: str, version: str) -> str:
        if self.rules.is_named(rule, version):
            return version
        if self.version_open is not None and not self.version_open(rule, version):
            return PENDING_LABEL
        seen = self._labels.setdefault(rule, set())
        if version in seen:
            return version
        if len(seen) < MAX_VERSION_LABELS:
            seen.add(version)
            return version
        return "other"


def _view(record: ExchangeRecord, answer: Answer, system_prompt: str) -> ExchangeView:
    usage = record.usage
    return ExchangeView(
        route=record.route,
        target=record.target,
        arm=record.arm.value,
        answer=answer,
        endpoint=record.endpoint,
        rule=record.rule,
        rule_version=record.rule_version,
        system_prompt=system_prompt,
        status=record.status.value,
        http_status=record.http_status,
        duration_s=record.duration_s,
        ttft_s=record.ttft_s,
        cost_usd=record.cost_usd,
        input_tokens=usage.input_tokens + usage.cached_input_tokens + usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
    )
