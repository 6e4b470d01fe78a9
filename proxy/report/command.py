"""`mirrorgate report`: compare the arms of every route over a window of recorded traffic.

`run_report` reads the window from the store — exchanges, pairs, rule check verdicts, feedback,
the rule-change events, the probed rules' rule-flip probe counts and the rollout history — and
`build_report` groups them by route into the records of `proxy.report.model`: arms
(`analyzers.summary`; offline replay and eval answers in arms of their own), agreement and
LLM-judge scores per candidate arm (`proxy.report.agreement`), checks by rule version
(`proxy.report.checks`), context awareness per probed rule (`proxy.report.awareness`),
corrections and ratings (`proxy.report.feedback`) and rollouts on a time axis
(`proxy.report.rollouts`). Live routes come first, evaluation sets' pseudo-routes after them.
`proxy.report.markdown` or `proxy.report.html` turns the `Report` into text. How each number is
computed is written down in docs/report.md.

The report needs only the store: the config is loaded without secrets (no provider key or token
variable has to be set).

The report only reads: it never migrates or creates the database, so pointing it at a production
store is safe. Every problem the user can fix (bad `--since`, a missing database, an output path
that cannot be written) is one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from analyzers.summary import ArmSummary
from proxy.config import ConfigError, MirrorgateConfig, load_config
from proxy.core import (
    JUDGE_ANALYZER,
    CheckRecord,
    ExchangeRecord,
    FeedbackRecord,
    FindingRecord,
    PairRecord,
    Status,
)
from proxy.core import parse_since as _parse_since
from proxy.store import (
    EvalRun,
    EvalStore,
    ExperimentStore,
    FeedbackStore,
    ProbeStore,
    RolloutStore,
    RuleEventStore,
    Store,
    StoreError,
)

from .agreement import build_agreement, build_judge_scores
from .awareness import ProbeCounts, build_context_awareness
from .checks import build_rule_versions
from .experiments import ExperimentReport
from .feedback import build_feedback
from .html import render_html
from .markdown import render_markdown
from .model import (
    ArmReport,
    Report,
    RouteReport,
    RuleChange,
    arm_key,
    report_arm,
    route_key,
)
from .rollouts import RolloutReport, build_rollouts

MAX_ROWS = 1_000_000
"""At most this many exchanges (and as many pairs, and check verdicts) are read; a larger window
is cut, and says so."""


class ReportError(Exception):
    """A problem the user can fix; the message is printed as is and the command exits 1."""


def parse_since(value: str, now: datetime) -> datetime:
    """`--since`, read as `proxy.core.parse_since` reads it; a bad value is a ReportError."""
    try:
        return _parse_since(value, now)
    except ValueError as exc:
        raise ReportError(f"--since {exc}") from None


def build_report(
    exchanges: Sequence[ExchangeRecord],
    pairs: Sequence[PairRecord],
    *,
    generated_at: datetime,
    since: datetime | None = None,
    route_filter: str | None = None,
    store: str = "",
    truncated_from: int | None = None,
    checks: Sequence[CheckRecord] = (),
    feedback: Sequence[FeedbackRecord] = (),
    changes: Sequence[RuleChange] = (),
    agreement_modes: Mapping[str, str] | None = None,
    findings: Sequence[FindingRecord] = (),
    probes: Mapping[str, Mapping[str, Mapping[str, ProbeCounts]]] | None = None,
    rollouts: Mapping[str, RolloutReport] | None = None,
    experiments: Mapping[str, ExperimentReport] | None = None,
    evaluations: Sequence[EvalRun] = (),
) -> Report:
    """Group the window's records by route and arm · target, and summarise each group.

    `changes` are every rule-change event in the store (old ones say when a version began);
    `agreement_modes` each route's agreement mode (a route not in it: `normalized`);
    everything else is the window's (`findings`: the LLM judge's; `probes`: route → rule →
    target → its (followed, stuck, other) rule-flip probes; `rollouts`: each route's rollout
    history, `proxy.report.rollouts.build_rollouts`; `experiments`: each route's latest
    experiment in the window).
    """
    experiment_by_route = experiments or {}
    probes = probes or {}
    modes = agreement_modes or {}
    rollout_by_route = rollouts or {}
    by_route: dict[str, list[ExchangeRecord]] = defaultdict(list)
    for record in exchanges:
        by_route[record.route].append(record)
    pairs_by_route: dict[str, list[PairRecord]] = defaultdict(list)
    for pair in pairs:
        pairs_by_route[pair.route].append(pair)
    checks_by_route: dict[str, list[CheckRecord]] = defaultdict(list)
    for check in checks:
        checks_by_route[check.route].append(check)
    feedback_by_route: dict[str, list[FeedbackRecord]] = defaultdict(list)
    for item in feedback:
        feedback_by_route[item.route].append(item)

    findings_by_route: dict[str, list[FindingRecord]] = defaultdict(list)
    for finding in findings:
        findings_by_route[finding.route].append(finding)

    routes = []
    named = (
        set(by_route) | set(pairs_by_route) | set(checks_by_route) | set(probes)
        | set(rollout_by_route) | set(experiment_by_route)
    )  # fmt: skip
    for route in sorted(named, key=route_key):
        records = by_route.get(route, [])
        groups: dict[tuple[str, str], list[ExchangeRecord]] = defaultdict(list)
        for record in records:
            groups[(report_arm(record.arm, record.tags), record.target)].append(record)
        arms = tuple(
            _arm_report(arm, target, groups[(arm, target)])
            for arm, target in sorted(groups, key=lambda k: arm_key(*k))
        )
        mode = modes.get(route, "normalized")
        agreement = build_agreement(arms, pairs_by_route.get(route, []), mode)
        routes.append(
            RouteReport(
                route=route,
                arms=arms,
                candidates=agreement.candidates,
                agreement_mode=mode,
                noise=agreement.noise,
                noise_pairs=agreement.noise_pairs,
                unpaired=agreement.unpaired,
                rule_versions=build_rule_versions(
                    route,
                    checks_by_route.get(route, []),
                    changes,
                    rules={r.rule for r in records if r.rule is not None},
                    since=since,
                ),
                feedback=build_feedback(records, feedback_by_route.get(route, [])),
                judge_scores=build_judge_scores(findings_by_route.get(route, [])),
                context_awareness=build_context_awareness(probes.get(route, {})),
                rollout=rollout_by_route.get(route),
                experiment=experiment_by_route.get(route),
            )
        )
    started = [record.started_at for record in exchanges]
    return Report(
        generated_at=generated_at,
        since=since,
        route_filter=route_filter,
        store=store,
        routes=tuple(routes),
        exchanges=len(exchanges),
        pairs=len(pairs),
        first_at=min(started, default=None),
        last_at=max(started, default=None),
        truncated_from=truncated_from,
        checks=len(checks),
        feedback=len(feedback),
        evaluations=tuple(evaluations),
    )


def _arm_report(arm: str, target: str, records: Sequence[ExchangeRecord]) -> ArmReport:
    durations = sorted(r.duration_s for r in records)
    ttfts = sorted(r.ttft_s for r in records if r.streamed and r.ttft_s is not None)
    failures: dict[str, int] = defaultdict(int)
    for r in records:
        if r.status is not Status.OK:
            failures[r.status.value] += 1
    summary = ArmSummary.from_samples(
        durations_s=[r.duration_s for r in records],
        failed=[r.status is not Status.OK for r in records],
        ttfts_s=ttfts,
        costs_usd=[r.cost_usd for r in records],
        tokens_in=[
            r.usage.input_tokens + r.usage.cached_input_tokens + r.usage.cache_write_tokens
            for r in records
        ],
        tokens_out=[r.usage.output_tokens for r in records],
    )
    return ArmReport(
        arm=arm,
        target=target,
        summary=summary,
        durations_s=tuple(durations),
        ttfts_s=tuple(ttfts),
        failures=tuple(sorted(failures.items(), key=lambda item: (-item[1], item[0]))),
    )


# ---- reading the store ----


class _ConfigProblemError(Exception):
    """The config could not be loaded; its problems are already on stderr."""


def _load_config(args: argparse.Namespace) -> MirrorgateConfig:
    """The config as the report needs it: the store URL, the routes' names and agreement modes.
    No provider key or gateway secret is needed (the report calls no model)."""
    path = args.config or os.environ.get("MIRRORGATE_CONFIG") or "mirrorgate.yaml"
    try:
        return load_config(path, secrets=False)
    except ConfigError as exc:
        print(f"mirrorgate: {path}: {len(exc.problems)} problem(s)", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        raise _ConfigProblemError from exc


def _rule_changes(store: Store) -> list[RuleChange]:
    """Every rule-change event, oldest first (one per rule version: there are few)."""
    events = sorted(RuleEventStore(store).events(), key=lambda event: event.first_seen_at)
    return [
        RuleChange(
            rule=event.rule,
            version=event.version,
            previous_version=event.previous_version,
            first_seen_at=event.first_seen_at,
            route=event.route,
        )
        for event in events
    ]


def _read(args: argparse.Namespace, cfg: MirrorgateConfig, now: datetime) -> Report:
    since = parse_since(args.since, now) if args.since else None
    with Store.existing(cfg.store.url) as store:
        exchanges = store.query(route=args.route, since=since, limit=MAX_ROWS)
        total = store.count(route=args.route, since=since) if len(exchanges) == MAX_ROWS else None
        pairs = store.query_pairs(route=args.route, since=since, limit=MAX_ROWS)
        checks = store.query_checks(route=args.route, since=since, limit=MAX_ROWS)
        feedback = [
            item
            for item in FeedbackStore(store).query(route=args.route)
            if since is None or item.created_at >= since
        ]
        changes = _rule_changes(store)
        events, verdicts = RolloutStore(store).history(route=args.route, since=since)
        judged = store.query_findings(
            route=args.route, analyzer=JUDGE_ANALYZER, since=since, limit=MAX_ROWS
        )
        probes = _probe_counts(ProbeStore(store), cfg, args.route, since)
        experiments = _experiments(ExperimentStore(store), args.route, since)
        evaluations = EvalStore(store).runs(route=args.route, limit=200)
    return build_report(
        exchanges,
        pairs,
        generated_at=now,
        since=since,
        route_filter=args.route,
        store=store.display_url,
        truncated_from=total if total is not None and total > MAX_ROWS else None,
        checks=checks,
        feedback=feedback,
        changes=changes,
        agreement_modes={name: spec.agreement.mode for name, spec in cfg.routes.items()},
        findings=judged,
        probes=probes,
        rollouts=build_rollouts(events, verdicts),
        experiments=experiments,
        evaluations=evaluations,
    )


def _experiments(
    store: ExperimentStore, route: str | None, since: datetime | None
) -> dict[str, ExperimentReport]:
    """route → its latest experiment running in the window, with its last decision."""
    latest: dict[str, ExperimentReport] = {}
    for state in store.history(route=route, since=since, limit=200):
        if state.route in latest:
            continue  # newest first: an older one of the route
        decision, _at = store.decision(state.experiment_id)
        events = store.events(state.experiment_id, 50)
        latest[state.route] = ExperimentReport(state, decision, tuple(events))
    return latest


def _probe_counts(
    probes: ProbeStore, cfg: MirrorgateConfig, route_filter: str | None, since: datetime | None
) -> dict[str, dict[str, dict[str, ProbeCounts]]]:
    """route → rule → target → (followed, stuck, other), for every rule of `cfg` with probes."""
    counts: dict[str, dict[str, dict[str, ProbeCounts]]] = defaultdict(dict)
    for name, rule in cfg.rules.items():
        if rule.probes is None:
            continue
        for route in rule.routes:
            if route_filter is not None and route != route_filter:
                continue
            tallies = probes.tallies(name, route=route, since=since)
            if tallies:
                counts[route][name] = {
                    target: (t.followed, t.stuck, t.other) for target, t in tallies.items()
                }
    return dict(counts)


# ---- the command ----


def run_report(args: argparse.Namespace) -> int:
    """The `report` command: 0 when the report was written (an empty window included), 1 for a
    problem the user can fix, named on stderr."""
    output = Path(args.output) if args.output else None
    try:
        if args.since:
            parse_since(args.since, datetime.now(UTC))  # a typo fails before any I/O
        if output is not None and not output.parent.is_dir():
            raise ReportError(f"--output {output}: the directory {output.parent} does not exist")
        cfg = _load_config(args)
        report = _read(args, cfg, datetime.now(UTC))
        text = render_html(report) if args.format == "html" else render_markdown(report)
        if output is None:
            sys.stdout.write(text)
        else:
            try:
                output.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise ReportError(f"--output {output}: {exc.strerror or exc}") from exc
            print(f"mirrorgate: report written to {output}", file=sys.stderr)
    except _ConfigProblemError:
        return 1
    except ReportError as exc:
        print(f"mirrorgate: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"mirrorgate: cannot read the store: {exc}", file=sys.stderr)
        return 1
    if not report.routes:
        note = "mirrorgate: no exchanges in this window"
        if args.route is not None and args.route not in cfg.routes:
            note += f" (route {args.route!r} is not in the config)"
        print(note, file=sys.stderr)
    return 0
