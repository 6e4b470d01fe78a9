"""`mirrorgate replay`: send recorded traffic, or an evaluation set, to candidate models offline.

    mirrorgate replay --candidate cand-a [--candidate cand-b] [--route R] [--since 6h] [--limit N]
    mirrorgate replay --candidate cand-a --from-file requests.jsonl
    mirrorgate replay --candidate cand-a --candidate cand-b --eval-set shipping.jsonl

The pieces: `replay_source` (the store or a JSONL file) and `evalset` turn their input into
`ReplayJob`s; `replay_resume` drops the ones a previous run already stored; `replay_runner` sends
the rest with bounded concurrency and per-candidate budgets, writing each answer and its
comparison through `replay_writer`; `replay_summary` prints the table. docs/replay.md is the
user's guide.

Exit codes: 0 done (candidate errors are results, not failures), 1 a problem the user can fix
(named on stderr: config, unknown candidate, wrong wire format, unreadable file, store), 2 a usage
error, 130 interrupted by SIGINT and 143 by SIGTERM (what was done is stored; rerun to finish).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from proxy.config import (
    ConfigError,
    JudgeSpec,
    MirrorgateConfig,
    ModelSpec,
    agreement_spec,
    load_config,
    model_key_problems,
)
from proxy.core import parse_since
from proxy.store import EvalRun, EvalStore, Store, StoreError
from proxy.upstream import ModelCaller, UpstreamClient, shared_ssl_context

from .evaljudge import JudgeTally, judge_cases
from .evalruns import SetIdentity, SetProblem, config_fingerprint, identify, strata_scores
from .evalscoring import EvalScorer, RouteChecks
from .evalset import EvalSet, read_eval_set
from .interruption import SignalStop
from .job import ReplayJob
from .progress import ProgressBar
from .resume import pending_jobs
from .runner import Budget, JobOutcome, ReplayRunner, RunResult
from .source import ReplaySource, from_file, from_store, jobs_for
from .summary import render_eval, render_replay
from .writer import ResultWriter

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}
_REPLAY_HINT = "replay to candidates of the recorded provider, or narrow the requests with --route"
_EVAL_HINT = "give such items a string 'input' (and 'system'), which suits either provider"


class ReplayProblem(Exception):
    """Something the user can fix; the message names it (exit 1)."""


class UsageProblem(Exception):
    """Options that do not go together, or a value out of range (exit 2)."""


@dataclass(frozen=True, slots=True)
class Judging:
    """The judge's part of an evaluation run: its spec, the primary every candidate is judged
    against, the set and the scorer its verdicts go to."""

    spec: JudgeSpec
    primary: str
    evalset: EvalSet
    scorer: EvalScorer


@dataclass(frozen=True, slots=True)
class Plan:
    """What a run will do, decided before anything is sent."""

    jobs: list[ReplayJob]
    heading: list[str]
    evalset: EvalSet | None = None
    identity: SetIdentity | None = None


def run_replay(
    args: argparse.Namespace, *, on_result: Callable[[JobOutcome], None] | None = None
) -> int:
    """Run `mirrorgate replay` with parsed `args`; return the exit code.

    `on_result` is called after each answer is queued for writing (a hook for tests).
    """
    try:
        return _run(args, on_result)
    except UsageProblem as exc:
        print(f"mirrorgate replay: {exc}", file=sys.stderr)
        return 2
    except ReplayProblem as exc:
        print(f"mirrorgate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the run started: nothing was sent
        print("mirrorgate: interrupted", file=sys.stderr)
        return EXIT_CODES["SIGINT"]


def _run(args: argparse.Namespace, on_result: Callable[[JobOutcome], None] | None) -> int:
    since = _check_usage(args)
    config_path = args.config or os.environ.get("MIRRORGATE_CONFIG") or "mirrorgate.yaml"
    try:
        # Only the candidates are called: their keys are checked, no other model's.
        config = load_config(config_path, secrets=False)
        candidates = _candidates(config, config_path, args.candidate)
        missing = model_key_problems(config, candidates, os.environ)
        if missing:
            raise ConfigError(missing)
    except ConfigError as exc:
        lines = [f"{config_path}: {len(exc.problems)} problem(s)"]
        raise ReplayProblem("\n  ".join(lines + [str(p) for p in exc.problems])) from None
    try:
        store = Store(config.store.url)
    except StoreError as exc:
        raise ReplayProblem(f"store: {exc}") from None
    try:
        store.migrate()
        plan = _plan(args, config, store, candidates, since)
        if not plan.jobs:
            print("\n".join([*plan.heading, "nothing left to send"]))
            return 0
        limits, sources = _budgets(config, candidates, args.max_usd)
        budget = Budget(limits)
        # Signals stop the run cleanly, and cannot cut the summary short.
        scorer = EvalScorer(plan.evalset, RouteChecks(config)) if plan.evalset else None
        judging = _judging(config, plan, scorer)
        with SignalStop() as signals:
            run = _execute(
                config, store, candidates, plan.jobs, budget, args, on_result, signals, judging
            )
            result, tally = asyncio.run(run)
            if plan.evalset is not None and scorer is not None:
                summary = render_eval(plan.evalset, candidates, result, budget, sources, scorer)
                summary += _judge_line(judging, tally)
                if plan.identity is not None and result.stopped_by is None:
                    summary += _archive(config, store, plan, candidates, result, scorer)
            else:
                summary = render_replay(plan.heading, candidates, result, budget, sources)
            sys.stdout.write(summary)
            sys.stdout.flush()
    except StoreError as exc:
        raise ReplayProblem(f"store: {exc}") from None
    finally:
        store.close()
    if result.stopped_by in EXIT_CODES:
        return EXIT_CODES[result.stopped_by]
    return 1 if result.store_error is not None else 0


def _judging(config: MirrorgateConfig, plan: Plan, scorer: EvalScorer | None) -> Judging | None:
    """Whether the set's `judge` cases are judged: with a `judge` section and the primary of
    the set's route beside the candidates (its answer is what each is judged against)."""
    evalset, identity = plan.evalset, plan.identity
    if evalset is None or scorer is None or config.judge is None:
        return None
    if not any(item.method == "judge" for item in evalset.items):
        return None
    route = config.routes.get(identity.route or "") if identity is not None else None
    if route is None:
        return None
    missing = model_key_problems(config, [config.judge.model], os.environ)
    if missing:
        raise ReplayProblem("the judge: " + "; ".join(str(p) for p in missing))
    return Judging(config.judge, route.primary, evalset, scorer)


def _judge_line(judging: Judging | None, tally: JudgeTally | None) -> str:
    if judging is None:
        return ""
    if tally is None:
        return "judge: not run (the run stopped early); its cases are not scored\n"
    orders = "both orders" if judging.spec.both_orders else "primary first only"
    return (
        f"judge {judging.spec.model}: {tally.judged} answers judged against "
        f"{judging.primary} ({orders}), {tally.calls} calls, {tally.failed} unusable, "
        f"${tally.cost_usd:.4f}\n"
    )


def _archive(
    config: MirrorgateConfig,
    store: Store,
    plan: Plan,
    candidates: Sequence[str],
    result: RunResult,
    scorer: EvalScorer,
) -> str:
    """Store the run, one row per model (`mirrorgate evalset history` shows them)."""
    identity, evalset = plan.identity, plan.evalset
    assert identity is not None and evalset is not None
    route = config.routes.get(identity.route or "")
    started = datetime.now(UTC)
    group = f"{started.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    runs = [
        EvalRun(
            run_group=group,
            set_name=identity.name,
            set_version=identity.version,
            set_hash=identity.content_hash,
            route=identity.route,
            model=name,
            role="primary" if route is not None and name == route.primary else "candidate",
            config_fingerprint=config_fingerprint(config, name, identity.route),
            started_at=started,
            strata=strata_scores(evalset, name, result.outcomes, scorer),
        )
        for name in candidates
    ]
    EvalStore(store).add_runs(runs)
    return (
        f"stored as evaluation run {group} of set {identity.name} v{identity.version} "
        "(mirrorgate evalset history)\n"
    )


def _check_usage(args: argparse.Namespace) -> datetime | None:
    if args.concurrency < 1:
        raise UsageProblem(f"--concurrency must be at least 1, not {args.concurrency}")
    if args.limit is not None and args.limit < 1:
        raise UsageProblem(f"--limit must be at least 1, not {args.limit}")
    if args.max_usd is not None and not args.max_usd > 0:
        raise UsageProblem(f"--max-usd must be more than 0, not {args.max_usd}")
    if args.from_file and args.eval_set:
        raise UsageProblem("--from-file and --eval-set do not go together")
    if args.eval_set and (args.route or args.since):
        raise UsageProblem("--route and --since select recorded traffic, not evaluation items")
    if args.from_file and args.since:
        raise UsageProblem("--since selects recorded traffic in the store, not lines of a file")
    if args.since is None:
        return None
    try:
        return parse_since(args.since, datetime.now(UTC))
    except ValueError as exc:
        raise UsageProblem(f"--since: {exc}") from None


def _candidates(config: MirrorgateConfig, path: str, names: Sequence[str]) -> list[str]:
    candidates = list(dict.fromkeys(names))
    unknown = [name for name in candidates if name not in config.models]
    if unknown:
        known = ", ".join(sorted(config.models))
        listed = ", ".join(f"'{name}'" for name in unknown)
        raise ReplayProblem(f"candidate {listed} is not a model in {path} (models: {known})")
    return candidates


def _plan(
    args: argparse.Namespace,
    config: MirrorgateConfig,
    store: Store,
    candidates: list[str],
    since: datetime | None,
) -> Plan:
    specs = {name: config.models[name] for name in candidates}
    if args.eval_set:
        try:
            identity = identify(Path(args.eval_set))
            evalset = read_eval_set(identity.cases_path, limit=args.limit)
        except SetProblem as exc:
            raise ReplayProblem(str(exc)) from None
        except OSError as exc:
            raise ReplayProblem(f"cannot read {args.eval_set}: {exc.strerror or exc}") from None
        _report_problems(evalset.problems)
        if not evalset.items:
            raise ReplayProblem(f"{args.eval_set}: no usable items")
        _check_rule_routes(args.eval_set, evalset, config)
        evalset = replace(evalset, name=identity.name)
        route = config.routes.get(identity.route or "")
        if route is not None and route.primary not in candidates:
            # Side by side with the primary on the same cases: the gate compares the two.
            candidates.insert(0, route.primary)
            specs = {name: config.models[name] for name in candidates}
        jobs = evalset.jobs(specs)
        _check_wire_formats(jobs, specs, _EVAL_HINT)
        heading = [f"evaluation set {evalset.name}: {len(evalset.items)} items"]
        return Plan(jobs, heading, evalset, identity)
    if args.from_file:
        try:
            source = from_file(Path(args.from_file), route=args.route, limit=args.limit)
        except OSError as exc:
            raise ReplayProblem(f"cannot read {args.from_file}: {exc.strerror or exc}") from None
        _report_problems(source.problems)
        origin = f"file {args.from_file}"
    else:
        source = from_store(store, route=args.route, since=since, limit=args.limit)
        origin = "the store"
    jobs = jobs_for(source.requests, candidates)
    _check_wire_formats(jobs, specs, _REPLAY_HINT)
    jobs, replayed = pending_jobs(store, jobs)
    return Plan(jobs, _heading(origin, args, since, source, candidates, replayed))


def _heading(
    origin: str,
    args: argparse.Namespace,
    since: datetime | None,
    source: ReplaySource,
    candidates: Sequence[str],
    replayed: Counter[str],
) -> list[str]:
    filters = [
        f"route {args.route}" if args.route else "",
        f"since {since.isoformat(timespec='seconds')}" if since else "",
        f"newest {args.limit}" if args.limit and not args.from_file else "",
        f"first {args.limit}" if args.limit and args.from_file else "",
    ]
    selected = ", ".join(f for f in filters if f)
    lines = [
        f"replay: {len(source.requests)} request(s) from {origin}"
        + (f" ({selected})" if selected else "")
        + f" to {len(candidates)} candidate(s)"
    ]
    if source.without_body:
        lines.append(
            f"skipped: {source.without_body} recorded request(s) without a stored body "
            "(store.bodies: none when they were recorded)"
        )
    if source.problems:
        lines.append(f"skipped: {len(source.problems)} unusable line(s) (see stderr)")
    if replayed:
        done = ", ".join(f"{name} {replayed[name]}" for name in candidates if replayed[name])
        lines.append(f"already replayed by an earlier run (skipped): {done}")
    return lines


def _check_rule_routes(path: str, evalset: EvalSet, config: MirrorgateConfig) -> None:
    """A `score: checks` item names a route that a rule set governs."""
    governed = RouteChecks(config)
    problems = [
        f"{path}: item '{item.item_id}': route '{item.route}' "
        + ("has no rule set" if item.route in config.routes else "is not in the config")
        + " (score: checks runs the route's rule checks)"
        for item in evalset.items
        if item.method == "checks" and not governed.governs(item.route or "")
    ]
    if problems:
        raise ReplayProblem("\n  ".join(problems))


def _report_problems(problems: Sequence[str]) -> None:
    for problem in problems:
        print(f"mirrorgate: {problem}", file=sys.stderr)


def _check_wire_formats(jobs: Sequence[ReplayJob], specs: dict[str, ModelSpec], hint: str) -> None:
    """Candidates must speak each request's wire format: mirrorgate does not translate."""
    mismatched: Counter[tuple[str, str]] = Counter()
    for job in jobs:
        if specs[job.candidate].provider != job.endpoint.wire:
            mismatched[(job.candidate, job.endpoint.name)] += 1
    if not mismatched:
        return
    lines = [
        f"candidate '{name}' speaks {specs[name].provider}, but {count} request(s) use the "
        f"{endpoint} endpoint ({'anthropic' if endpoint == 'messages' else 'openai'} wire format)"
        for (name, endpoint), count in sorted(mismatched.items())
    ]
    lines.append("mirrorgate does not translate between wire formats: " + hint)
    raise ReplayProblem("\n  ".join(lines))


def _budgets(
    config: MirrorgateConfig, candidates: Sequence[str], max_usd: float | None
) -> tuple[dict[str, float | None], dict[str, str]]:
    """Each candidate's spending limit for this run, and where it comes from."""
    limits: dict[str, float | None] = {}
    sources: dict[str, str] = {}
    for name in candidates:
        if max_usd is not None:
            limits[name], sources[name] = max_usd, "--max-usd"
            continue
        limits[name] = None
        for route_name, route in config.routes.items():
            for i, shadow in enumerate(route.shadows):
                per_hour = shadow.max_usd_per_hour
                if shadow.model != name or per_hour is None:
                    continue
                current = limits[name]
                if current is None or per_hour < current:
                    limits[name] = per_hour
                    sources[name] = f"routes.{route_name}.shadows[{i}].max_usd_per_hour"
    return limits, sources


async def _execute(
    config: MirrorgateConfig,
    store: Store,
    candidates: Sequence[str],
    jobs: list[ReplayJob],
    budget: Budget,
    args: argparse.Namespace,
    on_result: Callable[[JobOutcome], None] | None,
    signals: SignalStop,
    judging: Judging | None = None,
) -> tuple[RunResult, JudgeTally | None]:
    called = list(dict.fromkeys([*candidates, *([judging.spec.model] if judging else [])]))
    specs = [config.models[name] for name in called]
    tls = shared_ssl_context() if any(s.base_url.startswith("https:") for s in specs) else None
    clients = {name: UpstreamClient(name, config.models[name], None, tls) for name in called}
    caller = ModelCaller(clients, keep_bodies=True)  # the writer applies store.bodies
    progress = ProgressBar(len(jobs), sys.stderr, label="eval" if args.eval_set else "replay")
    runner = ReplayRunner(
        caller,
        ResultWriter(store, config.store.bodies),
        budget,
        concurrency=args.concurrency,
        progress=progress,
        on_result=on_result,
        agreements={name: agreement_spec(r.agreement) for name, r in config.routes.items()},
    )

    def interrupted(name: str) -> None:
        first = not runner.stopping
        runner.stop(name)
        if first:
            message = f"{name}: not sending any more; waiting for the calls in flight"
            message += " (again to abandon them)"
        else:
            message = f"{name}: abandoning the calls in flight"
        print(f"\nmirrorgate: {message}", file=sys.stderr, flush=True)

    signals.attach(asyncio.get_running_loop(), interrupted)
    try:
        result = await runner.run(jobs)
        if judging is None or result.stopped_by is not None:
            return result, None
        tally = await judge_cases(
            caller, judging.spec, judging.evalset, result.outcomes, judging.primary, judging.scorer
        )
        return result, tally
    finally:
        signals.detach()
        progress.close()
        for client in clients.values():
            await client.aclose()
