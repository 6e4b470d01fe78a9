"""The HTML report's charts, drawn as inline SVG (nothing is loaded from anywhere).

Each chart is `<svg class="chart KIND" id="KIND-N" data-route="ROUTE" role="img">` with a `<title>`
naming it and a `<desc>` spelling out its values for screen readers; N is the route's position in
the report. KIND is:

- `latency` / `ttft`: the empirical cumulative distribution per arm (`path.ecdf`), p50 and p95
  marked (`circle.marker.p50` / `.p95`), on a log time axis when the values span a factor of 5;
- `cost`: USD per 1,000 requests per arm, bars (`rect.bar`) from 0;
- `checks`: the pass rate of each check of one rule version per arm · target, bars (`rect.bar`,
  with `data-check`) with their Wilson interval as whiskers (`line.whisker`), and a mark on the
  candidates whose pass rate is significantly below the primary's.
- `adaptation`: per probed rule, each target's adaptation rate on rule-flip probes, a bar
  (`rect.bar`, with `data-target` and `data-rule`) with its Wilson interval as whiskers, its
  stuck rate beside it, and a mark on targets whose stuck rate is surely above one half.

Bars and lines carry `data-arm="arm · target"`. Every string from the store is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from .axis import Axis
from .format import format_duration, format_percent, format_usd
from .model import (
    ArmReport,
    CheckArmReport,
    ContextAwarenessReport,
    RouteReport,
    RuleVersionReport,
    TargetAdaptation,
)

ECDF_POINTS = 400
"""A latency line is drawn through at most this many quantiles, whatever the request count."""

WIDTH = 560
"""Every chart's viewBox width; it scales to its card."""
_PLOT_LEFT, _PLOT_RIGHT, _PLOT_TOP, _PLOT_BOTTOM = 56, 20, 16, 48


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _tick_duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:g} s"
    return f"{seconds * 1000:g} ms"


def _tick_usd(amount: float) -> str:
    return f"${amount:,.0f}" if amount >= 10 else f"${amount:g}"


def _svg_open(kind: str, index: int, route: str, height: int, title: str, desc: str) -> str:
    ident = f"{kind}-{index}"
    return (
        f'<svg class="chart {kind}" id="{ident}" data-route="{_e(route)}" '
        f'viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
        f'aria-labelledby="{ident}-title {ident}-desc" xmlns="http://www.w3.org/2000/svg">'
        f'<title id="{ident}-title">{_e(title)}</title><desc id="{ident}-desc">{_e(desc)}</desc>'
    )


def _sampled(values: Sequence[float]) -> list[tuple[float, float]]:
    """(value, cumulative share) points of the ECDF, at most ECDF_POINTS + 1 of them."""
    n = len(values)
    if n <= ECDF_POINTS:
        indices: Sequence[int] = range(n)
    else:
        indices = sorted({round(j * (n - 1) / ECDF_POINTS) for j in range(ECDF_POINTS + 1)})
    return [(values[i], (i + 1) / n) for i in indices]


def ecdf_svg(index: int, route: RouteReport, colours: dict[str, str], *, kind: str) -> str:
    series = [
        (arm, arm.durations_s if kind == "latency" else arm.ttfts_s)
        for arm in route.arms
        if (arm.durations_s if kind == "latency" else arm.ttfts_s)
    ]
    height = 300
    left, right = _PLOT_LEFT, WIDTH - _PLOT_RIGHT
    top, bottom = _PLOT_TOP, height - _PLOT_BOTTOM
    low = min(values[0] for _, values in series)
    high = max(values[-1] for _, values in series)
    positive_low = min((v for _, values in series for v in values if v > 0), default=1e-3)
    x = Axis(positive_low, high, left, right, log=high / max(positive_low, 1e-9) >= 5)
    if not x.log:
        x = Axis(low, high, left, right, log=False)

    def y(share: float) -> float:
        return bottom - share * (bottom - top)

    what = "Latency" if kind == "latency" else "Time to first token"
    parts = [
        _svg_open(
            kind,
            index,
            route.route,
            height,
            f"{what} distribution, route {route.route}",
            f"Cumulative share of requests by {what.lower()} for "
            + ", ".join(
                f"{arm.label} (p50 {format_duration(_pct(arm, kind, 50))}, "
                f"p95 {format_duration(_pct(arm, kind, 95))})"
                for arm, _ in series
            )
            + (". Logarithmic time axis." if x.log else "."),
        ),
        f'<rect class="plot-bg" x="{left}" y="{top}" width="{right - left}" '
        f'height="{bottom - top}"/>',
    ]
    for share in (0, 0.25, 0.5, 0.75, 1):
        parts.append(
            f'<line class="grid" x1="{left}" x2="{right}" y1="{y(share):.1f}" y2="{y(share):.1f}"/>'
            f'<text class="tick" x="{left - 6}" y="{y(share) + 4:.1f}" text-anchor="end">'
            f"{share * 100:.0f}%</text>"
        )
    for share, name in ((0.5, "p50"), (0.95, "p95")):
        parts.append(
            f'<line class="guide" x1="{left}" x2="{right}" y1="{y(share):.1f}" '
            f'y2="{y(share):.1f}"/><text class="guide-label" x="{left + 4}" '
            f'y="{y(share) - 4:.1f}">{name}</text>'
        )
    for tick in x.ticks:
        px = x(tick)
        parts.append(
            f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{bottom}"/>'
            f'<text class="tick" x="{px:.1f}" y="{bottom + 16}" text-anchor="middle">'
            f"{_e(_tick_duration(tick))}</text>"
        )
    parts.append(
        f'<line class="axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"/>'
        f'<text class="axis-label" x="{(left + right) / 2}" y="{height - 8}" '
        f'text-anchor="middle">{_e(what.lower())}{" (log scale)" if x.log else ""}</text>'
        f'<text class="axis-label" transform="translate(14 {(top + bottom) / 2}) rotate(-90)" '
        'text-anchor="middle">share of requests</text>'
    )
    for arm, values in series:
        colour = colours[arm.label]
        points = _sampled(values)
        first_x = x(points[0][0])
        path = [f"M{first_x:.1f} {y(0):.1f}"]
        path.extend(f"H{x(value):.1f}V{y(share):.1f}" for value, share in points)
        path.append(f"H{right}")
        parts.append(
            f'<path class="ecdf" data-arm="{_e(arm.label)}" d="{"".join(path)}" '
            f'stroke="{colour}"><title>{_e(arm.label)}</title></path>'
        )
        for q, share in ((50, 0.5), (95, 0.95)):
            value = _pct(arm, kind, q)
            if value is None:
                continue
            parts.append(
                f'<circle class="marker p{q}" cx="{x(value):.1f}" cy="{y(share):.1f}" r="4.5" '
                f'fill="{colour}"><title>{_e(arm.label)} p{q} {_e(format_duration(value))}'
                "</title></circle>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _pct(arm: ArmReport, kind: str, q: int) -> float | None:
    s = arm.summary
    if kind == "latency":
        return s.latency_p50_s if q == 50 else s.latency_p95_s
    return s.ttft_p50_s if q == 50 else s.ttft_p95_s


def cost_svg(index: int, route: RouteReport, colours: dict[str, str]) -> str:
    arms = list(route.arms)
    row, top = 34, 12
    label_width = min(230, max(90, 7 * max(len(arm.label) for arm in arms) + 12))
    value_room = 78
    left, right = label_width, WIDTH - value_room
    height = top + row * len(arms) + 46
    bottom = top + row * len(arms)
    costs = [arm.summary.cost_per_1k_usd or 0.0 for arm in arms]
    x = Axis(0.0, max(costs), left, right, log=False)
    parts = [
        _svg_open(
            "cost",
            index,
            route.route,
            height,
            f"Cost per 1,000 requests, route {route.route}",
            "USD per 1,000 requests: "
            + ", ".join(f"{arm.label} {format_usd(arm.summary.cost_per_1k_usd)}" for arm in arms),
        )
    ]
    for tick in x.ticks:
        px = x(tick)
        parts.append(
            f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{bottom}"/>'
            f'<text class="tick" x="{px:.1f}" y="{bottom + 16}" text-anchor="middle">'
            f"{_e(_tick_usd(tick))}</text>"
        )
    for i, (arm, cost) in enumerate(zip(arms, costs, strict=True)):
        y0 = top + i * row + 6
        bar_height = row - 12
        width = max(0.0, x(cost) - left)
        parts.append(
            f'<text class="bar-label" x="{left - 8}" y="{y0 + bar_height / 2 + 4:.1f}" '
            f'text-anchor="end">{_e(arm.label)}</text>'
            f'<rect class="track" x="{left}" y="{y0}" width="{right - left}" '
            f'height="{bar_height}" rx="3"/>'
            f'<rect class="bar" data-arm="{_e(arm.label)}" x="{left}" y="{y0}" '
            f'width="{max(width, 1.5):.1f}" height="{bar_height}" rx="3" '
            f'fill="{colours[arm.label]}"><title>{_e(arm.label)}: '
            f"{_e(format_usd(arm.summary.cost_per_1k_usd))} per 1,000 requests</title></rect>"
            f'<text class="bar-value" x="{left + max(width, 1.5) + 6:.1f}" '
            f'y="{y0 + bar_height / 2 + 4:.1f}">{_e(format_usd(arm.summary.cost_per_1k_usd))}'
            "</text>"
        )
    parts.append(
        f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{bottom}"/>'
        f'<text class="axis-label" x="{(left + right) / 2}" y="{height - 8}" '
        'text-anchor="middle">USD per 1,000 requests</text>'
    )
    if not any(costs):
        parts.append(
            f'<text class="empty-note" x="{(left + right) / 2}" y="{top + 20}" '
            'text-anchor="middle">no cost recorded (no prices configured?)</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def checks_svg(
    index: int, route: RouteReport, version: RuleVersionReport, colours: dict[str, str]
) -> str:
    """Pass rate per arm · target for each check of `version`: a bar per row of its table, grouped
    by check, with the 95% Wilson interval as a whisker."""
    heading, row, top = 22, 24, 8
    label_width = min(230, max(110, 7 * max(len(r.label) for r in version.rows) + 20))
    value_room = 172 if any(r.below_primary for r in version.rows) else 64
    left, right = label_width, WIDTH - value_room
    groups = [(check, [r for r in version.rows if r.check == check]) for check in version.checks]
    bottom = top + sum(heading + row * len(rows) for _, rows in groups)
    height = bottom + 40
    x = Axis(0.0, 1.0, left, right, log=False)
    parts = [
        _svg_open(
            "checks",
            index,
            route.route,
            height,
            f"Pass rate by check, rule {version.rule} version {version.version}, "
            f"route {route.route}",
            "Pass rate (95% interval) of each check per arm: "
            + "; ".join(
                f"{r.check}, {r.label}: {format_percent(r.summary.pass_rate.value)} "
                f"[{format_percent(r.summary.pass_rate.low)}, "
                f"{format_percent(r.summary.pass_rate.high)}] of {r.summary.count}"
                + (", significantly below the primary" if r.below_primary else "")
                for r in version.rows
            )
            + ".",
        )
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        px = x(tick)
        parts.append(
            f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{bottom}"/>'
            f'<text class="tick" x="{px:.1f}" y="{bottom + 16}" text-anchor="middle">'
            f"{tick * 100:.0f}%</text>"
        )
    y = float(top)
    for check, rows in groups:
        parts.append(
            f'<text class="group-label" x="8" y="{y + heading - 7:.1f}">{_e(check)}</text>'
        )
        y += heading
        for r in rows:
            parts.append(_check_bar(r, y, row, x, left, right, colours[r.label]))
            y += row
    parts.append(
        f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{bottom}"/>'
        f'<text class="axis-label" x="{(left + right) / 2}" y="{height - 8}" '
        'text-anchor="middle">pass rate (whiskers: 95% interval)</text></svg>'
    )
    return "".join(parts)


def _check_bar(
    r: CheckArmReport, y0: float, row: int, x: Axis, left: float, right: float, colour: str
) -> str:
    rate = r.summary.pass_rate
    bar_height = row - 8
    top, mid = y0 + 4, y0 + row / 2
    tooltip = (
        f"{r.check}, {r.label}: {format_percent(rate.value)} pass "
        f"({r.summary.passed} of {r.summary.count}; {r.summary.failed} fail, "
        f"{r.summary.errors} error)"
    )
    width = max(1.5, x(rate.value or 0.0) - left)
    low, high = x(rate.low), x(rate.high)
    flag = '<tspan class="flag" dx="6">▼ below primary</tspan>' if r.below_primary else ""
    return (
        f'<text class="bar-label" x="{left - 8}" y="{mid + 4:.1f}" text-anchor="end">'
        f"{_e(r.label)}</text>"
        f'<rect class="track" x="{left}" y="{top:.1f}" width="{right - left}" '
        f'height="{bar_height}" rx="3"/>'
        f'<rect class="bar{" below" if r.below_primary else ""}" data-arm="{_e(r.label)}" '
        f'data-check="{_e(r.check)}" x="{left}" y="{top:.1f}" width="{width:.1f}" '
        f'height="{bar_height}" rx="3" fill="{colour}"><title>{_e(tooltip)}</title></rect>'
        f'<line class="whisker" x1="{low:.1f}" x2="{high:.1f}" y1="{mid:.1f}" y2="{mid:.1f}"/>'
        f'<line class="whisker" x1="{low:.1f}" x2="{low:.1f}" y1="{mid - 4:.1f}" '
        f'y2="{mid + 4:.1f}"/><line class="whisker" x1="{high:.1f}" x2="{high:.1f}" '
        f'y1="{mid - 4:.1f}" y2="{mid + 4:.1f}"/>'
        f'<text class="bar-value" x="{right + 8}" y="{mid + 4:.1f}">'
        f"{_e(format_percent(rate.value))}{flag}</text>"
    )


def adaptation_svg(
    index: int, route: str, rule: ContextAwarenessReport, colours: dict[str, str]
) -> str:
    """Adaptation rate per target of `rule`'s probes on `route`: a bar per target with its 95%
    Wilson interval as a whisker (`colours`: target → colour)."""
    row, top = 24, 8
    label_width = min(230, max(110, 7 * max(len(t.target) for t in rule.targets) + 20))
    left, right = label_width, WIDTH - 200
    bottom = top + row * len(rule.targets)
    height = bottom + 40
    x = Axis(0.0, 1.0, left, right, log=False)
    parts = [
        _svg_open(
            "adaptation",
            index,
            route,
            height,
            f"Adaptation to a flipped rule, rule {rule.rule}, route {route}",
            "Share of rule-flip probes that followed the flipped value (95% interval), per "
            "model: "
            + "; ".join(
                f"{t.target}: {format_percent(t.score.adaptation.rate)} "
                f"[{format_percent(t.score.adaptation.low)}, "
                f"{format_percent(t.score.adaptation.high)}] of {t.score.probes}, stuck "
                f"{format_percent(t.score.stuck_rate.rate)}"
                for t in rule.targets
            )
            + ".",
        )
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        px = x(tick)
        parts.append(
            f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{bottom}"/>'
            f'<text class="tick" x="{px:.1f}" y="{bottom + 16}" text-anchor="middle">'
            f"{tick * 100:.0f}%</text>"
        )
    y = float(top)
    for t in rule.targets:
        parts.append(_adaptation_bar(rule.rule, t, y, row, x, left, right, colours[t.target]))
        y += row
    parts.append(
        f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{bottom}"/>'
        f'<text class="axis-label" x="{(left + right) / 2}" y="{height - 8}" '
        'text-anchor="middle">adaptation rate (whiskers: 95% interval)</text></svg>'
    )
    return "".join(parts)


def _adaptation_bar(
    rule: str, t: TargetAdaptation, y0: float, row: int, x: Axis, left: float, right: float,
    colour: str,
) -> str:  # fmt: skip
    rate, stuck = t.score.adaptation, t.score.stuck_rate
    bar_height = row - 8
    top, mid = y0 + 4, y0 + row / 2
    tooltip = (
        f"{t.target}: followed {t.score.followed}, stuck {t.score.stuck}, other "
        f"{t.score.other} of {t.score.probes} probes"
    )
    width = max(1.5, x(rate.rate or 0.0) - left)
    low, high = x(rate.low or 0.0), x(rate.high or 0.0)
    is_stuck = stuck.low is not None and stuck.low > 0.5
    flag = '<tspan class="flag" dx="6">▲ stuck</tspan>' if is_stuck else ""
    return (
        f'<text class="bar-label" x="{left - 8}" y="{mid + 4:.1f}" text-anchor="end">'
        f"{_e(t.target)}</text>"
        f'<rect class="track" x="{left}" y="{top:.1f}" width="{right - left}" '
        f'height="{bar_height}" rx="3"/>'
        f'<rect class="bar{" stuck" if is_stuck else ""}" data-target="{_e(t.target)}" '
        f'data-rule="{_e(rule)}" x="{left}" y="{top:.1f}" width="{width:.1f}" '
        f'height="{bar_height}" rx="3" fill="{colour}"><title>{_e(tooltip)}</title></rect>'
        f'<line class="whisker" x1="{low:.1f}" x2="{high:.1f}" y1="{mid:.1f}" y2="{mid:.1f}"/>'
        f'<line class="whisker" x1="{low:.1f}" x2="{low:.1f}" y1="{mid - 4:.1f}" '
        f'y2="{mid + 4:.1f}"/><line class="whisker" x1="{high:.1f}" x2="{high:.1f}" '
        f'y1="{mid - 4:.1f}" y2="{mid + 4:.1f}"/>'
        f'<text class="bar-value" x="{right + 8}" y="{mid + 4:.1f}">'
        f"{_e(format_percent(rate.rate))} · stuck {_e(format_percent(stuck.rate))}{flag}</text>"
    )
