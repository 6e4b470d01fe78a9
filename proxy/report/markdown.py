"""The report as Markdown: one section per route, GitHub-style tables.

Per route: the arm table and its failures, agreement with the primary per candidate arm (with the
noise floor), rule checks by rule version, and corrections and ratings per arm. Every value that
comes from the store goes through `_md`, so a route or target name cannot break a table.
"""

from __future__ import annotations

from .experiments import markdown_section as experiment_markdown
from .format import (
    DASH,
    as_sentence,
    describe_change,
    describe_failures,
    describe_labels,
    describe_window,
    evaluation_table,
    format_difference,
    format_duration,
    format_judge_delta,
    format_rate,
    format_ratio,
    format_score,
    format_scored,
    format_time,
    format_usd,
)
from .model import FeedbackReport, Report, RouteReport, RuleVersionReport
from .rollouts import TransitionReport, describe_transition, describe_verdict


def _md(text: str) -> str:
    """A store value inside a Markdown table cell: no pipes, no backticks, no line breaks."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'").replace("\n", " ")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_markdown(report: Report) -> str:
    lines = ["# mirrorgate report", ""]
    lines.append(f"- Window: {describe_window(report)}")
    if report.route_filter is not None:
        lines.append(f"- Route: {_md(report.route_filter)}")
    lines.append(f"- Store: {_md(report.store)}")
    lines.append(
        f"- Exchanges: {report.exchanges:,} · pairs: {report.pairs:,} · "
        f"rule checks: {report.checks:,} · feedback: {report.feedback:,}"
    )
    if report.first_at is not None:
        lines.append(
            f"- Recorded between {format_time(report.first_at)} and {format_time(report.last_at)}"
        )
    if report.truncated_from is not None:
        lines.append(
            f"- **Cut**: only the oldest {report.exchanges:,} of {report.truncated_from:,} "
            "exchanges were read; narrow the window with --since or --route."
        )
    lines.append("")
    if not report.routes:
        lines.append("No exchanges in this window.")
        lines.extend(_evaluations(report))
        return "\n".join(lines) + "\n"
    for route in report.routes:
        lines.extend(_route(route))
    lines.extend(_evaluations(report))
    lines.append(
        "Latency is from receiving the request to the last byte, failed exchanges included; "
        "ttft is for streams only. Intervals are 95% (Wilson for rates, Newcombe for "
        "differences). See docs/report.md."
    )
    return "\n".join(lines) + "\n"


def _route(route: RouteReport) -> list[str]:
    lines = [f"## Route {_md(route.route)}", ""]
    if route.arms:
        lines.append(
            "| arm · target | requests | errors | error rate (95% CI) | p50 | p95 | p99 "
            "| ttft p50 | ttft p95 | cost | cost / req | cost / 1k req | tokens in | tokens out |"
        )
        lines.append("|---|" + "---:|" * 13)
        for arm in route.arms:
            s = arm.summary
            lines.append(
                _row(
                    [
                        _md(arm.label),
                        f"{s.count:,}",
                        f"{s.errors:,}",
                        format_rate(s.error_rate),
                        format_duration(s.latency_p50_s),
                        format_duration(s.latency_p95_s),
                        format_duration(s.latency_p99_s),
                        format_duration(s.ttft_p50_s),
                        format_duration(s.ttft_p95_s),
                        format_usd(s.cost_total_usd),
                        format_usd(s.cost_per_request_usd),
                        format_usd(s.cost_per_1k_usd),
                        f"{s.tokens_in:,}",
                        f"{s.tokens_out:,}",
                    ]
                )
            )
        lines.append("")
        failing = [arm for arm in route.arms if arm.failures]
        if failing:
            lines.append(
                "Failures: "
                + "; ".join(f"{_md(arm.label)}: {describe_failures(arm)}" for arm in failing)
                + "."
            )
            lines.append("")
    else:
        lines.extend(
            [
                "No exchanges for this route in this window "
                "(only pairs, rule checks or rollout events).",
                "",
            ]
        )
    lines.extend(_agreement(route))
    lines.extend(_checks(route))
    lines.extend(_awareness(route))
    lines.extend(_feedback(route.route, route.feedback))
    lines.extend(_rollout(route))
    lines.extend(experiment_markdown(route.route, route.experiment))
    return lines


def _agreement(route: RouteReport) -> list[str]:
    lines = [f"### Agreement with the primary: {_md(route.route)}", ""]
    if route.candidates:
        lines.append(
            "| candidate | pairs (both ok / all) | agreement (n) | exact | normalized | JSON (n) "
            "| Δ latency p50 | Δ ttft p50 | Δ cost p50 | length ratio p50 | beyond noise |"
        )
        lines.append("|---|" + "---:|" * 10)
        for c in route.candidates:
            a = c.agreement
            lines.append(
                _row(
                    [
                        _md(c.label),
                        f"{a.n:,} / {c.pairs:,}",
                        f"{format_rate(a.agreed)} ({a.agreed.n:,})",
                        format_rate(a.exact),
                        format_rate(a.normalized),
                        f"{format_rate(a.json)} ({a.json.n:,})",
                        format_duration(c.latency_delta_p50_s, signed=True),
                        format_duration(c.ttft_delta_p50_s, signed=True),
                        format_usd(c.cost_delta_p50_usd, signed=True),
                        format_ratio(c.length_ratio_p50),
                        format_difference(c.beyond_noise),
                    ]
                )
            )
        lines.extend(["", _mode_sentence(route), ""])
    elif not route.unpaired:
        lines.extend(["No pairs in this window.", ""])
    if route.unpaired:
        names = ", ".join(_md(label) for label in route.unpaired)
        lines.extend([f"No pairs in this window for {names}.", ""])
    lines.extend([_noiseas_sentence(route), ""])
    lines.extend(_judge_scores(route))
    return lines


def _judge_scores(route: RouteReport) -> list[str]:
    if not route.judge_scores:
        return []
    lines = [
        f"### LLM judge: {_md(route.route)}",
        "",
        "| candidate | pairs judged | candidate score | primary score | Δ score (95% CI) "
        "| position bias |",
        "|---|" + "---:|" * 5,
    ]
    for j in route.judge_scores:
        lines.append(
            _row(
                [
                    _md(j.label),
                    f"{j.pairs:,}",
                    format_score(j.candidate_score),
                    format_score(j.primary_score),
                    format_judge_delta(j.delta_low, j.delta, j.delta_high),
                    format_score(j.position_bias),
                ]
            )
        )
    lines.extend(
        [
            "",
            "Scores are 1-10, each the mean of both answer orders; Δ is candidate minus primary "
            "(below 0: the judge prefers the primary).",
            "",
        ]
    )
    return lines


def _mode_sentence(route: RouteReport) -> str:
    return (
        f"Agreement is the route's `{route.agreement_mode}` comparison{route.agreement_note}, "
        "over the pairs it applies to; disagreement and 'beyond noise' read it."
    )


def _noiseas_sentence(route: RouteReport) -> str:
    if route.noise is None:
        if route.noise_pairs:
            return (
                f"Noise floor: {route.noise_pairs:,} noise pairs, none with both answers ok; "
                "'beyond noise' cannot be computed."
            )
        return (
            "Noise floor: no noise pairs (the primary asked twice) in this window; "
            "'beyond noise' cannot be computed."
        )
    return (
        f"Noise floor (the primary asked twice): {route.noise.n:,} pairs, disagreement "
        f"{format_rate(route.noise.disagreement)}. 'Beyond noise' is a candidate's "
        "disagreement minus this, in percentage points; an interval above 0 is a real difference."
    )


def _checks(route: RouteReport) -> list[str]:
    lines = [f"### Checks by rule version: {_md(route.route)}", ""]
    if not route.has_checks:
        lines.extend(["No rule checks in this window.", ""])
        lines.extend(
            f"- Rule {_md(v.rule)}, version {_md(v.version)}: {describe_change(v.change)}."
            for v in route.rule_versions
        )
        if route.rule_versions:
            lines.append("")
        return lines
    for version in route.rule_versions:
        lines.extend(_version(version))
    return lines


def _version(version: RuleVersionReport) -> list[str]:
    lines = [
        f"#### Rule {_md(version.rule)}, version {_md(version.version)}",
        "",
        as_sentence(describe_change(version.change)),
        "",
    ]
    if not version.rows:
        return [*lines, "No rule checks on this version in this window.", ""]
    lines.append(
        "| check | arm · target | checks | pass rate (95% CI) | fail | error | vs primary |"
    )
    lines.append("|---|---|" + "---:|" * 5)
    for row in version.rows:
        s = row.summary
        diff = format_difference(row.vs_primary) if row.vs_primary is not None else DASH
        lines.append(
            _row(
                [
                    _md(row.check),
                    _md(row.label),
                    f"{s.count:,}",
                    format_rate(s.pass_rate),
                    f"{s.failed:,}",
                    f"{s.errors:,}",
                    f"**{diff} below**" if row.below_primary else diff,
                ]
            )
        )
    lines.append("")
    below = [row for row in version.rows if row.below_primary]
    if below:
        lines.append(
            "Below the primary on this version: "
            + "; ".join(f"{_md(row.label)} on {_md(row.check)}" for row in below)
            + "."
        )
        lines.append("")
    return lines


def _awareness(route: RouteReport) -> list[str]:
    """Context awareness per probed rule; nothing at all for a route without probes."""
    if not route.context_awareness:
        return []
    lines = [f"### Context awareness: {_md(route.route)}", ""]
    for rule in route.context_awareness:
        lines.extend(
            [
                f"#### Rule {_md(rule.rule)}: rule-flip probes",
                "",
                "| target | probes | followed | stuck | other | adaptation (95% CI) "
                "| stuck rate (95% CI) |",
                "|---|" + "---:|" * 6,
            ]
        )
        for t in rule.targets:
            s = t.score
            lines.append(
                _row(
                    [
                        _md(t.target),
                        f"{s.probes:,}",
                        f"{s.followed:,}",
                        f"{s.stuck:,}",
                        f"{s.other:,}",
                        format_scored(s.adaptation),
                        format_scored(s.stuck_rate),
                    ]
                )
            )
        lines.append("")
        stuck = [t for t in rule.targets if _mostly_stuck(t.score.stuck_rate.low)]
        if stuck:
            lines.append(
                "Stuck on the old rule (most probes answered the original value): "
                + ", ".join(_md(t.target) for t in stuck)
                + "."
            )
            lines.append("")
    return lines


def _mostly_stuck(low: float | None) -> bool:
    """The stuck rate's interval lies above one half."""
    return low is not None and low > 0.5


def _feedback(route: str, feedback: FeedbackReport | None) -> list[str]:
    lines = [f"### Corrections and ratings: {_md(route)}", ""]
    if feedback is None or not feedback.rows:
        return [*lines, "No answers served in this window.", ""]
    if not feedback.counted:
        served = sum(row.served for row in feedback.rows)
        noun = "answer" if served == 1 else "answers"
        lines.append(f"No corrections or ratings in this window ({served:,} {noun} served).")
        lines.append("")
        return lines
    version = ["rule version"] if feedback.by_version else []
    lines.append(
        _row(
            [
                "arm · target",
                *version,
                "answers",
                "corrected",
                "correction rate (95% CI)",
                "scores",
                "mean score",
                "labels",
            ]
        )
    )
    lines.append("|---|" + "---|" * len(version) + "---:|" * 5 + "---|")
    for row in feedback.rows:
        lines.append(
            _row(
                [
                    _md(row.label),
                    *([_md(row.rule_version or DASH)] if feedback.by_version else []),
                    f"{row.served:,}",
                    f"{row.corrections.successes:,}",
                    format_rate(row.corrections),
                    f"{len(row.scores):,}",
                    format_score(row.mean_score),
                    _md(describe_labels(row.labels)),
                ]
            )
        )
    lines.append("")
    if feedback.unmatched:
        lines.extend(
            [
                f"Not counted: {feedback.unmatched:,} feedback records about answers not "
                "served in this window (older answers, or never delivered).",
                "",
            ]
        )
    return lines


def _rollout(route: RouteReport) -> list[str]:
    lines = [f"### Rollouts: {_md(route.route)}", ""]
    rollout = route.rollout
    if rollout is None:
        if route.offline:
            return []  # an evaluation set is never rolled out
        return [*lines, "No rollout transitions or verdicts in this window.", ""]
    lines.append("| time | what | detail | actor | reason |")
    lines.append("|---|---|---|---|---|")
    for item in rollout.timeline():
        if isinstance(item, TransitionReport):
            what = "**rollback**" if item.rollback else "transition"
            cells = [what, describe_transition(item), item.actor, item.reason]
        else:
            cells = [f"verdict, look {item.look}", describe_verdict(item), "judge", item.reason]
        lines.append(_row([format_time(item.at), *(_md(cell) for cell in cells)]))
    lines.append("")
    for rollback in rollout.rollbacks:
        lines.append(f"Rolled back at {format_time(rollback.at)}: {_md(rollback.reason)}.")
        if rollback.failed:
            failed = "; ".join(_md(describe_verdict(v)) for v in rollback.failed)
            lines.append(f"Failing verdicts: {failed}.")
        if rollback.examples:
            lines.append("Example requests: " + ", ".join(_md(i) for i in rollback.examples) + ".")
        lines.append("")
    return lines


def _evaluations(report: Report) -> list[str]:
    """Offline evaluation runs across set and candidate versions (`mirrorgate evalset history`)."""
    if not report.evaluations:
        return []
    header, rows = evaluation_table(report.evaluations)
    lines = ["", "## Offline evaluations", ""]
    lines.append(
        "Each model's pass rate on each stored run of an evaluation set, oldest first: set "
        "versions and config fingerprints side by side (docs/evaluation.md)."
    )
    lines += ["", _row(header), _row(["---"] * len(header))]
    lines += [_row([_md(cell) for cell in row]) for row in rows]
    lines.append("")
    return lines
