"""The HTML report's answer-quality sections of a route: agreement with the primary per candidate
arm (and the LLM judge's scores), rule checks by rule version (with the `checks` chart of the
newest version), and corrections and ratings per arm.

Tables are `table.pairs`, `table.judge`, `table.checks` (with `data-rule` and `data-version`) and
`table.corrections`, each with `data-route`; a candidate significantly below the primary is a
`tr.below` with its difference in `td.worse`.
"""

from __future__ import annotations

import html

from analyzers.adaptation import ScoredRate
from analyzers.summary import Rate

from .charts import adaptation_svg, checks_svg
from .format import (
    as_sentence,
    describe_change,
    describe_labels,
    format_difference,
    format_duration,
    format_judge_delta,
    format_percent,
    format_ratio,
    format_score,
    format_usd,
)
from .model import FeedbackReport, RouteReport, RuleVersionReport

_PAIR_HEADINGS = (
    "candidate", "pairs (both ok / all)", "agreement", "exact", "normalized", "JSON",
    "Δ latency p50", "Δ ttft p50", "Δ cost p50", "length ratio p50", "beyond noise",
)  # fmt: skip
_JUDGE_HEADINGS = (
    "candidate", "pairs judged", "candidate score", "primary score", "Δ score (95% CI)",
    "position bias",
)  # fmt: skip
_CHECK_HEADINGS = (
    "check", "arm · target", "checks", "pass rate (95% CI)", "fail", "error", "vs primary",
)  # fmt: skip


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def rate_cell(rate: Rate, *, show_n: bool = False) -> str:
    """A rate with its 95% interval underneath (and its n, where it differs from the row's)."""
    n = f'<span class="ci">n = {rate.n:,}</span>' if show_n else ""
    if rate.value is None:
        return f"<td>—{n}</td>"
    return (
        f"<td>{_e(format_percent(rate.value))}"
        f'<span class="ci">{rate.low * 100:.1f}&ndash;{rate.high * 100:.1f}%</span>{n}</td>'
    )


def _head(names: tuple[str, ...], labels: int, *, last_is_text: bool = False) -> str:
    """A header row; the first `labels` columns (and the last, with `last_is_text`) are text."""
    return "".join(
        f'<th scope="col" class="'
        f'{"label" if i < labels or (last_is_text and i == len(names) - 1) else "num"}">'
        f"{_e(name)}</th>"
        for i, name in enumerate(names)
    )


def _label(label: str, colours: dict[str, str]) -> str:
    swatch = (
        f'<span class="swatch" style="--arm:{colours[label]}"></span>' if label in colours else ""
    )
    return f"{swatch}{_e(label)}"


def agreement_section(route: RouteReport, colours: dict[str, str]) -> str:
    parts = ["<h3>Agreement with the primary</h3>"]
    if route.candidates:
        rows = []
        for c in route.candidates:
            a = c.agreement
            flagged = c.beyond_noise is not None and c.beyond_noise.significant
            rows.append(
                f'<tr><th scope="row" class="label">{_label(c.label, colours)}</th>'
                f"<td>{a.n:,} / {c.pairs:,}</td>"
                + rate_cell(a.agreed, show_n=True)
                + rate_cell(a.exact)
                + rate_cell(a.normalized)
                + rate_cell(a.json, show_n=True)
                + f"<td>{_e(format_duration(c.latency_delta_p50_s, signed=True))}</td>"
                f"<td>{_e(format_duration(c.ttft_delta_p50_s, signed=True))}</td>"
                f"<td>{_e(format_usd(c.cost_delta_p50_usd, signed=True))}</td>"
                f"<td>{_e(format_ratio(c.length_ratio_p50))}</td>"
                f'<td class="{"worse" if flagged else ""}">'
                f"{_e(format_difference(c.beyond_noise))}</td></tr>"
            )
        parts.append(
            f'<div class="table-wrap"><table class="pairs" data-route="{_e(route.route)}">'
            f"<thead><tr>{_head(_PAIR_HEADINGS, 1)}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>"
            f'<p class="note">Agreement is the route&rsquo;s <code>{_e(route.agreement_mode)}'
            f"</code> comparison{_e(route.agreement_note)}, over the pairs it applies to; "
            "disagreement and &ldquo;beyond noise&rdquo; read it.</p>"
        )
    elif not route.unpaired:
        parts.append('<p class="note">No pairs in this window.</p>')
    if route.unpaired:
        names = ", ".join(f"<strong>{_e(label)}</strong>" for label in route.unpaired)
        parts.append(f'<p class="note">No pairs in this window for {names}.</p>')
    if route.noise is not None:
        d = route.noise.disagreement
        parts.append(
            f'<p class="note">Noise floor: the primary asked twice disagreed with itself in '
            f"<strong>{_e(format_percent(d.value))}</strong> of {route.noise.n:,} pairs "
            f"(95% CI {d.low * 100:.1f}&ndash;{d.high * 100:.1f}%). "
            "&ldquo;Beyond noise&rdquo; is a candidate's disagreement minus this, in "
            "percentage points; highlighted when the interval is above zero.</p>"
        )
    else:
        parts.append(
            '<p class="note">Noise floor: no noise pairs (the primary asked twice) with both '
            "answers ok in this window, so disagreement cannot be separated from the primary's "
            "own variability.</p>"
        )
    parts.append(_judge_table(route, colours))
    return "".join(parts)


def _judge_table(route: RouteReport, colours: dict[str, str]) -> str:
    if not route.judge_scores:
        return ""
    rows = [
        f'<tr class="{"below" if j.worse else ""}">'
        f'<th scope="row" class="label">{_label(j.label, colours)}</th>'
        f"<td>{j.pairs:,}</td><td>{_e(format_score(j.candidate_score))}</td>"
        f"<td>{_e(format_score(j.primary_score))}</td>"
        f'<td class="{"worse" if j.worse else ""}">'
        f"{_e(format_judge_delta(j.delta_low, j.delta, j.delta_high))}</td>"
        f"<td>{_e(format_score(j.position_bias))}</td></tr>"
        for j in route.judge_scores
    ]
    return (
        "<h3>LLM judge</h3>"
        f'<div class="table-wrap"><table class="judge" data-route="{_e(route.route)}">'
        f"<thead><tr>{_head(_JUDGE_HEADINGS, 1)}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
        '<p class="note">Scores are 1&ndash;10, each the mean of both answer orders; '
        "&Delta; is candidate minus primary, highlighted when its interval is below zero "
        "(the judge prefers the primary).</p>"
    )


def checks_section(index: int, route: RouteReport, colours: dict[str, str]) -> str:
    parts = ["<h3>Checks by rule version</h3>"]
    if not route.has_checks:
        parts.append('<p class="note">No rule checks in this window.</p>')
        parts.extend(
            f'<p class="note">Rule <code>{_e(v.rule)}</code> version <code>{_e(v.version)}'
            f"</code>: {_e(describe_change(v.change))}.</p>"
            for v in route.rule_versions
        )
        return "".join(parts)
    newest = route.newest_checked_version
    for version in route.rule_versions:
        table = _checks_table(route.route, version, colours)
        if version is newest:
            table += (
                '<figure class="chart-card checks-chart"><figcaption><strong>Pass rate by '
                f"check, version {_e(version.version)}</strong><span>The newest version "
                "checked in this window: each check's pass rate per arm; whiskers are the 95% "
                "interval.</span></figcaption>"
                f"{checks_svg(index, route, version, colours)}</figure>"
            )
        change = version.change
        changed = change is not None and change.previous_version is not None
        parts.append(
            f'<div class="version" data-rule="{_e(version.rule)}" '
            f'data-version="{_e(version.version)}">'
            f"<h4>Rule <code>{_e(version.rule)}</code> · version <code>{_e(version.version)}"
            f'</code></h4><p class="change-note{" changed" if changed else ""}">'
            f"{_e(as_sentence(describe_change(change)))}</p>{table}</div>"
        )
    return "".join(parts)


def _checks_table(route: str, version: RuleVersionReport, colours: dict[str, str]) -> str:
    if not version.rows:
        return '<p class="note">No rule checks on this version in this window.</p>'
    rows = []
    for row in version.rows:
        s = row.summary
        diff = row.vs_primary
        css = "worse" if row.below_primary else ""
        if diff is not None and diff.significant and not row.below_primary:
            css = "better"
        rows.append(
            f'<tr class="{"below" if row.below_primary else ""}">'
            f'<td class="label">{_e(row.check)}</td>'
            f'<th scope="row" class="label">{_label(row.label, colours)}</th>'
            f"<td>{s.count:,}</td>"
            + rate_cell(s.pass_rate)
            + f"<td>{s.failed:,}</td><td>{s.errors:,}</td>"
            f'<td class="{css}">{_e(format_difference(diff))}'
            + ('<span class="ci">below the primary</span>' if row.below_primary else "")
            + "</td></tr>"
        )
    return (
        f'<div class="table-wrap"><table class="checks" data-route="{_e(route)}" '
        f'data-rule="{_e(version.rule)}" data-version="{_e(version.version)}">'
        f"<thead><tr>{_head(_CHECK_HEADINGS, 2)}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


_AWARENESS_HEADINGS = (
    "target", "probes", "followed", "stuck", "other", "adaptation", "stuck rate",
)  # fmt: skip


def awareness_section(index: int, route: RouteReport, colours: dict[str, str]) -> str:
    """Context awareness per probed rule (`colours`: target → colour); empty without probes."""
    if not route.context_awareness:
        return ""
    parts = [
        "<h3>Context awareness</h3>",
        '<p class="note">Live requests of the rule re-sent with its value flipped: how often '
        "each model followed the flipped value (adaptation) and how often it kept the original "
        "one (stuck: it memorised the rule). Intervals are 95% (Wilson).</p>",
    ]
    for rule in route.context_awareness:
        rows = "".join(
            f'<tr data-target="{_e(t.target)}"><th scope="row" class="label">'
            f'<span class="swatch" style="--arm:{colours[t.target]}"></span>{_e(t.target)}</th>'
            f"<td>{t.score.probes:,}</td><td>{t.score.followed:,}</td>"
            f"<td>{t.score.stuck:,}</td><td>{t.score.other:,}</td>"
            + _scored_cell(t.score.adaptation)
            + _scored_cell(t.score.stuck_rate)
            + "</tr>"
            for t in rule.targets
        )
        parts.append(
            f'<div class="version" data-rule="{_e(rule.rule)}">'
            f"<h4>Rule <code>{_e(rule.rule)}</code> · rule-flip probes</h4>"
            f'<div class="table-wrap"><table class="awareness" data-route="{_e(route.route)}" '
            f'data-rule="{_e(rule.rule)}"><thead><tr>{_head(_AWARENESS_HEADINGS, 1)}</tr>'
            f"</thead><tbody>{rows}</tbody></table></div>"
            '<figure class="chart-card checks-chart"><figcaption><strong>Adaptation by '
            f"model, rule {_e(rule.rule)}</strong><span>Share of probes that followed the "
            "flipped value; whiskers are the 95% interval.</span></figcaption>"
            f"{adaptation_svg(index, route.route, rule, colours)}</figure></div>"
        )
    return "".join(parts)


def _scored_cell(rate: ScoredRate) -> str:
    if rate.rate is None or rate.low is None or rate.high is None:
        return "<td>—</td>"
    return (
        f"<td>{_e(format_percent(rate.rate))}"
        f'<span class="ci">{rate.low * 100:.1f}&ndash;{rate.high * 100:.1f}%</span></td>'
    )


def feedback_section(route: str, feedback: FeedbackReport | None, colours: dict[str, str]) -> str:
    parts = ["<h3>Corrections and ratings</h3>"]
    if feedback is None or not feedback.rows:
        return parts[0] + '<p class="note">No answers served in this window.</p>'
    if not feedback.counted:
        served = sum(row.served for row in feedback.rows)
        noun = "answer" if served == 1 else "answers"
        return (
            f'{parts[0]}<p class="note">No corrections or ratings in this window ({served:,} '
            f"{noun} served).</p>"
        )
    headings = (
        "arm · target",
        *(("rule version",) if feedback.by_version else ()),
        "answers",
        "corrected",
        "correction rate (95% CI)",
        "scores",
        "mean score",
        "labels",
    )
    rows = []
    for row in feedback.rows:
        version = f'<td class="label"><code>{_e(row.rule_version or "—")}</code></td>'
        rows.append(
            f'<tr><th scope="row" class="label">{_label(row.label, colours)}</th>'
            + (version if feedback.by_version else "")
            + f"<td>{row.served:,}</td><td>{row.corrections.successes:,}</td>"
            + rate_cell(row.corrections)
            + f"<td>{len(row.scores):,}</td><td>{_e(format_score(row.mean_score))}</td>"
            f'<td class="label">{_e(describe_labels(row.labels))}</td></tr>'
        )
    labels = 2 if feedback.by_version else 1
    parts.append(
        f'<div class="table-wrap"><table class="corrections" data-route="{_e(route)}">'
        f"<thead><tr>{_head(headings, labels, last_is_text=True)}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
    parts.append(
        '<p class="note">Correction rate: answers the user corrected out of the answers this arm '
        "served (shadows serve none). Scores are ratings from 1 to 5."
        + (
            f" Not counted: {feedback.unmatched:,} feedback records about answers not served "
            "in this window (older answers, or never delivered)."
            if feedback.unmatched
            else ""
        )
        + "</p>"
    )
    return "".join(parts)
