"""Rule checks on every arm's answers, off the client path.

Each finished exchange whose request carried a rule version is handed to `CheckWorker.submit`
with its answer (text and tool calls). The worker runs on its own thread, so even a slow check
never holds up the event loop: it runs the rule set's checks for every version plus the version's
own (`rules.<r>.checks` + `rules.<r>.versions.<v>.checks`), counts each verdict in
`mirrorgate_check_results_total`, and records it (`check_results` table). A full queue drops the
answer and counts it in `mirrorgate_analysis_dropped_total`; it never blocks the client.

Metric labels stay bounded: a version named in config is its own label; other versions
(fingerprints, header values) are labelled as they come for the first `MAX_VERSION_LABELS` of a
rule, then `other`.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter

from analyzers.answer import Answer, ToolCall
from analyzers.checkbase import Check
from analyzers.checks import compile_check, run_checks
from proxy.config import MirrorgateConfig
from proxy.metrics import GatewayMetrics
from proxy.records import CheckRecord, ExchangeRecord

log = logging.getLogger("mirrorgate.analysis")

MAX_VERSION_LABELS = 20
_STOP = object()


class CompiledRules:
    """Every rule set's checks, compiled once at start (the config loader already proved they
    compile)."""

    def __init__(self, config: MirrorgateConfig) -> None:
        self._base: dict[str, list[Check]] = {}
        self._versions: dict[tuple[str, str], list[Check]] = {}
        self._named: dict[str, frozenset[str]] = {}
        for name, rule in config.rules.items():
            self._base[name] = [compile_check(_fields(c)) for c in rule.checks]
            self._named[name] = frozenset(rule.versions)
            for version, spec in rule.versions.items():
                self._versions[(name, version)] = [compile_check(_fields(c)) for c in spec.checks]

    def checks_for(self, rule: str, version: str) -> list[Check]:
        return [*self._base.get(rule, ()), *self._versions.get((rule, version), ())]

    def is_named(self, rule: str, version: str) -> bool:
        return version in self._named.get(rule, frozenset())


def _fields(check: Any) -> dict[str, Any]:
    return check.model_dump(by_alias=True, exclude_none=True)  # type: ignore[no-any-return]


def answer_of(endpoint: str, text: str, body: Mapping[str, Any] | None) -> Answer:
    """The answer to check: its text, and the tool calls of a non-streamed body."""
    calls: list[ToolCall] = []
    if body is not None:
        if endpoint == "chat.completions":
            choices = body.get("choices") or [{}]
            message = choices[0].get("message") if isinstance(choices[0], dict) else None
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
        elif endpoint == "messages":
            for block in body.get("content") or ():
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    arguments = orjson.dumps(block.get("input", {})).decode()
                    calls.append(ToolCall(str(block.get("name", "")), arguments))
    return Answer(text=text, tool_calls=tuple(calls))


class CheckWorker:
    """Runs rule checks on a thread of its own; see the module docstring."""

    def __init__(
        self,
        rules: CompiledRules,
        metrics: GatewayMetrics,
        registry: CollectorRegistry,
        sink: Callable[[CheckRecord], object],
        queue_size: int = 10_000,
    ) -> None:
        self.rules = rules
        self.metrics = metrics
        self.sink = sink
        self._queue: queue.Queue[Any] = queue.Queue(queue_size)
        self._labels: dict[str, set[str]] = {}
        self._dropped = Counter(
            "mirrorgate_analysis_dropped",
            "Answers not checked because the analysis queue was full.",
            registry=registry,
        )
        self._thread = threading.Thread(target=self._run, name="mirrorgate-checks", daemon=True)
        self.checked = 0
        """Answers checked so far (read by tests and the demo)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """Check what is queued (up to `timeout_s`), then end the thread."""
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)

    def submit(self, record: ExchangeRecord, answer: Answer) -> None:
        """Queue one answer for checking; never blocks (a full queue drops and counts)."""
        if record.rule is None or record.rule_version is None:
            return
        try:
            self._queue.put_nowait((record, answer))
        except queue.Full:
            self._dropped.inc()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            try:
                self._check(*item)
            except Exception:
                log.exception("rule checks failed for one answer")

    def _check(self, record: ExchangeRecord, answer: Answer) -> None:
        rule, version = record.rule or "", record.rule_version or ""
        checks = self.rules.checks_for(rule, version)
        if not checks:
            self.checked += 1
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
                    pair_id=record.pair_id,
                )
            )  # fmt: skip
        self.checked += 1

    def _version_label(self, rule: str, version: str) -> str:
        if self.rules.is_named(rule, version):
            return version
        seen = self._labels.setdefault(rule, set())
        if version in seen:
            return version
        if len(seen) < MAX_VERSION_LABELS:
            seen.add(version)
            return version
        return "other"
