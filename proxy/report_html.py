"""The report as one self-contained HTML page: inline CSS, charts drawn here as inline SVG.

Nothing is loaded from anywhere (no scripts, no web fonts, no images), so the file can be mailed,
attached to a ticket or opened offline. Every string that comes from the store (route, target,
status names) goes through `html.escape` before it reaches the page.

Per route the page has: headline cards per arm (with the change against the primary), the arm
table, a latency chart (the empirical cumulative distribution of durations per arm, p50 and p95
marked), a cost chart (USD per 1,000 requests per arm, bars), a time-to-first-token chart when
streams exist, and the pairs table with the noise floor. Charts are `<svg class="chart KIND"
data-route="ROUTE">` with a `<title>`, a `<desc>` and `role="img"`, KIND being `latency`, `ttft` or
`cost`; tests find them by those classes.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from analyzers.summary import Rate, newcombe_difference
from proxy.report import (
    describe_failures,
    describe_window,
    format_difference,
    format_duration,
    format_percent,
    format_ratio,
    format_time,
    format_usd,
)

if TYPE_CHECKING:
    from proxy.report import ArmReport, Report, RouteReport

PRIMARY_COLOUR = "#2563eb"
PALETTE = ("#ea580c", "#059669", "#9333ea", "#db2777", "#0891b2", "#ca8a04", "#4b5563")
"""Colours of the other arms, in table order (the primary is always blue)."""

ECDF_POINTS = 400
"""A latency line is drawn through at most this many quantiles, whatever the request count."""

_ARM_SUBHEADINGS = (
    "count", "rate (95% CI)", "p50", "p95", "p99", "p50", "p95",
    "total", "per request", "per 1k req", "in", "out",
)  # fmt: skip
_PAIR_HEADINGS = (
    "kind", "candidate", "pairs (both ok / all)", "exact", "normalized", "JSON",
    "Δ latency p50", "Δ ttft p50", "Δ cost p50", "length ratio p50", "beyond noise",
)  # fmt: skip
_WIDTH = 560
_PLOT_LEFT, _PLOT_RIGHT, _PLOT_TOP, _PLOT_BOTTOM = 56, 20, 16, 48


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
    body.append(_footer())
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="mirrorgate report">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _header(report: Report) -> str:
    facts = [
        ("Window", describe_window(report)),
        ("Exchanges", f"{report.exchanges:,}"),
        ("Pairs", f"{report.pairs:,}"),
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
        "first token, errors, cost and agreement with the primary.</p>"
        f'<dl class="facts">{items}</dl>{warning}</header>'
    )


def _footer() -> str:
    return (
        '<footer class="page"><p>Latency runs from receiving the request to the last byte of the '
        "answer, failed exchanges included; time to first token covers streams. Percentiles "
        "interpolate linearly between ranks. Rates carry a 95% Wilson interval, differences of "
        "rates a 95% Newcombe interval; &ldquo;beyond noise&rdquo; is a candidate's disagreement "
        "minus the primary's disagreement with itself. Details: docs/report.md.</p>"
        "<p>Generated by mirrorgate.</p></footer>"
    )


def _colours(route: RouteReport) -> dict[str, str]:
    colours: dict[str, str] = {}
    others = iter(PALETTE * (1 + len(route.arms) // len(PALETTE)))
    for arm in route.arms:
        colours[arm.label] = PRIMARY_COLOUR if arm.arm == "primary" else next(others)
    return colours


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
                _ecdf_svg(index, route, colours, kind="latency"),
                _legend(route, colours, kind="latency"),
            ),
            _figure(
                "Cost per 1,000 requests",
                "Mean cost of a request in this arm, times 1,000.",
                _cost_svg(index, route, colours),
                "",
            ),
        ]
        if route.has_streams:
            charts.append(
                _figure(
                    "Time to first token (streams)",
                    "Share of streamed requests whose first token arrived within a time.",
                    _ecdf_svg(index, route, colours, kind="ttft"),
                    _legend(route, colours, kind="ttft"),
                )
            )
        parts.append(f'<div class="charts">{"".join(charts)}</div>')
    else:
        parts.append('<p class="note">No exchanges for this route in this window (pairs only).</p>')
    parts.append(_pairs(route))
    parts.append("</section>")
    return "\n".join(parts)


def _figure(title: str, caption: str, svg: str, legend: str) -> str:
    return (
        f'<figure class="chart-card"><figcaption><strong>{_e(title)}</strong>'
        f"<span>{_e(caption)}</span></figcaption>{svg}{legend}</figure>"
    )


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


def _rate_cell(rate: Rate, *, show_n: bool = False) -> str:
    """A rate with its 95% interval underneath (and its n, where it differs from the row's)."""
    n = f'<span class="ci">n = {rate.n:,}</span>' if show_n else ""
    if rate.value is None:
        return f"<td>—{n}</td>"
    return (
        f"<td>{_e(format_percent(rate.value))}"
        f'<span class="ci">{rate.low * 100:.1f}&ndash;{rate.high * 100:.1f}%</span>{n}</td>'
    )


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
            _rate_cell(s.error_rate),
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


def _pairs(route: RouteReport) -> str:
    if not route.candidates and not route.noise_pairs:
        return ""
    parts = ["<h3>Agreement with the primary</h3>"]
    if route.candidates:
        head = "".join(
            f'<th scope="col" class="{"label" if i < 2 else "num"}">{name}</th>'
            for i, name in enumerate(_PAIR_HEADINGS)
        )
        rows = []
        for c in route.candidates:
            a = c.agreement
            beyond = format_difference(c.beyond_noise)
            flagged = c.beyond_noise is not None and c.beyond_noise.significant
            rows.append(
                "<tr>"
                f'<td class="label">{_e(c.kind)}</td><th scope="row" class="label">'
                f"{_e(c.candidate)}</th>"
                f"<td>{a.n:,} / {c.pairs:,}</td>"
                + _rate_cell(a.exact)
                + _rate_cell(a.normalized)
                + _rate_cell(a.json, show_n=True)
                + f"<td>{_e(format_duration(c.latency_delta_p50_s, signed=True))}</td>"
                f"<td>{_e(format_duration(c.ttft_delta_p50_s, signed=True))}</td>"
                f"<td>{_e(format_usd(c.cost_delta_p50_usd, signed=True))}</td>"
                f"<td>{_e(format_ratio(c.length_ratio_p50))}</td>"
                f'<td class="{"worse" if flagged else ""}">{_e(beyond)}</td></tr>'
            )
        parts.append(
            f'<div class="table-wrap"><table class="pairs" data-route="{_e(route.route)}">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
        )
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
            '<p class="note">No noise pairs (the primary asked twice) with both answers ok in '
            "this window, so disagreement cannot be separated from the primary's own "
            "variability.</p>"
        )
    return "".join(parts)


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


# ---- charts ----


def _nice_step(span: float, target_ticks: int = 5) -> float:
    raw = span / max(1, target_ticks)
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


class _Axis:
    """Maps data values to pixels, linear or log10, with tick positions."""

    def __init__(self, low: float, high: float, start: float, end: float, *, log: bool) -> None:
        self.log = log
        if log:
            low, high = max(low, 1e-4), max(high, 1e-4)
            if high / low < 1.5:
                low, high = low / 2, high * 2
            candidates = [
                m * 10.0**k
                for k in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
                for m in (1, 2, 5)
            ]
            self.low = max(c for c in candidates if c <= low * (1 + 1e-9))
            self.high = min(c for c in candidates if c >= high * (1 - 1e-9))
            ticks = [c for c in candidates if self.low <= c <= self.high]
            if len(ticks) > 7:  # too crowded: keep the powers of ten
                decades = [t for t in ticks if _is_power_of_ten(t)]
                ticks = decades if len(decades) >= 2 else ticks[:: math.ceil(len(ticks) / 6)]
            self.ticks = ticks
        else:
            high = high if high > low else low + (abs(low) or 1.0)
            step = _nice_step(high - min(low, 0.0))
            self.low = min(0.0, math.floor(low / step) * step)
            self.high = math.ceil(high / step - 1e-9) * step
            count = round((self.high - self.low) / step)
            self.ticks = [self.low + i * step for i in range(count + 1)]
        self.start, self.end = start, end

    def __call__(self, value: float) -> float:
        if self.log:
            value = min(max(value, self.low), self.high)
            share = math.log10(value / self.low) / math.log10(self.high / self.low)
        else:
            share = (value - self.low) / (self.high - self.low)
        return self.start + share * (self.end - self.start)


def _is_power_of_ten(value: float) -> bool:
    exponent = round(math.log10(value))
    return math.isclose(value, 10.0**exponent, rel_tol=1e-9)


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
        f'viewBox="0 0 {_WIDTH} {height}" width="100%" role="img" '
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


def _ecdf_svg(index: int, route: RouteReport, colours: dict[str, str], *, kind: str) -> str:
    series = [
        (arm, arm.durations_s if kind == "latency" else arm.ttfts_s)
        for arm in route.arms
        if (arm.durations_s if kind == "latency" else arm.ttfts_s)
    ]
    height = 300
    left, right = _PLOT_LEFT, _WIDTH - _PLOT_RIGHT
    top, bottom = _PLOT_TOP, height - _PLOT_BOTTOM
    low = min(values[0] for _, values in series)
    high = max(values[-1] for _, values in series)
    positive_low = min((v for _, values in series for v in values if v > 0), default=1e-3)
    x = _Axis(positive_low, high, left, right, log=high / max(positive_low, 1e-9) >= 5)
    if not x.log:
        x = _Axis(low, high, left, right, log=False)

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


def _cost_svg(index: int, route: RouteReport, colours: dict[str, str]) -> str:
    arms = list(route.arms)
    row, top = 34, 12
    label_width = min(230, max(90, 7 * max(len(arm.label) for arm in arms) + 12))
    value_room = 78
    left, right = label_width, _WIDTH - value_room
    height = top + row * len(arms) + 46
    bottom = top + row * len(arms)
    costs = [arm.summary.cost_per_1k_usd or 0.0 for arm in arms]
    x = _Axis(0.0, max(costs), left, right, log=False)
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


_CSS = """
:root {
  --ink: #1f2937; --muted: #6b7280; --line: #e5e7eb; --bg: #f4f5f7; --card: #ffffff;
  --accent: #2563eb; --worse: #b91c1c; --better: #047857;
  color-scheme: light;
}
* { box-sizing: border-box; }
body {
  margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
    sans-serif;
  font-variant-numeric: tabular-nums;
}
header.page, section, nav.toc, footer.page { max-width: 1240px; margin: 0 auto; }
header.page { padding: 32px 24px 8px; }
h1 { font-size: 26px; margin: 0 0 4px; letter-spacing: -0.01em; }
h1 span { color: var(--muted); font-weight: 400; }
.lede { margin: 0 0 16px; color: var(--muted); }
dl.facts {
  display: flex; flex-wrap: wrap; gap: 8px 28px; margin: 0; padding: 14px 18px;
  background: var(--card); border: 1px solid var(--line); border-radius: 10px;
}
dl.facts div { min-width: 0; }
dt { font-size: 11px; text-transform: uppercase; letter-spacing: .06em; color: var(--muted); }
dd { margin: 0; font-weight: 600; overflow-wrap: anywhere; }
.warning {
  background: #fef3c7; border: 1px solid #f59e0b; padding: 8px 12px; border-radius: 8px;
}
nav.toc { padding: 0 24px; }
nav.toc ul { list-style: none; display: flex; flex-wrap: wrap; gap: 8px; padding: 0; }
nav.toc a {
  display: inline-block; padding: 3px 10px; border-radius: 999px; background: var(--card);
  border: 1px solid var(--line); color: var(--accent); text-decoration: none;
}
section {
  background: var(--card); border: 1px solid var(--line); border-radius: 12px;
  margin: 20px auto; padding: 20px 24px 24px; box-shadow: 0 1px 2px rgba(0,0,0,.04);
}
section.empty h2 { margin-top: 0; }
h2 { font-size: 20px; margin: 0 0 16px; overflow-wrap: anywhere; }
h2 .kicker {
  font-size: 11px; text-transform: uppercase; letter-spacing: .08em; color: var(--muted);
  display: block; font-weight: 600;
}
h3 { font-size: 15px; margin: 24px 0 8px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(230px, 1fr)); gap: 12px; }
.card {
  border: 1px solid var(--line); border-top: 4px solid var(--arm); border-radius: 10px;
  padding: 10px 14px 12px;
}
.card h3 { margin: 0 0 8px; font-size: 14px; overflow-wrap: anywhere; }
.metric { display: grid; grid-template-columns: 1fr auto; column-gap: 8px; padding: 2px 0; }
.metric .name { color: var(--muted); }
.metric .value { font-weight: 600; text-align: right; }
.metric .change { grid-column: 1 / -1; text-align: right; font-size: 12px; color: var(--muted); }
.change.worse, td.worse { color: var(--worse); font-weight: 600; }
.change.better { color: var(--better); font-weight: 600; }
.swatch {
  display: inline-block; width: 10px; height: 10px; border-radius: 3px; margin-right: 7px;
  background: var(--arm); vertical-align: baseline;
}
.table-wrap { overflow-x: auto; margin-top: 16px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 6px 8px; text-align: right; white-space: nowrap; vertical-align: top; }
th.label, td.label { text-align: left; }
thead th {
  color: var(--muted); font-weight: 600; font-size: 12px; border-bottom: 1px solid var(--line);
}
thead tr:first-child th[colspan] { text-align: center; border-bottom: 2px solid var(--line); }
tbody tr:nth-child(odd) { background: #f9fafb; }
tbody th { font-weight: 600; }
.ci { display: block; font-size: 11px; color: var(--muted); }
.failures, .note { color: var(--muted); margin: 10px 0 0; }
.charts {
  display: grid; grid-template-columns: repeat(auto-fit, minmax(440px, 1fr)); gap: 16px;
  margin-top: 18px; align-items: start;
}
figure.chart-card {
  margin: 0; border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px;
}
figcaption strong { display: block; font-size: 14px; }
figcaption span { display: block; color: var(--muted); font-size: 12px; margin-bottom: 6px; }
svg.chart { display: block; height: auto; max-width: 100%; }
svg.chart text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
svg .plot-bg { fill: #fbfbfc; }
svg .grid { stroke: #eceef1; stroke-width: 1; }
svg .axis { stroke: #9ca3af; stroke-width: 1; }
svg .guide { stroke: #9ca3af; stroke-width: 1; stroke-dasharray: 4 4; }
svg .guide-label { fill: var(--muted); font-weight: 600; }
svg .tick { fill: var(--muted); }
svg .axis-label { fill: #4b5563; font-weight: 600; }
svg .ecdf { fill: none; stroke-width: 2.2; stroke-linejoin: round; }
svg .marker { stroke: #fff; stroke-width: 1.5; }
svg .track { fill: #f3f4f6; }
svg .bar-label { fill: var(--ink); }
svg .bar-value { fill: var(--ink); font-weight: 600; }
svg .empty-note { fill: var(--muted); font-style: italic; }
ul.legend { list-style: none; padding: 0; margin: 6px 0 0; font-size: 12px; }
ul.legend li { margin: 2px 0; }
.muted { color: var(--muted); }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
footer.page { padding: 8px 24px 40px; color: var(--muted); font-size: 12px; }
@media print {
  body { background: #fff; }
  section { box-shadow: none; break-inside: avoid; }
  .charts { grid-template-columns: 1fr 1fr; }
}
"""
