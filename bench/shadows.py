"""The shadow-traffic stage's bookkeeping: gateway counters, medians of repeats, verdicts, tables.

The stage itself (in `suite.py`) measures one mirrorgate at c=16 in two *scenarios*, each a pair of
routes with the same primary, one without shadows and one with a fast and a slow (2 s) candidate
at `sample: 1.0`:

- **saturated**: the primary answers at once, so the closed loop keeps the gateway's one core busy
  with client traffic alone. The gateway then sheds nearly every shadow call (`reason="overload"`),
  and a ratio near 1 says that shedding works, not what a running shadow costs;
- **paced**: the primary answers after a model-like delay (`targets.PACED_LATENCY_MS`), so the
  gateway is far from saturated, the shadows really run, and the ratio is their cost.

Each scenario alternates its two routes over several repeats per mode; then 100,000 requests go
through the paced shadowed route while the gateway's RSS is sampled. This module holds what needs
no process: the parse of `/metrics` into shadow counters, the summary of the repeats, the issue's
two targets and the tables.

The issue's targets (issue 3, "Shadow traffic", speed section): at c=16 the primary's p50 and p99
with shadows stay within `LATENCY_TOLERANCE` of the same run without shadows; resident memory stays
flat over 100,000 requests, read here as a least-squares RSS slope of at most `FLAT_MB_PER_100K`.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.report import NA, CellResult, table

PLAIN = "no shadows"
SHADOWED = "2 shadows"
LATENCY_TOLERANCE = 0.10
"""Shadowed p50/p99 may exceed the unshadowed ones by this share (the issue's 10 %)."""
FLAT_MB_PER_100K = 2.0
"""RSS growth per 100,000 requests that still counts as flat (20 bytes a request: no leak)."""
SHED_BY_OVERLOAD = 0.5
"""A latency target counts as met *by shedding* when at least this share of the shadow calls was
shed for overload (so that few shadows ran)."""

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class ShadowCounters:
    """The gateway's shadow counters for one route (from `/metrics`), or a difference of two."""

    offered: float = 0.0
    """Client requests the route served (`mirrorgate_requests_total{arm="primary"}`); with every
    shadow at `sample: 1.0`, each one offered a call to every candidate."""
    ran: dict[str, dict[str, float]] = field(default_factory=dict)
    """Finished shadow calls, candidate -> status class -> count (`arm="shadow"`)."""
    dropped: dict[str, dict[str, float]] = field(default_factory=dict)
    """Shadow calls not made, candidate -> reason -> count (`mirrorgate_shadow_dropped_total`)."""

    @classmethod
    def parse(cls, metrics_text: str, route: str) -> ShadowCounters:
        out = cls()
        for line in metrics_text.splitlines():
            name, _, rest = line.partition("{")
            if name not in ("mirrorgate_requests_total", "mirrorgate_shadow_dropped_total"):
                continue
            labels_text, _, value = rest.rpartition("} ")
            labels = dict(_LABEL.findall(labels_text))
            if labels.get("route") != route:
                continue
            count = float(value)
            if name == "mirrorgate_shadow_dropped_total":
                by_reason = out.dropped.setdefault(labels["target"], {})
                by_reason[labels["reason"]] = by_reason.get(labels["reason"], 0.0) + count
            elif labels.get("arm") == "primary":
                out.offered += count
            elif labels.get("arm") == "shadow":
                by_class = out.ran.setdefault(labels["target"], {})
                by_class[labels["status_class"]] = by_class.get(labels["status_class"], 0) + count
        return out

    def __sub__(self, other: ShadowCounters) -> ShadowCounters:
        return self._combine(other, -1.0)

    def __add__(self, other: ShadowCounters) -> ShadowCounters:
        return self._combine(other, 1.0)

    def _combine(self, other: ShadowCounters, sign: float) -> ShadowCounters:
        return ShadowCounters(
            self.offered + sign * other.offered,
            _combine_nested(self.ran, other.ran, sign),
            _combine_nested(self.dropped, other.dropped, sign),
        )

    def in_flight(self, candidates: Sequence[str]) -> float:
        """Shadow calls offered but neither finished nor dropped (every candidate at sample 1)."""
        return sum(
            self.offered - sum(self.ran.get(c, {}).values()) - sum(self.dropped.get(c, {}).values())
            for c in candidates
        )


def _combine_nested(
    a: dict[str, dict[str, float]], b: dict[str, dict[str, float]], sign: float
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for outer in a.keys() | b.keys():
        inner_a, inner_b = a.get(outer, {}), b.get(outer, {})
        both = inner_a.keys() | inner_b.keys()
        out[outer] = {k: inner_a.get(k, 0.0) + sign * inner_b.get(k, 0.0) for k in both}
    return out


@dataclass(frozen=True)
class ShadowCalls:
    """The shadow calls of some cells, every candidate together: how many were made, how many
    shed and why. Every candidate is at `sample: 1.0`, so each client request offers one call to
    each candidate that shows in the counters."""

    offered: float
    made: float
    shed: dict[str, float]
    """Reason (`overload`, `concurrency`, ...) -> calls not made."""

    @classmethod
    def of(cls, counters: ShadowCounters) -> ShadowCalls:
        candidates = counters.ran.keys() | counters.dropped.keys()
        shed: dict[str, float] = {}
        for by_reason in counters.dropped.values():
            for reason, count in by_reason.items():
                shed[reason] = shed.get(reason, 0.0) + count
        made = sum(sum(by_class.values()) for by_class in counters.ran.values())
        return cls(counters.offered * len(candidates), made, shed)

    def share(self, count: float) -> float:
        return 100 * count / self.offered if self.offered else math.nan

    @property
    def overload_share(self) -> float:
        """Share (0 to 1) of the offered calls shed because the event loop was overloaded."""
        return self.shed.get("overload", 0.0) / self.offered if self.offered else 0.0

    def made_text(self) -> str:
        """`1,234 of 40,000 (3.1 %)`."""
        return f"{self.made:,.0f} of {self.offered:,.0f} ({self.share(self.made):.1f} %)"

    def shed_text(self) -> str:
        """`overload 95.2 %, concurrency 1.7 %` (largest first), or `none`."""
        parts = sorted(self.shed.items(), key=lambda item: -item[1])
        return ", ".join(f"{r} {self.share(n):.1f} %" for r, n in parts if n) or "none"


@dataclass(frozen=True)
class Scenario:
    """A primary measured on two routes: without shadows and with the two shadows."""

    name: str
    """`saturated` or `paced`."""
    plain_route: str
    shadowed_route: str
    primary: str
    """What the primary is, for the report."""
    cell_s: float
    warmup_s: float
    ramp_s: float = 0.0
    """The load generator's workers start spread over this long (`loadgen.py --ramp`): one primary
    latency for the paced primary, so that its 16 clients do not arrive in lock-step."""
    think_s: float = 0.0
    """Each client pauses a random 0 to this many seconds before each request (`--think`), so that
    they do not drift into lock-step either."""

    def route(self, variant: str) -> str:
        return self.shadowed_route if variant == SHADOWED else self.plain_route


@dataclass
class ShadowCell:
    """One measured closed loop of the stage, with the shadow counters it moved."""

    scenario: str
    variant: str
    """`PLAIN` or `SHADOWED`."""
    repeat: int
    cell: CellResult
    counters: ShadowCounters
    """From before the warm-up to after the last shadow call of the cell finished."""


@dataclass(frozen=True)
class GatewayBacklog:
    """The gateway's background queues, from `/metrics` (all routes together)."""

    recorder_queue: float = 0.0
    """`mirrorgate_recorder_queue_depth`: records waiting for the SQLite writer thread."""
    recorder_dropped: float = 0.0
    """`mirrorgate_recorder_dropped_total`, all reasons: records never stored."""
    analysis_dropped: float = 0.0
    """`mirrorgate_analysis_dropped_total`: answers not analysed (analysis queue full)."""

    @classmethod
    def parse(cls, metrics_text: str) -> GatewayBacklog:
        values = {"queue": 0.0, "rec": 0.0, "ana": 0.0}
        for line in metrics_text.splitlines():
            if line.startswith("mirrorgate_recorder_queue_depth "):
                values["queue"] += float(line.rsplit(" ", 1)[1])
            elif line.startswith("mirrorgate_recorder_dropped_total"):
                values["rec"] += float(line.rsplit(" ", 1)[1])
            elif line.startswith("mirrorgate_analysis_dropped_total"):
                values["ana"] += float(line.rsplit(" ", 1)[1])
        return cls(values["queue"], values["rec"], values["ana"])


@dataclass(frozen=True)
class RssSample:
    """One reading during the shadow memory part."""

    seconds: float
    requests: float
    """Requests the shadowed route served since the start of the part."""
    rss_mb: float
    recorder_queue: float


@dataclass
class ShadowMemory:
    """RSS of the gateway while a shadowed route served `requests` requests."""

    scenario: str = ""
    route: str = ""
    concurrency: int = 0
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    samples: list[RssSample] = field(default_factory=list)
    """Every ~0.5 s, the start included."""
    rss_after_drain_mb: float = 0.0
    """After the last shadow call of the stage finished."""
    counters: ShadowCounters = field(default_factory=ShadowCounters)
    backlog_before: GatewayBacklog = field(default_factory=GatewayBacklog)
    backlog_after: GatewayBacklog = field(default_factory=GatewayBacklog)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def every(self, step: int) -> list[RssSample]:
        """The first sample at or after each multiple of `step` requests (the start included)."""
        picked: list[RssSample] = []
        mark = 0.0
        for sample in self.samples:
            if sample.requests >= mark:
                picked.append(sample)
                mark = (sample.requests // step + 1) * step
        return picked

    def slope_mb_per_100k(self, skip_share: float = 0.0) -> float | None:
        """Least-squares RSS slope over the samples past the first `skip_share` of requests."""
        if not self.samples:
            return None
        start = self.samples[-1].requests * skip_share
        points = [(s.requests, s.rss_mb) for s in self.samples if s.requests >= start]
        if len(points) < 3:
            return None
        mean_n = statistics.fmean(n for n, _ in points)
        mean_mb = statistics.fmean(mb for _, mb in points)
        var = sum((n - mean_n) ** 2 for n, _ in points)
        if var == 0:
            return None
        cov = sum((n - mean_n) * (mb - mean_mb) for n, mb in points)
        return cov / var * 100_000


@dataclass
class ShadowStageResult:
    """Everything the shadow stage measured (a part of results.json)."""

    concurrency: int
    repeats: int
    scenarios: list[Scenario] = field(default_factory=list)
    cells: list[ShadowCell] = field(default_factory=list)
    memory: ShadowMemory | None = None
    loadavg: list[list[str]] = field(default_factory=list)
    """/proc/loadavg (1, 5, 15 min) at the start and at the end of the stage."""


@dataclass(frozen=True)
class ShadowSummary:
    """Medians over the repeats of one (scenario, mode, variant)."""

    scenario: str
    stream: bool
    variant: str
    repeats: int
    rps: float
    p50: float
    p99: float
    p50_range: tuple[float, float]
    p99_range: tuple[float, float]
    ttft_p50: float | None
    ttft_p99: float | None
    gateway_cpu_us: float
    """Gateway CPU per client request: the shadow calls' cost included."""
    gateway_cpu_percent: float
    """The gateway's CPU use, in % of its one core (median over the repeats)."""
    mock_cpu_us: float
    other_cpu_percent: float
    calls: ShadowCalls
    """Shadow calls made and shed in these cells (warm-ups included; none without shadows)."""


def summarize(
    cells: Sequence[ShadowCell], scenario: str, stream: bool, variant: str
) -> ShadowSummary | None:
    picked = [
        c
        for c in cells
        if c.scenario == scenario and c.cell.stream is stream and c.variant == variant
    ]
    mine = [c.cell for c in picked]
    lat = [c.latency_ms for c in mine if c.latency_ms is not None]
    if not lat:
        return None
    counters = ShadowCounters()
    for c in picked:
        counters = counters + c.counters
    ttft = [c.ttft_ms for c in mine if c.ttft_ms is not None]
    med = statistics.median
    return ShadowSummary(
        scenario=scenario,
        stream=stream,
        variant=variant,
        repeats=len(lat),
        rps=med(c.rps for c in mine),
        p50=med(p.p50 for p in lat),
        p99=med(p.p99 for p in lat),
        p50_range=(min(p.p50 for p in lat), max(p.p50 for p in lat)),
        p99_range=(min(p.p99 for p in lat), max(p.p99 for p in lat)),
        ttft_p50=med(p.p50 for p in ttft) if ttft else None,
        ttft_p99=med(p.p99 for p in ttft) if ttft else None,
        gateway_cpu_us=med(c.server_cpu_us_per_request or 0.0 for c in mine),
        gateway_cpu_percent=med(c.rps * (c.server_cpu_us_per_request or 0.0) / 1e4 for c in mine),
        mock_cpu_us=med(c.mock_cpu_us_per_request or 0.0 for c in mine),
        other_cpu_percent=med(c.other_cpu_percent for c in mine),
        calls=ShadowCalls.of(counters),
    )


@dataclass(frozen=True)
class ShadowVerdict:
    goal: str
    measured: str
    met: bool | None
    caveat: str = ""
    """Why a verdict does not mean what it seems to (a target met because shadows were shed)."""


def verdicts(result: ShadowStageResult) -> list[ShadowVerdict]:
    out: list[ShadowVerdict] = []
    for scenario in result.scenarios:
        for stream in (False, True):
            mode = "streaming" if stream else "non-streaming"
            plain = summarize(result.cells, scenario.name, stream, PLAIN)
            shadowed = summarize(result.cells, scenario.name, stream, SHADOWED)
            for pct in ("p50", "p99"):
                goal = (
                    f"{scenario.name}, {mode}, c={result.concurrency}: primary {pct} with shadows "
                    f"≤ {1 + LATENCY_TOLERANCE:.2f}x without"
                )
                if plain is None or shadowed is None:
                    out.append(ShadowVerdict(goal, NA, None))
                    continue
                a, b = getattr(plain, pct), getattr(shadowed, pct)
                calls = shadowed.calls
                met = b / a <= 1 + LATENCY_TOLERANCE
                caveat = ""
                if calls.overload_share >= SHED_BY_OVERLOAD:
                    caveat = (
                        f"by shedding: {100 * calls.overload_share:.0f} % of the shadow calls "
                        "were shed for overload"
                    )
                out.append(
                    ShadowVerdict(
                        goal,
                        f"{_ms(b)} vs {_ms(a)} ms: {b / a:.2f}x ({b - a:+.2f} ms); shadow calls "
                        f"made {calls.share(calls.made):.1f} %, shed: {calls.shed_text()}",
                        met,
                        caveat,
                    )
                )
    mem = result.memory
    where = f"{mem.scenario} route, c={mem.concurrency}; " if mem else ""
    goal = (
        f"RSS flat over 100,000 requests with shadows ({where}slope ≤ {FLAT_MB_PER_100K:g} MB/100k)"
    )
    slope = mem.slope_mb_per_100k() if mem else None
    if mem is None or slope is None:
        out.append(ShadowVerdict(goal, NA, None))
    else:
        rss = [s.rss_mb for s in mem.samples]
        calls = ShadowCalls.of(mem.counters)
        measured = (
            f"{rss[0]:.0f} → {rss[-1]:.0f} MB (max {max(rss):.0f}) over {mem.requests:,} "
            f"requests; slope {slope:+.2f} MB/100k; shadow calls made "
            f"{calls.made:,.0f} ({calls.share(calls.made):.1f} %), shed: {calls.shed_text()}"
        )
        enough = mem.requests >= 100_000
        caveat = ""
        if calls.overload_share >= SHED_BY_OVERLOAD:
            caveat = f"{100 * calls.overload_share:.0f} % of the shadow calls were shed"
        met = slope <= FLAT_MB_PER_100K if enough else None
        out.append(ShadowVerdict(goal, measured, met, caveat))
    return out


def verdict_table(checks: Sequence[ShadowVerdict]) -> str:
    word = {True: "met", False: "**not met**", None: "not measured"}
    rows = (
        [v.goal, v.measured, word[v.met] + (f" — **{v.caveat}**" if v.caveat else "")]
        for v in checks
    )
    return table(["target", "measured", "verdict"], rows)


def _ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return NA
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def _range(r: tuple[float, float]) -> str:
    return f"{_ms(r[0])}-{_ms(r[1])}"


def _diff(b: float | None, a: float | None) -> str:
    return NA if a is None or b is None else f"{b - a:+.2f}"


def latency_table(result: ShadowStageResult, scenario: str) -> str:
    """Medians of one scenario's repeats per (mode, variant), the shadowed/unshadowed ratio and
    difference, with the shadow calls made and shed next to them (a ratio near 1 may just mean
    that everything was shed)."""
    headers = [
        "mode", "route", "req/s", "p50 ms", "p99 ms", "p50 range", "p99 range", "TTFT p50",
        "TTFT p99", "gateway CPU µs/req", "gateway CPU %", "mock CPU µs/req", "other CPU %",
        "shadow calls made", "shadow calls shed",
    ]  # fmt: skip
    rows: list[list[str]] = []
    for stream in (False, True):
        mode = "stream" if stream else "non-stream"
        pair = [summarize(result.cells, scenario, stream, v) for v in (PLAIN, SHADOWED)]
        for s in pair:
            if s is None:
                continue
            shadowed = s.variant == SHADOWED
            rows.append([
                mode, s.variant, f"{s.rps:,.0f}", _ms(s.p50), _ms(s.p99), _range(s.p50_range),
                _range(s.p99_range), _ms(s.ttft_p50), _ms(s.ttft_p99), f"{s.gateway_cpu_us:,.0f}",
                f"{s.gateway_cpu_percent:.0f}", f"{s.mock_cpu_us:,.0f}",
                f"{s.other_cpu_percent:.0f}",
                s.calls.made_text() if shadowed else NA, s.calls.shed_text() if shadowed else NA,
            ])  # fmt: skip
        a, b = pair
        if a is not None and b is not None:
            rows.append([
                mode, "**ratio**", f"{b.rps / a.rps:.2f}x", f"**{b.p50 / a.p50:.2f}x**",
                f"**{b.p99 / a.p99:.2f}x**", NA, NA,
                _ratio(b.ttft_p50, a.ttft_p50), _ratio(b.ttft_p99, a.ttft_p99),
                f"{b.gateway_cpu_us / a.gateway_cpu_us:.2f}x" if a.gateway_cpu_us else NA, NA,
                f"{b.mock_cpu_us / a.mock_cpu_us:.2f}x" if a.mock_cpu_us else NA, NA, NA, NA,
            ])  # fmt: skip
            rows.append([
                mode, "difference", f"{b.rps - a.rps:+,.0f}", _diff(b.p50, a.p50),
                _diff(b.p99, a.p99), NA, NA, _diff(b.ttft_p50, a.ttft_p50),
                _diff(b.ttft_p99, a.ttft_p99), f"{b.gateway_cpu_us - a.gateway_cpu_us:+,.0f}",
                f"{b.gateway_cpu_percent - a.gateway_cpu_percent:+.0f}", NA, NA, NA, NA,
            ])  # fmt: skip
    return table(headers, rows)


def _ratio(b: float | None, a: float | None) -> str:
    return f"{b / a:.2f}x" if a and b is not None else NA


def cells_table(result: ShadowStageResult) -> str:
    """Every measured cell, in the order run."""
    headers = [
        "scenario", "mode", "repeat", "route", "requests", "req/s", "p50 ms", "p99 ms",
        "gateway CPU %", "other CPU %", "shadow calls made", "shed",
    ]  # fmt: skip
    rows = []
    for sc in result.cells:
        c, lat = sc.cell, sc.cell.latency_ms
        calls = ShadowCalls.of(sc.counters)
        shadowed = sc.variant == SHADOWED
        rows.append([
            sc.scenario, c.mode, str(sc.repeat + 1), sc.variant, f"{c.requests:,}",
            f"{c.rps:,.0f}", _ms(lat.p50 if lat else None), _ms(lat.p99 if lat else None),
            f"{c.rps * (c.server_cpu_us_per_request or 0.0) / 1e4:.0f}",
            f"{c.other_cpu_percent:.0f}",
            f"{calls.made:,.0f}" if shadowed else NA, calls.shed_text() if shadowed else NA,
        ])  # fmt: skip
    return table(headers, rows)


def calls_table(result: ShadowStageResult) -> str:
    """Per scenario, mode and candidate: offered, ran (by status class), dropped (by reason)."""
    parts: list[tuple[str, ShadowCounters]] = []
    for scenario in result.scenarios:
        for stream in (False, True):
            total = ShadowCounters()
            for sc in result.cells:
                if (
                    sc.scenario == scenario.name
                    and sc.cell.stream is stream
                    and sc.variant == SHADOWED
                ):
                    total = total + sc.counters
            if total.offered:
                mode = "stream" if stream else "non-stream"
                parts.append((f"{scenario.name}, {mode}", total))
    mem = result.memory
    if mem is not None and mem.counters.offered:
        parts.append((f"memory ({mem.scenario}, non-stream, c={mem.concurrency})", mem.counters))
    reasons = sorted({r for _, t in parts for d in t.dropped.values() for r in d})
    headers = ["cells", "candidate", "offered", "ran", "ran (non-2xx)", "ran %"]
    headers += [f"dropped: {r}" for r in reasons]
    rows = []
    for label, counters in parts:
        for target in sorted(counters.ran.keys() | counters.dropped.keys()):
            ran = counters.ran.get(target, {})
            ok, total_ran = ran.get("2xx", 0.0), sum(ran.values())
            dropped = counters.dropped.get(target, {})
            rows.append([
                label, target, f"{counters.offered:,.0f}", f"{total_ran:,.0f}",
                f"{total_ran - ok:,.0f}", f"{100 * total_ran / counters.offered:.1f}",
                *(f"{dropped.get(r, 0.0):,.0f}" for r in reasons),
            ])  # fmt: skip
    return table(headers, rows)


def memory_table(memory: ShadowMemory, step: int) -> str:
    rows = [
        [f"{s.requests:,.0f}", f"{s.seconds:.0f}", f"{s.rss_mb:.1f}", f"{s.recorder_queue:,.0f}"]
        for s in memory.every(step)
    ]
    headers = ["requests through the shadowed route", "seconds", "RSS MB", "recorder queue"]
    return table(headers, rows)


def markdown(result: ShadowStageResult, step: int) -> str:
    """The stage's section of results.md."""
    load = " / ".join(" ".join(avg) for avg in result.loadavg)
    parts = [
        "### Shadow traffic (issue 3)",
        "",
        f"c={result.concurrency}, {result.repeats} repeats per cell, medians of the repeats; "
        f"load average (1/5/15 min) at the start / end of the stage: {load}.",
        "",
        verdict_table(verdicts(result)),
    ]
    for scenario in result.scenarios:
        parts += [
            "",
            f"#### {scenario.name.capitalize()}: {scenario.primary}",
            "",
            f"Routes `{scenario.plain_route}` (no shadows) and `{scenario.shadowed_route}` (2 "
            f"shadows); {scenario.warmup_s:g} s warm-up + {scenario.cell_s:g} s measured per cell"
            + (
                f"; the clients' first requests spread over {1000 * scenario.ramp_s:g} ms, then "
                f"a random pause of 0-{1000 * scenario.think_s:g} ms before each request (not "
                "part of the latency)."
                if scenario.ramp_s or scenario.think_s
                else "."
            ),
            "",
            latency_table(result, scenario.name),
        ]
    parts += [
        "",
        "#### Shadow calls",
        "",
        calls_table(result),
        "",
        "#### Every cell, in the order run",
        "",
        cells_table(result),
    ]
    if result.memory is not None:
        m = result.memory
        slope, late = m.slope_mb_per_100k(), m.slope_mb_per_100k(0.5)
        rss = [s.rss_mb for s in m.samples] or [math.nan]
        before, after = m.backlog_before, m.backlog_after
        calls = ShadowCalls.of(m.counters)
        parts += [
            "",
            f"#### Memory with shadows ({m.scenario}: `{m.route}`, c={m.concurrency}, non-stream)",
            "",
            f"{m.requests:,} requests at {m.rps:,.0f} req/s in {m.seconds:,.0f} s "
            f"({m.errors} errors); shadow calls made {calls.made_text()}, shed: "
            f"{calls.shed_text()}. RSS start {rss[0]:.1f} MB, max {max(rss):.1f} MB, end "
            f"{rss[-1]:.1f} MB, {m.rss_after_drain_mb:.1f} MB after the shadows drained; slope "
            f"{_signed(slope)} MB/100k requests over the stage, {_signed(late)} over its second "
            f"half. Records the recorder dropped during it: "
            f"{after.recorder_dropped - before.recorder_dropped:,.0f}; answers not analysed "
            f"(analysis queue full): {after.analysis_dropped - before.analysis_dropped:,.0f}.",
            "",
            memory_table(m, step),
        ]
    return "\n".join(parts)


def _signed(value: float | None) -> str:
    return NA if value is None else f"{value:+.2f}"


def as_json(result: ShadowStageResult) -> dict[str, Any]:
    """results.json form, with the derived summaries next to the raw cells."""
    data = asdict(result)
    data["summaries"] = [
        asdict(s)
        for scenario in result.scenarios
        for stream in (False, True)
        for v in (PLAIN, SHADOWED)
        if (s := summarize(result.cells, scenario.name, stream, v)) is not None
    ]
    data["verdicts"] = [asdict(v) for v in verdicts(result)]
    if result.memory is not None:
        data["memory"]["slope_mb_per_100k"] = result.memory.slope_mb_per_100k()
        data["memory"]["slope_mb_per_100k_second_half"] = result.memory.slope_mb_per_100k(0.5)
    return data
