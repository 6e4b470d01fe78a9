"""Turning load samples into cell results, and results into Markdown tables.

A *cell* is one (target, streaming or not, concurrency) run. Added latency compares a gateway's
cell with the direct-to-mock cell of the same mode and concurrency measured in the same run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

DIRECT = "direct"
NA = "-"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of an already sorted sequence."""
    if not sorted_values:
        return math.nan
    rank = (len(sorted_values) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


@dataclass(frozen=True)
class Percentiles:
    """Latency summary in milliseconds."""

    p50: float
    p90: float
    p99: float
    mean: float
    max: float

    @classmethod
    def of_seconds(cls, samples: Iterable[float]) -> Percentiles | None:
        values = sorted(s * 1000 for s in samples)
        if not values:
            return None
        return cls(
            percentile(values, 50), percentile(values, 90), percentile(values, 99),
            sum(values) / len(values), values[-1],
        )  # fmt: skip


@dataclass
class CellResult:
    """One closed-loop run against one target."""

    target: str
    stream: bool
    concurrency: int
    requests: int
    errors: int
    error_kinds: dict[str, int]
    seconds: float
    rps: float
    latency_ms: Percentiles | None
    ttft_ms: Percentiles | None
    server_cpu_us_per_request: float | None
    """CPU time (user+system, all threads and children) of the gateway per completed request."""
    mock_cpu_us_per_request: float | None
    client_cpu_percent: float
    """The load generator's CPU use during the run, in percent of one core."""
    other_cpu_percent: float
    """CPU used on the machine by processes outside the rig (noise), in percent of one core."""
    added_ms: dict[str, float] = field(default_factory=dict)
    """Gateway minus direct, same mode and concurrency: p50, p99, ttft_p50, ttft_p99."""

    @property
    def capacity_rps(self) -> float | None:
        """Requests per second the gateway could serve on one dedicated core (1e6 / CPU µs).

        Robust against a noisy machine, where the measured req/s also depends on how often the
        gateway had to wait for a CPU that other work was using.
        """
        cpu = self.server_cpu_us_per_request
        return 1e6 / cpu if cpu else None

    @property
    def mode(self) -> str:
        return "stream" if self.stream else "non-stream"


def attach_added_latency(cells: list[CellResult]) -> None:
    """Fill `added_ms` of every gateway cell from the matching direct cell."""
    direct = {(c.stream, c.concurrency): c for c in cells if c.target == DIRECT}
    for cell in cells:
        base = direct.get((cell.stream, cell.concurrency))
        if cell.target == DIRECT or base is None or not cell.latency_ms or not base.latency_ms:
            continue
        cell.added_ms = {
            "p50": cell.latency_ms.p50 - base.latency_ms.p50,
            "p99": cell.latency_ms.p99 - base.latency_ms.p99,
        }
        if cell.ttft_ms and base.ttft_ms:
            cell.added_ms["ttft_p50"] = cell.ttft_ms.p50 - base.ttft_ms.p50
            cell.added_ms["ttft_p99"] = cell.ttft_ms.p99 - base.ttft_ms.p99


def _ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return NA
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def _num(value: float | None, digits: int = 0) -> str:
    return NA if value is None else f"{value:,.{digits}f}"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


def latency_table(cells: Sequence[CellResult], stream: bool) -> str:
    """Throughput, latency (and TTFT for streams) and added latency of one mode's cells."""
    headers = ["c", "target", "req/s", "p50 ms", "p90 ms", "p99 ms"]
    if stream:
        headers += ["TTFT p50", "TTFT p99"]
    headers += ["added p50", "added p99"]
    if stream:
        headers += ["added TTFT p50", "added TTFT p99"]
    headers.append("errors")
    rows = []
    for c in cells:
        if c.stream is not stream:
            continue
        lat, ttft = c.latency_ms, c.ttft_ms
        row = [
            str(c.concurrency), c.target, _num(c.rps),
            _ms(lat.p50 if lat else None), _ms(lat.p90 if lat else None),
            _ms(lat.p99 if lat else None),
        ]  # fmt: skip
        if stream:
            row += [_ms(ttft.p50 if ttft else None), _ms(ttft.p99 if ttft else None)]
        row += [_ms(c.added_ms.get("p50")), _ms(c.added_ms.get("p99"))]
        if stream:
            row += [_ms(c.added_ms.get("ttft_p50")), _ms(c.added_ms.get("ttft_p99"))]
        row.append(str(c.errors))
        rows.append(row)
    return table(headers, rows)


def cpu_table(cells: Sequence[CellResult]) -> str:
    """CPU per request of the gateway and the mock, the client's load, and the machine's noise."""
    headers = [
        "mode", "c", "target", "gateway CPU µs/req", "capacity req/s/core", "mock CPU µs/req",
        "client CPU %", "other CPU %",
    ]  # fmt: skip
    rows = [
        [
            c.mode,
            str(c.concurrency),
            c.target,
            _num(c.server_cpu_us_per_request),
            _num(c.capacity_rps),
            _num(c.mock_cpu_us_per_request),
            _num(c.client_cpu_percent),
            _num(c.other_cpu_percent),
        ]
        for c in cells
    ]
    return table(headers, rows)


@dataclass(frozen=True)
class TargetCheck:
    """One goal from the performance issue, and whether this run met it."""

    goal: str
    measured: str
    met: bool | None
    """None: could not be measured in this run."""


def target_checks(cells: Sequence[CellResult], memory: dict[str, Any] | None) -> list[TargetCheck]:
    """The issue's targets for mirrorgate, judged on this run's numbers."""

    def cell(stream: bool, concurrency: int) -> CellResult | None:
        for c in cells:
            if c.target == "mirrorgate" and c.stream is stream and c.concurrency == concurrency:
                return c
        return None

    checks: list[TargetCheck] = []
    c1 = cell(False, 1)
    p50, p99 = (c1.added_ms.get("p50"), c1.added_ms.get("p99")) if c1 else (None, None)
    checks.append(_check("added latency, c=1, median ≤ 1 ms", p50, 1.0, "ms"))
    checks.append(_check("added latency, c=1, p99 ≤ 5 ms", p99, 5.0, "ms"))
    c16 = cell(False, 16)
    rps = c16.rps if c16 else None
    capacity = c16.capacity_rps if c16 else None
    measured = NA if rps is None else f"{rps:,.0f} req/s"
    if capacity is not None:
        measured += f" (CPU-bound capacity of one core: {capacity:,.0f} req/s)"
    checks.append(
        TargetCheck(
            "≥ 1,500 req/s non-streaming at c=16",
            measured,
            None if rps is None else rps >= 1500,
        )
    )
    s1 = cell(True, 1)
    ttft = s1.added_ms.get("ttft_p50") if s1 else None
    checks.append(_check("TTFT added, c=1, median ≤ 1 ms", ttft, 1.0, "ms"))
    rss = memory.get("rss_after_mb") if memory else None
    n = (memory.get("served_total") or memory.get("requests")) if memory else None
    checks.append(
        TargetCheck(
            "RSS < 150 MB after 100,000 requests",
            NA if rss is None else f"{rss:.0f} MB after {n or 0:,.0f} requests",
            None if rss is None or not n or n < 100_000 else rss < 150,
        )
    )
    return checks


def _check(goal: str, value: float | None, limit: float, unit: str) -> TargetCheck:
    if value is None:
        return TargetCheck(goal, NA, None)
    return TargetCheck(goal, f"{value:.2f} {unit}", value <= limit)


def checks_table(checks: Sequence[TargetCheck]) -> str:
    verdict = {True: "met", False: "**not met**", None: "not measured"}
    rows = ([c.goal, c.measured, verdict[c.met]] for c in checks)
    return table(["target", "measured", "verdict"], rows)


@dataclass
class SuiteResult:
    """Everything one run measured (written as results.json)."""

    machine: dict[str, Any]
    layout: dict[str, str]
    plan: dict[str, Any]
    startup_s: dict[str, float] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    """Stages or targets that could not run, with the reason."""
    cells: list[CellResult] = field(default_factory=list)
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    shadows: dict[str, Any] = field(default_factory=dict)
    """The shadow stage (bench/shadows.py `as_json`), when it ran."""
    production: dict[str, Any] = field(default_factory=dict)
    """The production stage (bench/production.py `StageResult`), when it ran."""


def markdown(result: SuiteResult, extra_sections: Sequence[str] = ()) -> str:
    """The run's Markdown report; `extra_sections` go after the profiles."""
    m = result.machine
    parts = [
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, Linux {m['kernel']}, Python {m['python']}; "
        f"load average at start {' '.join(m['loadavg_at_start'])}. Measured "
        f"{m['measured_at']}; mirrorgate sources sha256 {m['mirrorgate_sources_sha256']}"
        + (
            f" (changed during the run: {m['mirrorgate_sources_sha256_at_end']} at the end)."
            if "mirrorgate_sources_sha256_at_end" in m
            else "."
        ),
        f"Pinning: gateway under test on CPU {result.layout['gateway']}, mock upstream on CPU "
        f"{result.layout['mock']}, load generator on CPU {result.layout['load']}.",
        "",
        "### Targets (mirrorgate)",
        "",
        checks_table(target_checks(result.cells, result.memory.get("mirrorgate"))),
        "",
        "### Non-streaming",
        "",
        latency_table(result.cells, stream=False),
        "",
        "### Streaming",
        "",
        latency_table(result.cells, stream=True),
        "",
        "### CPU per request and noise",
        "",
        cpu_table(result.cells),
        "",
        "### Memory (VmRSS)",
        "",
        memory_table(result.memory),
    ]
    for name, profile in result.profiles.items():
        parts += ["", f"### Profile: mirrorgate, {name}", "", profile_markdown(profile)]
    for section in extra_sections:
        parts += ["", section]
    if result.failures:
        parts += ["", "### Could not run", ""]
        for key, reason in result.failures.items():
            lines = reason.strip().splitlines() or [reason]
            parts.append(f"- **{key}**: {lines[-1]}")
    return "\n".join(parts) + "\n"


def memory_table(memory: dict[str, dict[str, Any]]) -> str:
    def mb(value: float | None) -> str:
        return NA if value is None else f"{value:.0f}"

    rows = []
    for name, m in memory.items():
        rows.append([
            name, mb(m.get("rss_idle_mb")), mb(m.get("rss_after_warmup_mb")),
            mb(m.get("rss_after_grid_mb")),
            f"{m['requests']:,}" if "requests" in m else NA,
            f"{m['served_total']:,.0f}" if m.get("served_total") else NA,
            mb(m.get("rss_after_mb")), mb(m.get("rss_peak_mb")),
            f"{m['rps']:,.0f}" if "rps" in m else NA,
        ])  # fmt: skip
    headers = [
        "server", "idle MB", "after warm-up MB", "after grid MB", "memory-stage requests",
        "served in total", "after memory stage MB", "peak MB", "memory-stage req/s",
    ]  # fmt: skip
    return table(headers, rows)


def profile_markdown(profile: dict[str, Any]) -> str:
    if "error" in profile:
        return f"py-spy failed: {profile['error']}"
    head = (
        f"{profile['requests']:,.0f} requests in {profile['seconds']} s "
        f"({profile['rps']:,.0f} req/s under py-spy); gateway process CPU "
        f"{profile['cpu_us_per_request']:,.0f} µs/request (from /proc). A thread held the GIL "
        f"in {100 * profile['gil_busy_share']:.0f} % of the sampled time ({profile['samples']:,} "
        f"samples at {profile['rate_hz']} Hz); µs/request below = share of those samples x "
        f"CPU/request. Raw stacks: `{profile['raw']}`."
    )
    components = table(
        ["component (leaf-most owner of each sample)", "share", "µs / request"],
        ([c["component"], f"{100 * c['share']:.1f} %", f"{c['us_per_request']:,.0f}"]
         for c in profile["components"]),
    )  # fmt: skip
    functions = table(
        ["mirrorgate function (inclusive of callees)", "share", "µs / request"],
        ([f"`{f['function']}`", f"{100 * f['share']:.1f} %", f"{f['us_per_request']:,.0f}"]
         for f in profile["mirrorgate_functions_inclusive"][:12]),
    )  # fmt: skip
    leaves = table(
        ["hottest leaf frames", "share"],
        ([f"`{f['frame']}`", f"{100 * f['share']:.1f} %"] for f in profile["top_leaf_frames"][:10]),
    )
    return "\n\n".join([head, components, functions, leaves])
