"""Scoring an evaluation set's answers, each by its item's method (`score`).

`text` and `json` items are scored by `analyzers.evalscore` alone. A `checks` item is scored by
the rule checks live traffic of its `route` gets: the rule set governing the route (the first in
config order that lists it, as the gateway binds them), its version resolved from the item's
system prompt as the gateway resolves it (`analyzers.rule_version.resolve_version`; there are no
request headers offline, so a `header:` rule falls back to `match_prompt` and the fingerprint),
and the rule's checks plus that version's, compiled as the analysis worker compiles them
(`analyzers.checks`). A prompt without a system message has no version: only the rule's own
checks run. An item of any other method that names a governed route gets the same checks, and
fails when one fails (a correct answer that breaks the rule is not correct). A `judge` item is
scored by the judge's verdicts handed in (`add_judgement`), unscored without one. Pure: no I/O,
the config is read once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analyzers import Answer, Check
from analyzers.checkbase import CheckResult
from analyzers.checks import compile_check, run_checks
from analyzers.evalscore import (
    AnswerScore,
    judged,
    score_answer,
    score_checks,
    score_json,
    unjudged,
    with_checks,
)
from analyzers.rule_version import extract_system_prompt, resolve_version
from proxy.config import MirrorgateConfig, RuleSpec

from .evalset import EvalItem, EvalSet
from .runner import JobOutcome

PASS_SCORE = 0.6
"""A `judge` item passes at a judge score of 6 out of 10 or more."""


@dataclass(frozen=True, slots=True)
class _RouteRule:
    name: str
    spec: RuleSpec
    patterns: dict[str, re.Pattern[str]]
    ignore: tuple[re.Pattern[str], ...]
    base: tuple[Check, ...]
    versions: dict[str, tuple[Check, ...]]


def _fields(check: Any) -> dict[str, Any]:
    return check.model_dump(by_alias=True, exclude_none=True)  # type: ignore[no-any-return]


class RouteChecks:
    """Each governed route's rule set, compiled once."""

    def __init__(self, config: MirrorgateConfig) -> None:
        self._by_route: dict[str, _RouteRule] = {}
        for name, spec in config.rules.items():
            rule = _RouteRule(
                name,
                spec,
                {v: re.compile(s.match_prompt) for v, s in spec.versions.items() if s.match_prompt},
                tuple(re.compile(p) for p in spec.fingerprint_ignore),
                tuple(compile_check(_fields(c)) for c in spec.checks),
                {
                    v: tuple(compile_check(_fields(c)) for c in s.checks)
                    for v, s in spec.versions.items()
                },
            )
            for route in spec.routes:
                self._by_route.setdefault(route, rule)

    def governs(self, route: str) -> bool:
        return route in self._by_route

    def resolve(
        self, route: str, endpoint: str, body: Mapping[str, Any]
    ) -> tuple[str, str | None, tuple[Check, ...]]:
        """(rule, version or None, the checks to run) for a request of `route`."""
        rule = self._by_route[route]
        prompt = extract_system_prompt(endpoint, body)
        resolved = resolve_version(rule.spec.version, (), prompt, rule.patterns, rule.ignore)
        version = resolved.version if resolved is not None else None
        extra = rule.versions.get(version, ()) if version is not None else ()
        return rule.name, version, (*rule.base, *extra)


class EvalScorer:
    """Scores the outcomes of one evaluation set's run."""

    def __init__(self, evalset: EvalSet, checks: RouteChecks) -> None:
        self._items: dict[str, EvalItem] = {item.item_id: item for item in evalset.items}
        self._checks = checks
        self._judged: dict[tuple[str, str], float] = {}

    def score(self, outcome: JobOutcome) -> AnswerScore | None:
        """The answer's score; None when the call failed (no answer to score)."""
        reference = outcome.job.reference
        if not outcome.ok or outcome.record is None or reference is None:
            return None
        answer = outcome.record.response_text or ""
        item = self._items.get(outcome.job.request_id)
        if item is None:
            return score_answer(answer, reference.text)
        route = item.route or ""
        results: tuple[CheckResult, ...] = ()
        if self._checks.governs(route):
            _, _, checks = self._checks.resolve(route, outcome.job.endpoint.name, outcome.job.body)
            results = tuple(run_checks(checks, Answer(answer)))
        if item.method == "checks":
            return score_checks(answer, reference.text, results)
        if item.method == "judge":
            verdict = self._judged.get((outcome.job.candidate, item.item_id))
            scored = unjudged(answer) if verdict is None else judged(answer, verdict, PASS_SCORE)
            return with_checks(scored, results) if verdict is not None else scored
        if item.method == "json":
            return with_checks(score_json(answer, item.expect_value), results)
        return with_checks(score_answer(answer, reference.text), results)

    def add_judgement(self, model: str, item_id: str, score: float) -> None:
        """The judge's score (0..1) of `model`'s answer to a `judge` item."""
        self._judged[(model, item_id)] = score
