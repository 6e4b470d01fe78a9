"""`mirrorgate report`: compare the arms of every route over a window of recorded traffic.

`run_report` reads the exchanges and pairs of the window from the store, `build_report` groups them
by route and by arm · target and summarises each group with `analyzers.summary`, and
`render_markdown` (here) or `proxy.report_html.render_html` turns the `Report` into text. How each
number is computed is written down in docs/report.md.

The report only reads: it never migrates or creates the database, so pointing it at a production
store is safe. Every problem the user can fix (bad `--since`, a missing database, an output path
that cannot be written) is one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from analyzers.summary import (
    AgreementSummary,
    ArmSummary,
    Difference,
    Rate,
    attributable_disagreement,
    median,
)
from proxy import migrations, timewindow
from proxy.config import ConfigError, MirrorgateConfig, load_config
from proxy.records import Arm, ExchangeRecord, PairRecord, Status
from proxy.store import Store, StoreError

MAX_ROWS = 1_000_000
"""At most this many exchanges (and as many pairs) are read; a larger window is cut, and says so."""

ARM_ORDER = {Arm.PRIMARY: 0, Arm.CANARY: 1, Arm.FALLBACK: 2, Arm.SHADOW: 3}


class ReportError(Exception):
    """A problem the user can fix; the message is printed as is and the command exits 1."""


def parse_since(value: str, now: datetime) -> datetime:
    """`--since`, read as `proxy.timewindow.parse_since` reads it; a bad value is a ReportError."""
    try:
        return timewindow.parse_since(value, now)
    except ValueError as exc:
        raise ReportError(f"--since {exc}") from None


@dataclass(frozen=True, slots=True)
class ArmReport:
    """One arm · target of one route: its summary and the raw samples the charts draw."""

    arm: str
    target: str
    summary: ArmSummary
    durations_s: tuple[float, ...]
    """Every exchange's duration, sorted."""
    ttfts_s: tuple[float, ...]
    """Streamed exchanges' times to first token, sorted."""
    failures: tuple[tuple[str, int], ...]
    """(status, count) of the exchanges that did not end `ok`, most frequent first."""

    @property
    def label(self) -> str:
        return f"{self.arm} · {self.target}"


@dataclass(frozen=True, slots=True)
class CandidateReport:
    """One candidate compared with the primary, for one kind of pair (shadow or replay)."""

    kind: str
    candidate: str
    pairs: int
    """Every pair of this kind and candidate in the window."""
    agreement: AgreementSummary
    """Over the pairs where both answers ended `ok` (a failed answer is counted in the arm's
    error rate, not as a disagreement)."""
    latency_delta_p50_s: float | None
    """Median of candidate minus primary duration, over the same pairs."""
    ttft_delta_p50_s: float | None
    cost_delta_p50_usd: float | None
    length_ratio_p50: float | None
    beyond_noise: Difference | None
    """Disagreement minus the route's noise-floor disagreement; None without noise pairs."""


@dataclass(frozen=True, slots=True)
class RouteReport:
    route: str
    arms: tuple[ArmReport, ...]
    candidates: tuple[CandidateReport, ...]
    noise: AgreementSummary | None
    """The primary compared with itself (`noise` pairs, both ok); None when there are none."""
    noise_pairs: int

    @property
    def has_streams(self) -> bool:
        return any(arm.ttfts_s for arm in self.arms)


@dataclass(frozen=True, slots=True)
class Report:
    generated_at: datetime
    since: datetime | None
    route_filter: str | None
    store: str
    """The store URL, password hidden."""
    routes: tuple[RouteReport, ...]
    exchanges: int
    pairs: int
    first_at: datetime | None
    last_at: datetime | None
    truncated_from: int | None = None
    """The window's real number of exchanges when more than MAX_ROWS were there (and cut)."""


def build_report(
    exchanges: Sequence[ExchangeRecord],
    pairs: Sequence[PairRecord],
    *,
    generated_at: datetime,
    since: datetime | None = None,
    route_filter: str | None = None,
    store: str = "",
    truncated_from: int | None = None,
) -> Report:
    """Group the window's records by route and arm · target, and summarise each group."""
    by_route: dict[str, dict[tuple[str, str], list[ExchangeRecord]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for record in exchanges:
        by_route[record.route][(record.arm.value, record.target)].append(record)
    pairs_by_route: dict[str, list[PairRecord]] = defaultdict(list)
    for pair in pairs:
        pairs_by_route[pair.route].append(pair)

    routes = []
    for route in sorted(set(by_route) | set(pairs_by_route)):
        groups = by_route.get(route, {})
        arms = tuple(
            _arm_report(arm, target, groups[(arm, target)])
            for arm, target in sorted(groups, key=lambda k: (ARM_ORDER[Arm(k[0])], k[1]))
        )
        routes.append(_route_report(route, arms, pairs_by_route.get(route, [])))
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


def _both_ok(pair: PairRecord) -> bool:
    return pair.primary_status == Status.OK.value and pair.candidate_status == Status.OK.value


def _agreement(pairs: Sequence[PairRecord]) -> AgreementSummary:
    return AgreementSummary.from_pairs(
        [p.exact_equal for p in pairs],
        [p.normalized_equal for p in pairs],
        [p.json_equal for p in pairs],
    )


def _median_of(values: Sequence[float | None]) -> float | None:
    return median([v for v in values if v is not None])


def _route_report(
    route: str, arms: tuple[ArmReport, ...], pairs: Sequence[PairRecord]
) -> RouteReport:
    noise_pairs = [p for p in pairs if p.kind == "noise"]
    noise_ok = [p for p in noise_pairs if _both_ok(p)]
    noise = _agreement(noise_ok) if noise_ok else None
    grouped: dict[tuple[str, str], list[PairRecord]] = defaultdict(list)
    for pair in pairs:
        if pair.kind != "noise":
            grouped[(pair.kind, pair.candidate_target)].append(pair)
    candidates = []
    for (kind, candidate), group in sorted(grouped.items()):
        ok = [p for p in group if _both_ok(p)]
        agreement = _agreement(ok)
        candidates.append(
            CandidateReport(
                kind=kind,
                candidate=candidate,
                pairs=len(group),
                agreement=agreement,
                latency_delta_p50_s=_median_of([p.latency_delta_s for p in ok]),
                ttft_delta_p50_s=_median_of([p.ttft_delta_s for p in ok]),
                cost_delta_p50_usd=_median_of([p.cost_delta_usd for p in ok]),
                length_ratio_p50=_median_of([p.length_ratio for p in ok]),
                beyond_noise=(
                    attributable_disagreement(agreement, noise)
                    if noise is not None and agreement.n
                    else None
                ),
            )
        )
    return RouteReport(route, arms, tuple(candidates), noise, len(noise_pairs))


# ---- numbers as text (shared with proxy.report_html) ----

DASH = "—"


def format_duration(seconds: float | None, *, signed: bool = False) -> str:
    """`245 ms`, `0.4 ms`, `1.32 s`; with `signed`, a leading + or -."""
    if seconds is None:
        return DASH
    sign = "-" if seconds < 0 else "+" if signed and seconds > 0 else ""
    magnitude = abs(seconds)
    if magnitude >= 1:
        return f"{sign}{magnitude:.2f} s"
    ms = magnitude * 1000
    return f"{sign}{ms:.1f} ms" if ms < 10 else f"{sign}{ms:.0f} ms"


def format_usd(amount: float | None, *, signed: bool = False) -> str:
    """`$1,234`, `$12.34`, `$0.00123` (three significant digits below a dollar)."""
    if amount is None:
        return DASH
    sign = "-" if amount < 0 else "+" if signed and amount > 0 else ""
    magnitude = abs(amount)
    if magnitude == 0:
        return f"{sign}$0"
    if magnitude >= 100:
        return f"{sign}${magnitude:,.0f}"
    if magnitude >= 1:
        return f"{sign}${magnitude:,.2f}"
    decimals = min(10, 2 - math.floor(math.log10(magnitude)))
    return f"{sign}${magnitude:.{decimals}f}"


def format_percent(share: float | None) -> str:
    return DASH if share is None else f"{share * 100:.1f}%"


def format_rate(rate: Rate) -> str:
    """`80.0% [49.0, 94.3]` (value, and the 95% interval in percent); a dash when nothing was
    counted."""
    if rate.value is None:
        return DASH
    return f"{rate.value * 100:.1f}% [{rate.low * 100:.1f}, {rate.high * 100:.1f}]"


def format_difference(diff: Difference | None) -> str:
    """`+12.0 pp [+3.1, +20.5]`: percentage points with the 95% interval."""
    if diff is None or diff.value is None:
        return DASH
    return f"{diff.value * 100:+.1f} pp [{diff.low * 100:+.1f}, {diff.high * 100:+.1f}]"


def format_ratio(value: float | None) -> str:
    return DASH if value is None else f"{value:.2f}x"


def format_time(moment: datetime | None) -> str:
    return DASH if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def describe_window(report: Report) -> str:
    start = format_time(report.since) if report.since else "the first record"
    return f"{start} → {format_time(report.generated_at)}"


def describe_failures(arm: ArmReport) -> str:
    return ", ".join(f"{count} {status}" for status, count in arm.failures)


# ---- Markdown ----


def _md(text: str) -> str:
    """A store value inside a Markdown table cell: no pipes, no backticks, no line breaks."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'").replace("\n", " ")


def render_markdown(report: Report) -> str:
    lines = ["# mirrorgate report", ""]
    lines.append(f"- Window: {describe_window(report)}")
    if report.route_filter is not None:
        lines.append(f"- Route: {_md(report.route_filter)}")
    lines.append(f"- Store: {_md(report.store)}")
    lines.append(f"- Exchanges: {report.exchanges:,} · pairs: {report.pairs:,}")
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
        return "\n".join(lines) + "\n"
    for route in report.routes:
        lines.extend(_markdown_route(route))
    lines.append(
        "Latency is from receiving the request to the last byte, failed exchanges included; "
        "ttft is for streams only. Intervals are 95% (Wilson for rates, Newcombe for "
        "differences). See docs/report.md."
    )
    return "\n".join(lines) + "\n"


def _markdown_route(route: RouteReport) -> list[str]:
    lines = [f"## Route {_md(route.route)}", ""]
    if route.arms:
        lines.append(
            "| arm · target | requests | errors | error rate (95% CI) | p50 | p95 | p99 "
            "| ttft p50 | ttft p95 | cost | cost / req | cost / 1k req | tokens in | tokens out |"
        )
        lines.append("|---|" + "---:|" * 13)
        for arm in route.arms:
            s = arm.summary
            cells = [
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
            lines.append("| " + " | ".join(cells) + " |")
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
        lines.extend(["No exchanges for this route in this window (pairs only).", ""])
    lines.extend(_markdown_pairs(route))
    return lines


def _markdown_pairs(route: RouteReport) -> list[str]:
    if not route.candidates and route.noise is None and not route.noise_pairs:
        return []
    lines = [f"### Pairs: {_md(route.route)}", ""]
    if route.candidates:
        lines.append(
            "| kind | candidate | pairs (both ok / all) | exact | normalized | JSON (n) "
            "| Δ latency p50 | Δ ttft p50 | Δ cost p50 | length ratio p50 | beyond noise |"
        )
        lines.append("|---|---|" + "---:|" * 9)
        for c in route.candidates:
            a = c.agreement
            cells = [
                _md(c.kind),
                _md(c.candidate),
                f"{a.n:,} / {c.pairs:,}",
                format_rate(a.exact),
                format_rate(a.normalized),
                f"{format_rate(a.json)} ({a.json.n:,})",
                format_duration(c.latency_delta_p50_s, signed=True),
                format_duration(c.ttft_delta_p50_s, signed=True),
                format_usd(c.cost_delta_p50_usd, signed=True),
                format_ratio(c.length_ratio_p50),
                format_difference(c.beyond_noise),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(_noise_sentence(route))
    lines.append("")
    return lines


def _noise_sentence(route: RouteReport) -> str:
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


# ---- the command ----


class _ConfigProblemError(Exception):
    """The config could not be loaded; its problems are already on stderr."""


def _load_config(args: argparse.Namespace) -> MirrorgateConfig:
    path = args.config or os.environ.get("MIRRORGATE_CONFIG") or "mirrorgate.yaml"
    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"mirrorgate: {path}: {len(exc.problems)} problem(s)", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        raise _ConfigProblemError from exc


def _open_store(url: str) -> Store:
    """The store, if it exists and has the schema this code reads (never created or migrated)."""
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError:
        raise ReportError(f"store.url {url!r} is not a database URL") from None
    if parsed.get_backend_name() == "sqlite":
        database = Path(parsed.database or "")
        if not database.is_file():
            raise ReportError(
                f"no database at {database} (store.url {url}); "
                "has `mirrorgate serve` recorded traffic with this config?"
            )
    store = Store(url)
    try:
        version = migrations.current_version(store.engine)
    except BaseException:
        store.close()
        raise
    if version < migrations.head_version():
        store.close()
        raise ReportError(
            f"the store's schema is at version {version}, this mirrorgate reads version "
            f"{migrations.head_version()}: start `mirrorgate serve` once to migrate it"
        )
    return store


def _read(args: argparse.Namespace, cfg: MirrorgateConfig, now: datetime) -> Report:
    since = parse_since(args.since, now) if args.since else None
    with _open_store(cfg.store.url) as store:
        exchanges = store.query(route=args.route, since=since, limit=MAX_ROWS)
        total = store.count(route=args.route, since=since) if len(exchanges) == MAX_ROWS else None
        pairs = store.query_pairs(route=args.route, since=since, limit=MAX_ROWS)
    return build_report(
        exchanges,
        pairs,
        generated_at=now,
        since=since,
        route_filter=args.route,
        store=make_url(cfg.store.url).render_as_string(hide_password=True),
        truncated_from=total if total is not None and total > MAX_ROWS else None,
    )


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
        if args.format == "html":
            # report_html imports this module's model, so it is imported here, not at the top.
            from proxy.report_html import render_html  # noqa: PLC0415

            text = render_html(report)
        else:
            text = render_markdown(report)
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
    except (StoreError, sa_exc.SQLAlchemyError) as exc:
        print(f"mirrorgate: cannot read the store: {exc}", file=sys.stderr)
        return 1
    if not report.routes:
        note = "mirrorgate: no exchanges in this window"
        if args.route is not None and args.route not in cfg.routes:
            note += f" (route {args.route!r} is not in the config)"
        print(note, file=sys.stderr)
    return 0
