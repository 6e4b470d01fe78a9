"""The report as one self-contained HTML page: inline CSS, charts drawn as inline SVG.

Nothing is loaded from anywhere (no scripts, no web fonts, no images), so the file can be mailed,
attached to a ticket or opened offline. Every string that comes from the store (route, target,
check and status names) goes through `html.escape` before it reaches the page.

Per route the page has: headline cards per arm (with the change against the primary), the arm
table, the latency, cost and time-to-first-token charts (`proxy.report.charts`), then the
answer-quality sections (`proxy.report.html_quality`): agreement with the primary per candidate
arm with the noise floor, rule checks by rule version with the `checks` chart of the newest
version, and corrections and ratings per arm.
"""

from __future__ import annotations

import html

from analyzers.summary import Rate, newcombe_difference

from .charts import cost_svg, ecdf_svg, rollout_svg
from .experiments import html_section as experiment_html
from .format import (
    describe_failures,
    describe_window,
    evaluation_table,
    format_duration,
    format_percent,
    format_time,
    format_usd,
)
from .html_quality import (
    agreement_section,
    awareness_section,
    checks_section,
    feedback_section,
    rate_cell,
)
from .model import Report, RouteReport
from .rollouts import TransitionReport, describe_transition, describe_verdict
from .style import STYLESHEET

PRIMARY_COLOUR = "#2563eb"
PALETTE = ("#ea580c", "#059669", "#9333ea", "#db2777", "#0891b2", "#ca8a04", "#4b5563")
"""Colours of the other arms, in table order (the primary is always blue)."""

_ARM_SUBHEADINGS = (
    "count", "rate (95% CI)", "p50", "p95", "p99", "p50", "p95",
    "total", "per request", "per 1k req", "in", "out",
)  # fmt: skip


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def render_html(report: Report) -> str:
    """The whole page."""
    routes = [route.route for route in report.routes]
    title = "mirrorgate report" + (f": {', '.join(routes)}" if len(routes) <= 3 and routes else "")
    body = [_header(report)]
    if not report.routes:
        body.append(
            '<section class="empty"><h2>No exchanges in this window</h2>'
            "<p>Nothing was recorded for this window"
            + (f" and route <code>{_e(report.route_filter)}</code>" if report.route_filter else "")
            + ". Widen <code>--since</code> or check that the gateway records to this store.</p>"
            "</section>"
        )
    if len(report.routes) > 1:
        links = "".join(
            f'<li><a href="#route-{i}">{_e(route.route)}</a></li>'
            for i, route in enumerate(report.routes)
        )
        body.append(f'<nav class="toc" aria-label="Routes"><ul>{links}</ul></nav>')
    body.extend(_route_section(i, route) for i, route in enumerate(report.routes))
    if report.evaluations:
        body.append(_evaluations(report))
    body.append(_footer())
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="mirrorgate report">\n'
        f"<title>{_e(title)}</title>\n<style>{STYLESHEET}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _header(report: Report) -> str:
    facts = [
        ("Window", describe_window(report)),
        ("Exchanges", f"{report.exchanges:,}"),
        ("Pairs", f"{report.pairs:,}"),
        ("Rule checks", f"{report.checks:,}"),
        ("Feedback", f"{report.feedback:,}"),
        ("Routes", f"{len(report.routes):,}"),
    ]
    if report.first_at is not None:
        facts.append(("First record", format_time(report.first_at)))
        facts.append(("Last record", format_time(report.last_at)))
    facts.append(("Store", report.store))
    items = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in facts)
    warning = ""
    if report.truncated_from is not None:
        warning = (
            f'<p class="warning">Only the oldest {report.exchanges:,} of '
            f"{report.truncated_from:,} exchanges were read; narrow the window with "
            "<code>--since</code> or <code>--route</code>.</p>"
        )
    scope = f" · route {_e(report.route_filter)}" if report.route_filter else ""
    return (
        '<header class="page">'
        f"<h1>mirrorgate report<span>{scope}</span></h1>"
        '<p class="lede">Each route\'s arms compared over the same window: latency, time to '
        "first token, errors, cost, agreement with the primary, rule checks by rule version, and "
        "user corrections.</p>"
        f'<dl class="facts">{items}</dl>{warning}</header>'
    )


def _footer() -> str:
    return (
        '<footer class="page"><p>Latency runs from receiving the request to the last byte of the '
        "answer, failed exchanges included; time to first token covers streams. Percentiles "
        "interpolate linearly between ranks. Rates carry a 95% Wilson interval, differences of "
        "rates a 95% Newcombe interval; &ldquo;beyond noise&rdquo; is a candidate's disagreement "
        "minus the primary's disagreement with itself. A check's pass rate counts errors as "
        "not passing. Details: docs/report.md.</p>"
        "<p>Generated by mirrorgate.</p></footer>"
    )


def _colours(route: RouteReport) -> dict[str, str]:
    """One colour per arm · target of the route, the same in every chart and table: the arms of
    the arm table first, then any that only have rule checks or pairs."""
    labels = [(arm.arm, arm.label) for arm in route.arms]
    labels += [(row.arm, row.label) for v in route.rule_versions for row in v.rows]
    labels += [(c.kind, c.label) for c in route.candidates]
    colours: dict[str, str] = {}
    others = 0
    for arm, label in labels:
        if label not in colours:
            if arm == "primary":
                colours[label] = PRIMARY_COLOUR
            else:
                colours[label] = PALETTE[others % len(PALETTE)]
                others += 1
    return colours


def _target_colours(route: RouteReport, colours: dict[str, str]) -> dict[str, str]:
    """One colour per probed target: the colour of an arm it served in, else the next free one."""
    found: dict[str, str] = {}
    spare = 0
    for rule in route.context_awareness:
        for t in rule.targets:
            if t.target in found:
                continue
            served = [c for label, c in colours.items() if label.endswith(f" · {t.target}")]
            if served:
                found[t.target] = served[0]
            else:
                found[t.target] = PALETTE[(len(colours) + spare) % len(PALETTE)]
                spare += 1
    return found


def _route_section(index: int, route: RouteReport) -> str:
    colours = _colours(route)
    parts = [
        f'<section class="route" id="route-{index}" data-route="{_e(route.route)}">',
        f'<h2><span class="kicker">Route</span> {_e(route.route)}</h2>',
    ]
    if route.arms:
        parts.append(_cards(route, colours))
        parts.append(_arm_table(route, colours))
        failing = [arm for arm in route.arms if arm.failures]
        if failing:
            text = "; ".join(
                f"<strong>{_e(arm.label)}</strong>: {_e(describe_failures(arm))}" for arm in failing
            )
            parts.append(f'<p class="failures">Failures: {text}.</p>')
        charts = [
            _figure(
                "Latency distribution",
                "Share of requests answered within a time (log scale when it spans a wide range)."
                " Dots mark p50 and p95.",
                ecdf_svg(index, route, colours, kind="latency"),
                _legend(route, colours, kind="latency"),
            ),
            _figure(
                "Cost per 1,000 requests",
                "Mean cost of a request in this arm, times 1,000.",
                cost_svg(index, route, colours),
                "",
            ),
        ]
        if route.has_streams:
            charts.append(
                _figure(
                    "Time to first token (streams)",
                    "Share of streamed requests whose first token arrived within a time.",
                    ecdf_svg(index, route, colours, kind="ttft"),
                    _legend(route, colours, kind="ttft"),
                )
            )
        parts.append(f'<div class="charts">{"".join(charts)}</div>')
    else:
        parts.append(
            '<p class="note">No exchanges for this route in this window '
            "(only pairs, rule checks or rollout events).</p>"
        )
    parts.append(agreement_section(route, colours))
    parts.append(checks_section(index, route, colours))
    parts.append(awareness_section(index, route, _target_colours(route, colours)))
    parts.append(feedback_section(route.route, route.feedback, colours))
    parts.append(_rollout_section(index, route))
    parts.append(experiment_html(route.route, route.experiment))
    parts.append("</section>")
    return "\n".join(parts)


def _figure(title: str, caption: str, svg: str, legend: str) -> str:
    return (
        f'<figure class="chart-card"><figcaption><strong>{_e(title)}</strong>'
        f"<span>{_e(caption)}</span></figcaption>{svg}{legend}</figure>"
    )


def _rollout_section(index: int, route: RouteReport) -> str:
    """The rollout's timeline, then its transitions and verdicts in time order, then the evidence
    of each rollback."""
    heading = "<h3>Rollouts</h3>"
    rollout = route.rollout
    if rollout is None:
        if route.offline:
            return ""  # an evaluation set is never rolled out
        return heading + '<p class="note">No rollout transitions or verdicts in this window.</p>'
    figure = (
        '<figure class="chart-card rollout-chart"><figcaption><strong>Rollout timeline'
        "</strong><span>Phases (bands) and transitions (lines; a rollback in red) on top; "
        "each judged metric's verdicts at each look below (green pass, red fail, grey "
        "inconclusive). Hover for details.</span></figcaption>"
        f"{rollout_svg(index, route.route, rollout)}</figure>"
    )
    rows = []
    for item in rollout.timeline():
        if isinstance(item, TransitionReport):
            kind = "rollback" if item.rollback else "transition"
            cells = (kind, describe_transition(item), item.actor, item.reason)
        else:
            kind = f"verdict {item.outcome}"
            cells = (f"verdict, look {item.look}", describe_verdict(item), "judge", item.reason)
        rows.append(
            f'<tr class="{_e(kind)}"><td>{_e(format_time(item.at))}</td>'
            + "".join(f'<td class="label">{_e(cell)}</td>' for cell in cells)
            + "</tr>"
        )
    table = (
        f'<div class="table-wrap"><table class="rollout-events" data-route="{_e(route.route)}">'
        "<thead><tr><th>time</th>"
        + "".join(
            f'<th class="label">{name}</th>' for name in ("what", "detail", "actor", "reason")
        )
        + f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
    evidence = []
    for rollback in rollout.rollbacks:
        failed = "".join(f"<li>{_e(describe_verdict(v))}</li>" for v in rollback.failed)
        examples = ", ".join(f"<code>{_e(i)}</code>" for i in rollback.examples)
        evidence.append(
            f'<div class="rollback-evidence"><p><strong>Rolled back at '
            f"{_e(format_time(rollback.at))}</strong>: {_e(rollback.reason)}</p>"
            + (f"<ul>{failed}</ul>" if failed else "")
            + (f'<p class="note">Example requests: {examples}</p>' if examples else "")
            + "</div>"
        )
    return heading + figure + table + "".join(evidence)


# ---- cards and tables ----


def _relative(value: float | None, base: float | None) -> tuple[str, str]:
    """(text, css class) of value against base: `+35%` marked worse, `-12%` better."""
    if value is None or base is None or base <= 0:
        return "", ""
    change = value / base - 1
    if abs(change) < 0.005:
        return "same as primary", "same"
    return f"{change * 100:+.0f}% vs primary", "worse" if change > 0 else "better"


def _error_change(rate: Rate, base: Rate) -> tuple[str, str]:
    if rate.value is None or base.value is None:
        return "", ""
    diff = newcombe_difference(rate, base)
    text = f"primary {format_percent(base.value)}"
    if not diff.significant:
        return text, "same"
    return text, "worse" if (diff.value or 0) > 0 else "better"


def _cards(route: RouteReport, colours: dict[str, str]) -> str:
    primary = next((arm for arm in route.arms if arm.arm == "primary"), None)
    cards = []
    for arm in route.arms:
        s = arm.summary
        base = primary.summary if primary is not None and arm is not primary else None
        metrics = [
            ("requests", f"{s.count:,}", ("", "")),
            (
                "error rate",
                format_percent(s.error_rate.value),
                _error_change(s.error_rate, base.error_rate) if base else ("", ""),
            ),
            (
                "p95 latency",
                format_duration(s.latency_p95_s),
                _relative(s.latency_p95_s, base.latency_p95_s) if base else ("", ""),
            ),
            (
                "cost / 1k req",
                format_usd(s.cost_per_1k_usd),
                _relative(s.cost_per_1k_usd, base.cost_per_1k_usd) if base else ("", ""),
            ),
        ]
        rows = "".join(
            f'<div class="metric"><span class="name">{_e(name)}</span>'
            f'<span class="value">{_e(value)}</span>'
            + (f'<span class="change {cls}">{_e(change)}</span>' if change else "")
            + "</div>"
            for name, value, (change, cls) in metrics
        )
        cards.append(
            f'<article class="card" style="--arm:{colours[arm.label]}">'
            f'<h3><span class="swatch"></span>{_e(arm.label)}</h3>{rows}</article>'
        )
    return f'<div class="cards">{"".join(cards)}</div>'


def _arm_table(route: RouteReport, colours: dict[str, str]) -> str:
    head = (
        "<thead><tr>"
        '<th rowspan="2" scope="col" class="label">arm · target</th>'
        '<th rowspan="2" scope="col">requests</th>'
        '<th colspan="2" scope="colgroup">errors</th>'
        '<th colspan="3" scope="colgroup">latency</th>'
        '<th colspan="2" scope="colgroup">time to first token</th>'
        '<th colspan="3" scope="colgroup">cost</th>'
        '<th colspan="2" scope="colgroup">tokens</th></tr><tr>'
        + "".join(f'<th scope="col">{name}</th>' for name in _ARM_SUBHEADINGS)
        + "</tr></thead>"
    )
    rows = []
    for arm in route.arms:
        s = arm.summary
        cells = [
            f'<th scope="row" class="label"><span class="swatch" '
            f'style="--arm:{colours[arm.label]}"></span>{_e(arm.label)}</th>',
            f"<td>{s.count:,}</td>",
            f"<td>{s.errors:,}</td>",
            rate_cell(s.error_rate),
            *(
                f"<td>{_e(format_duration(v))}</td>"
                for v in (
                    s.latency_p50_s,
                    s.latency_p95_s,
                    s.latency_p99_s,
                    s.ttft_p50_s,
                    s.ttft_p95_s,
                )
            ),
            *(
                f"<td>{_e(format_usd(v))}</td>"
                for v in (s.cost_total_usd, s.cost_per_request_usd, s.cost_per_1k_usd)
            ),
            f"<td>{s.tokens_in:,}</td>",
            f"<td>{s.tokens_out:,}</td>",
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="table-wrap"><table class="arms" data-route="{_e(route.route)}">'
        f"{head}<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _legend(route: RouteReport, colours: dict[str, str], *, kind: str) -> str:
    items = []
    for arm in route.arms:
        s = arm.summary
        if kind == "latency":
            p50, p95, n = s.latency_p50_s, s.latency_p95_s, s.count
        else:
            p50, p95, n = s.ttft_p50_s, s.ttft_p95_s, s.ttft_count
        if not n:
            continue
        items.append(
            f'<li><span class="swatch" style="--arm:{colours[arm.label]}"></span>'
            f'{_e(arm.label)} <span class="muted">p50 {_e(format_duration(p50))} · '
            f"p95 {_e(format_duration(p95))} · n {n:,}</span></li>"
        )
    return f'<ul class="legend">{"".join(items)}</ul>'


def _evaluations(report: Report) -> str:
    """Offline evaluation runs across set and candidate versions."""
    header, rows = evaluation_table(report.evaluations)
    head = "".join(f"<th>{_e(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return (
        '<section class="evaluations"><h2>Offline evaluations</h2>'
        "<p>Each model's pass rate on each stored run of an evaluation set, oldest first.</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>"
    )
