"""Write mirrorgate's Grafana dashboards (grafana/dashboards/*.json) from the definitions below.

    python grafana/generate.py            # rewrite the checked-in dashboards
    python grafana/generate.py --out DIR  # write them elsewhere (tests compare the two)

The JSON is Grafana's classic dashboard model (schemaVersion 39: Grafana 10 and later). Every panel
queries the data source chosen in the `datasource` variable and filters on the `route` and `target`
variables; every rate uses `$__rate_interval`, totals over the time picker use `$__range`. Metric
names and labels are listed in docs/reference.md. Output is deterministic, so the checked-in
files can be proved current by regenerating them.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'route=~"$route", target=~"$target"'
"""The label filter of every per-route, per-model series."""
ROUTE_SEL = 'route=~"$route"'
LIVE = 'arm=~"primary|canary|fallback"'
"""The arms that answer users (shadows and judge calls never do)."""
JUDGE_SEL = 'route=~"$route", candidate=~"$target"'
"""`mirrorgate_judge_score`'s filter: its model label is the judged candidate."""
LIVE_SEL = f"{SEL}, {LIVE}"
RI = "$__rate_interval"
GC_PAUSE = "mirrorgate_gc_pause_seconds"


def _series(metric: str, selector: str) -> str:
    return f"{metric}{{{selector}}}" if selector else metric


def _sum(by: str) -> str:
    return f"sum by ({by}) " if by else "sum "


def rate(metric: str, selector: str, by: str = "") -> str:
    """Per-second rate of `metric`, summed by `by` (everything when empty)."""
    return f"{_sum(by)}(rate({_series(metric, selector)}[{RI}]))"


def ratio(metric: str, part: str, whole: str, by: str = "") -> str:
    """Share of `whole` that matches `part` as well, per `by`."""
    return f"{rate(metric, f'{whole}, {part}', by)}\n  /\n{rate(metric, whole, by)}"


def quantile(q: float, histogram: str, selector: str, by: str = "") -> str:
    le = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({le}) (rate({histogram}_bucket{{{selector}}}[{RI}])))"


def judge_mean(answer: str) -> str:
    """Mean LLM-judge score of one side (`candidate` or `primary`) of the judged pairs."""
    sel = f'{JUDGE_SEL}, answer="{answer}"'
    by = "route, candidate"
    return (
        f"{rate('mirrorgate_judge_score_sum', sel, by)}\n  /\n"
        f"{rate('mirrorgate_judge_score_count', sel, by)}"
    )


def cost_per_request(selector: str, by: str) -> str:
    """USD per upstream call."""
    cost = rate("mirrorgate_cost_usd_total", selector, by)
    return f"{cost}\n  /\n{rate('mirrorgate_requests_total', selector, by)}"


def corrections_per_100(feedback_selector: str, requests_selector: str, by: str) -> str:
    """User corrections per 100 answers."""
    corrections = rate("mirrorgate_feedback_total", f'{feedback_selector}, kind="correction"', by)
    return f"100 * {corrections}\n  /\n{rate('mirrorgate_requests_total', requests_selector, by)}"


def probe_share(result: str) -> str:
    """Share of each target's scored rule-flip probes of a rule with `result`, over the selected
    range: probes come at a fraction of the traffic (`probes.sample`, default 5 %), too few per
    `$__rate_interval` for a share to mean anything."""
    by = "route, target, rule"
    part = f'mirrorgate_probe_results_total{{{SEL}, result="{result}"}}'
    whole = f"mirrorgate_probe_results_total{{{SEL}}}"
    return (
        f"sum by ({by}) (increase({part}[$__range]))\n  /\n"
        f"sum by ({by}) (increase({whole}[$__range]))"
    )


def new_or_increased(metric: str, selector: str, by: str) -> str:
    """Events counted by `metric` in each step. `increase` alone misses the first event of a new
    series (it has no earlier sample), so a series that just appeared counts too."""
    series = _series(metric, selector)
    return (
        f"sum by ({by}) (\n"
        f"  (increase({series}[{RI}]) > 0)\n"
        f"  or\n"
        f"  ({series} > 0 unless {series} offset {RI})\n"
        f")"
    )


def outcome_share(outcome: str, window: str = RI) -> str:
    """Share of the operations with a posted `outcome` (completed, adopted, corrected) where it
    was true, per route and experiment arm, over `window`."""
    by = "route, arm"
    yes = f'mirrorgate_operations_total{{{ROUTE_SEL}, outcome="{outcome}"}}'
    both = f'mirrorgate_operations_total{{{ROUTE_SEL}, outcome=~"{outcome}|not_{outcome}"}}'
    return (
        f"sum by ({by}) (increase({yes}[{window}]))\n  /\n"
        f"sum by ({by}) (increase({both}[{window}]))"
    )


def mean_operation_cost(by: str) -> str:
    """USD per operation: the summed cost of each operation, observed at its `completed`
    outcome, averaged per `by`."""
    return (
        f"{rate('mirrorgate_operation_cost_usd_sum', ROUTE_SEL, by)}\n  /\n"
        f"{rate('mirrorgate_operation_cost_usd_count', ROUTE_SEL, by)}"
    )


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    """Evaluated once at the end of the range (stat panels showing a total over `$__range`)."""


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"
    """`timeseries`, `stat` or `table`."""
    width: int = 12
    height: int = 8
    decimals: int | None = None


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    filename: str = field(default="")


def q(expr: str, legend: str = "", instant: bool = False) -> Query:
    return Query(expr, legend, instant)


def vs_primary(title: str, description: str, primary: str, canary: str, unit: str) -> Panel:
    """A panel putting the route's primary next to the chosen canary targets."""
    return Panel(
        title,
        description,
        (q(primary, "{{route}} · primary"), q(canary, "{{route}} · canary {{target}}")),
        unit,
    )


# --- the dashboards ------------------------------------------------------------------------------

OVERVIEW = Dashboard(
    uid="mirrorgate-overview",
    title="mirrorgate / Overview",
    description="Traffic, errors, latency, time to first token and cost of every route and arm.",
    filename="overview.json",
    rows=(
        Row(
            "Now",
            (
                Panel(
                    "Requests per second",
                    "Upstream calls per second, every arm (shadows, probes and judge included).",
                    (q(rate("mirrorgate_requests_total", SEL)),),
                    "reqps",
                    kind="stat",
                    width=4,
                    height=5,
                ),
                Panel(
                    "Error ratio (live arms)",
                    "Share of the calls of the arms that answer users that ended in a 5xx.",
                    (q(ratio("mirrorgate_requests_total", 'status_class="5xx"', LIVE_SEL)),),
                    "percentunit",
                    kind="stat",
                    width=4,
                    height=5,
                ),
                Panel(
                    "Spend per hour",
                    "USD per hour at the current rate, every arm, from the configured prices.",
                    (q(rate("mirrorgate_cost_usd_total", SEL) + " * 3600"),),
                    "currencyUSD",
                    kind="stat",
                    width=4,
                    height=5,
                    decimals=4,
                ),
                Panel(
                    "In flight",
                    "Client requests being served right now, all gateways.",
                    (q("sum(mirrorgate_inflight_requests)"),),
                    "short",
                    kind="stat",
                    width=4,
                    height=5,
                ),
                Panel(
                    "Gateway overhead p99",
                    "Time mirrorgate itself adds to a request (upstream time excluded).",
                    (q(quantile(0.99, "mirrorgate_overhead_seconds", ROUTE_SEL)),),
                    "s",
                    kind="stat",
                    width=4,
                    height=5,
                ),
                Panel(
                    "Gateways up",
                    "Gateways Prometheus scrapes successfully (scrape jobs named *mirrorgate*).",
                    (q('sum(up{job=~".*mirrorgate.*"})'),),
                    "short",
                    kind="stat",
                    width=4,
                    height=5,
                ),
            ),
        ),
        Row(
            "Traffic and errors",
            (
                Panel(
                    "Requests by route and arm",
                    "Upstream calls per second.",
                    (
                        q(
                            rate("mirrorgate_requests_total", SEL, "route, arm"),
                            "{{route}} · {{arm}}",
                        ),
                    ),
                    "reqps",
                ),
                Panel(
                    "Errors by arm and status class",
                    "Calls that did not end in a 2xx. `none`: no response was sent (client gone).",
                    (
                        q(
                            rate(
                                "mirrorgate_requests_total",
                                f'{SEL}, status_class=~"4xx|5xx|none"',
                                "route, arm, status_class",
                            ),
                            "{{route}} · {{arm}} · {{status_class}}",
                        ),
                    ),
                    "reqps",
                ),
                Panel(
                    "5xx ratio by route and arm",
                    "Share of each arm's calls that ended in a 5xx.",
                    (
                        q(
                            ratio(
                                "mirrorgate_requests_total", 'status_class="5xx"', SEL, "route, arm"
                            ),
                            "{{route}} · {{arm}}",
                        ),
                    ),
                    "percentunit",
                ),
                Panel(
                    "Recorder drops",
                    "Exchange records not stored, by reason, and those stored without their "
                    "bodies (the queue at store.queue_max_bytes). Clients are not affected.",
                    (
                        q(rate("mirrorgate_recorder_dropped_total", "", "reason"), "{{reason}}"),
                        q(rate("mirrorgate_recorder_bodies_dropped_total", ""), "bodies dropped"),
                    ),
                    "short",
                ),
            ),
        ),
        Row(
            "Latency",
            (
                Panel(
                    "Request duration p50 / p95 / p99 by arm",
                    "From receiving the request to the last byte of the answer.",
                    tuple(
                        q(
                            quantile(p, "mirrorgate_request_duration_seconds", SEL, "route, arm"),
                            f"p{round(p * 100)} {{{{route}}}} · {{{{arm}}}}",
                        )
                        for p in (0.5, 0.95, 0.99)
                    ),
                    "s",
                ),
                Panel(
                    "Time to first token p50 / p95 by arm",
                    "Streams only: from receiving the request to the first generated token.",
                    tuple(
                        q(
                            quantile(
                                p, "mirrorgate_time_to_first_token_seconds", SEL, "route, arm"
                            ),
                            f"p{round(p * 100)} {{{{route}}}} · {{{{arm}}}}",
                        )
                        for p in (0.5, 0.95)
                    ),
                    "s",
                ),
                Panel(
                    "Gateway overhead p50 / p99 by route",
                    "Time spent in mirrorgate itself per client request.",
                    tuple(
                        q(
                            quantile(p, "mirrorgate_overhead_seconds", ROUTE_SEL, "route"),
                            f"p{round(p * 100)} {{{{route}}}}",
                        )
                        for p in (0.5, 0.99)
                    ),
                    "s",
                    width=24,
                ),
            ),
        ),
        Row(
            "Garbage collection",
            (
                Panel(
                    "GC pauses over 5 ms per minute by generation",
                    "Collections that stopped the whole gateway, every request in flight with it, "
                    "for more than 5 ms (the bound a p99 is held to). Generation 2 is a full "
                    "collection: its length grows with the live heap (docs/grafana.md).",
                    (
                        q(
                            f"({_sum('generation')}(rate({GC_PAUSE}_count[{RI}]))\n"
                            f"  - {_sum('generation')}"
                            f'(rate({GC_PAUSE}_bucket{{le="0.005"}}[{RI}])))'
                            " * 60",
                            "gen {{generation}}",
                        ),
                    ),
                    "short",
                ),
                Panel(
                    "GC pause p99 by generation",
                    "From the pause histogram (buckets 0.1 ms to 1 s, interpolated within one): "
                    "young collections (0, 1) stay well under a millisecond; a full one (2) walks "
                    "every live object not frozen at start-up.",
                    (
                        q(
                            f"histogram_quantile(0.99, {_sum('le, generation')}"
                            f"(rate({GC_PAUSE}_bucket[{RI}])))",
                            "p99 gen {{generation}}",
                        ),
                    ),
                    "s",
                ),
            ),
        ),
        Row(
            "Tokens and cost",
            (
                Panel(
                    "Tokens per second by type",
                    "Input (excluding cached input), output, cached input and reasoning tokens.",
                    (
                        q(
                            rate("mirrorgate_tokens_total", SEL, "route, arm, type"),
                            "{{route}} · {{arm}} · {{type}}",
                        ),
                    ),
                    "short",
                ),
                Panel(
                    "Spend per hour by route and arm",
                    "USD per hour at the current rate.",
                    (
                        q(
                            rate("mirrorgate_cost_usd_total", SEL, "route, arm") + " * 3600",
                            "{{route}} · {{arm}}",
                        ),
                    ),
                    "currencyUSD",
                    decimals=4,
                ),
            ),
        ),
    ),
)

CANARY = f'{SEL}, arm="canary"'
PRIMARY = f'{ROUTE_SEL}, arm="primary"'

ROLLOUT = Dashboard(
    uid="mirrorgate-rollout",
    title="mirrorgate / Rollout",
    description="Canary rollouts: phase, weight, the judge's verdicts, rollbacks, and the canary "
    "side by side with the primary.",
    filename="rollout.json",
    rows=(
        Row(
            "Rollout state",
            (
                Panel(
                    "Phase",
                    "The rollout's current phase per route and canary: pending, progressing, "
                    "paused, promoted or rolled_back.",
                    (
                        q(
                            f"max by (route, target, phase) "
                            f"(mirrorgate_rollout_phase{{{SEL}}}) == 1",
                            "{{route}} · {{target}}: {{phase}}",
                            instant=True,
                        ),
                    ),
                    "short",
                    kind="table",
                    width=8,
                ),
                Panel(
                    "Canary weight",
                    "Share of live traffic sent to the canary, in percent.",
                    (
                        q(
                            f"max by (route, target) (mirrorgate_rollout_weight_percent{{{SEL}}})",
                            "{{route}} · {{target}}",
                        ),
                    ),
                    "percent",
                    width=16,
                ),
                Panel(
                    "Verdicts per metric",
                    "The judge's verdicts per analysed metric (error_rate, latency_p95, "
                    "check_pass_rate:<check>, …): pass, fail or inconclusive (too few samples).",
                    (
                        q(
                            rate(
                                "mirrorgate_analysis_verdicts_total", SEL, "route, metric, verdict"
                            ),
                            "{{route}} · {{metric}} · {{verdict}}",
                        ),
                    ),
                    "short",
                ),
                Panel(
                    "Verdicts over the range",
                    "Verdicts per metric over the selected time range.",
                    (
                        q(
                            f"sum by (metric, verdict) (increase(mirrorgate_analysis_verdicts_total"
                            f"{{{SEL}}}[$__range]))",
                            "{{metric}} · {{verdict}}",
                            instant=True,
                        ),
                    ),
                    "short",
                    kind="table",
                    width=6,
                ),
                Panel(
                    "Rollbacks over the range",
                    "Rollbacks per route, canary and reason (judge, rule_check, alertmanager, "
                    "operator).",
                    (
                        q(
                            f"sum by (route, target, reason) (increase(mirrorgate_rollbacks_total"
                            f"{{{SEL}}}[$__range]))",
                            "{{route}} · {{target}} · {{reason}}",
                            instant=True,
                        ),
                    ),
                    "short",
                    kind="table",
                    width=6,
                ),
            ),
        ),
        Row(
            "Canary vs primary",
            (
                vs_primary(
                    "5xx ratio: canary vs primary",
                    "Share of calls ending in a 5xx, the route's primary next to its canary.",
                    ratio("mirrorgate_requests_total", 'status_class="5xx"', PRIMARY, "route"),
                    ratio(
                        "mirrorgate_requests_total", 'status_class="5xx"', CANARY, "route, target"
                    ),
                    "percentunit",
                ),
                vs_primary(
                    "Request duration p95: canary vs primary",
                    "p95 of the whole request, the route's primary next to its canary.",
                    quantile(0.95, "mirrorgate_request_duration_seconds", PRIMARY, "route"),
                    quantile(0.95, "mirrorgate_request_duration_seconds", CANARY, "route, target"),
                    "s",
                ),
                vs_primary(
                    "Time to first token p95: canary vs primary",
                    "Streams only.",
                    quantile(0.95, "mirrorgate_time_to_first_token_seconds", PRIMARY, "route"),
                    quantile(
                        0.95, "mirrorgate_time_to_first_token_seconds", CANARY, "route, target"
                    ),
                    "s",
                ),
                vs_primary(
                    "Check pass rate: canary vs primary",
                    "Share of rule checks passed, all rules and versions together (per version: "
                    "the Rules & quality dashboard).",
                    ratio("mirrorgate_check_results_total", 'result="pass"', PRIMARY, "route"),
                    ratio(
                        "mirrorgate_check_results_total", 'result="pass"', CANARY, "route, target"
                    ),
                    "percentunit",
                ),
                vs_primary(
                    "Cost per request: canary vs primary",
                    "USD per upstream call.",
                    cost_per_request(PRIMARY, "route"),
                    cost_per_request(CANARY, "route, target"),
                    "currencyUSD",
                ),
                vs_primary(
                    "Corrections per 100 answers: canary vs primary",
                    "User corrections (POST /v1/feedback) per 100 answers.",
                    corrections_per_100(PRIMARY, PRIMARY, "route"),
                    corrections_per_100(CANARY, CANARY, "route, target"),
                    "short",
                ),
            ),
        ),
    ),
)

CHECK_BY = "route, rule, rule_version, check, target, arm"

QUALITY = Dashboard(
    uid="mirrorgate-quality",
    title="mirrorgate / Rules & quality",
    description="Are the models following the rules they are given now? Check pass rates per "
    "rule version, agreement with the primary, user corrections.",
    filename="quality.json",
    rows=(
        Row(
            "Rule checks",
            (
                Panel(
                    "Check pass rate by rule version and arm",
                    "Share of answers passing each check, per rule version: after a rule change "
                    "a candidate that keeps the old rule drops here.",
                    (
                        q(
                            ratio("mirrorgate_check_results_total", 'result="pass"', SEL, CHECK_BY),
                            "{{rule}}@{{rule_version}} {{check}} · {{target}} ({{arm}})",
                        ),
                    ),
                    "percentunit",
                    width=24,
                ),
                Panel(
                    "Check failures by model",
                    "Failed (and errored) checks per second, per model.",
                    (
                        q(
                            rate(
                                "mirrorgate_check_results_total",
                                f'{SEL}, result=~"fail|error"',
                                "route, target, rule, rule_version, check, result",
                            ),
                            "{{target}} · {{rule}}@{{rule_version}} {{check}} · {{result}}",
                        ),
                    ),
                    "short",
                ),
                Panel(
                    "Checks run by rule version",
                    "Answers checked per second under each rule version (a new version appears "
                    "with a rule change).",
                    (
                        q(
                            rate(
                                "mirrorgate_check_results_total", SEL, "route, rule, rule_version"
                            ),
                            "{{route}} · {{rule}}@{{rule_version}}",
                        ),
                    ),
                    "short",
                ),
                Panel(
                    "Rule versions overflowed",
                    "Requests per second whose new rule version found the rule at max_versions "
                    "and was carried as 'overflow': a templated system prompt the built-in masks "
                    "miss. Add a fingerprint_ignore pattern to the rule (docs/rules.md).",
                    (
                        q(
                            rate("mirrorgate_rule_versions_overflow_total", "", "rule"),
                            "{{rule}}",
                        ),
                    ),
                    "short",
                    width=24,
                ),
            ),
        ),
        Row(
            "Context awareness",
            (
                Panel(
                    "Context awareness (rule-flip probes)",
                    "Live requests of a rule re-sent with the rule's value flipped: the share of "
                    "each model's probes over the selected range that followed the flipped value "
                    "(adaptation) and that kept the original one (stuck: the model memorised the "
                    "rule). GET /admin/rules gives the counts with their intervals.",
                    (
                        q(
                            probe_share("followed"),
                            "adaptation · {{rule}} · {{target}}",
                            instant=True,
                        ),
                        q(probe_share("stuck"), "stuck · {{rule}} · {{target}}", instant=True),
                    ),
                    "percentunit",
                    kind="stat",
                    width=24,
                ),
            ),
        ),
        Row(
            "Agreement and feedback",
            (
                Panel(
                    "Agreement with the primary",
                    "Share of shadow answers that agree with the primary's answer to the same "
                    "request (the route's agreement mode: exact, normalized, json_fields, "
                    "numeric).",
                    (
                        q(
                            ratio(
                                "mirrorgate_agreement_total", 'result="agree"', SEL, "route, target"
                            ),
                            "{{route}} · {{target}}",
                        ),
                    ),
                    "percentunit",
                ),
                Panel(
                    "Corrections per 100 answers by arm",
                    "User corrections (POST /v1/feedback) per 100 answers of the arms users see.",
                    (
                        q(
                            corrections_per_100(SEL, f"{SEL}, {LIVE}", "route, arm"),
                            "{{route}} · {{arm}}",
                        ),
                    ),
                    "short",
                ),
                Panel(
                    "LLM-judge score by candidate",
                    "Mean score the LLM judge gives each candidate's shadow answers and the "
                    "primary's answers to the same requests (1-10, both answer orders averaged). "
                    "Empty without a `judge` section.",
                    (
                        q(judge_mean("candidate"), "{{route}} · {{candidate}}"),
                        q(judge_mean("primary"), "{{route}} · primary (vs {{candidate}})"),
                    ),
                    "short",
                    decimals=2,
                ),
                Panel(
                    "LLM-judge score difference (candidate minus primary)",
                    "Below 0 the judge prefers the primary's answers; a canary's `judge_score` "
                    "metric judges this difference.",
                    (
                        q(
                            f"{judge_mean('candidate')}\n  -\n{judge_mean('primary')}",
                            "{{route}} · {{candidate}}",
                        ),
                    ),
                    "short",
                    decimals=2,
                ),
                Panel(
                    "Feedback by kind",
                    "Corrections, positive (score 4-5) and negative (score 1-2) ratings per "
                    "second.",
                    (
                        q(
                            rate("mirrorgate_feedback_total", SEL, "route, arm, kind"),
                            "{{route}} · {{arm}} · {{kind}}",
                        ),
                    ),
                    "short",
                    width=24,
                ),
            ),
        ),
    ),
)

COST = Dashboard(
    uid="mirrorgate-cost",
    title="mirrorgate / Cost",
    description="Spend by route, arm and model from the configured prices; shadow spend apart.",
    filename="cost.json",
    rows=(
        Row(
            "Over the range",
            (
                Panel(
                    "Live spend",
                    "USD spent on the arms that answer users over the selected range.",
                    (
                        q(
                            f"sum(increase(mirrorgate_cost_usd_total{{{LIVE_SEL}}}[$__range]))",
                            instant=True,
                        ),
                    ),
                    "currencyUSD",
                    kind="stat",
                    width=6,
                    height=5,
                    decimals=4,
                ),
                Panel(
                    "Shadow spend",
                    "USD spent on shadow calls (candidates being evaluated) over the range.",
                    (
                        q(
                            f'sum(increase(mirrorgate_cost_usd_total{{{SEL}, arm="shadow"}}'
                            "[$__range]))",
                            instant=True,
                        ),
                    ),
                    "currencyUSD",
                    kind="stat",
                    width=6,
                    height=5,
                    decimals=4,
                ),
                Panel(
                    "Judge spend",
                    "USD spent on LLM-judge calls scoring shadow pairs over the range (bounded "
                    "by judge.max_usd_per_hour).",
                    (
                        q(
                            f'sum(increase(mirrorgate_cost_usd_total{{{ROUTE_SEL}, arm="judge"}}'
                            "[$__range]))",
                            instant=True,
                        ),
                    ),
                    "currencyUSD",
                    kind="stat",
                    width=6,
                    height=5,
                    decimals=4,
                ),
                Panel(
                    "Spend per hour now",
                    "USD per hour at the current rate, every arm.",
                    (q(rate("mirrorgate_cost_usd_total", SEL) + " * 3600"),),
                    "currencyUSD",
                    kind="stat",
                    width=6,
                    height=5,
                    decimals=4,
                ),
            ),
        ),
        Row(
            "Spend per hour",
            (
                Panel(
                    "By route (live arms)",
                    "USD per hour spent answering users.",
                    (
                        q(
                            rate("mirrorgate_cost_usd_total", LIVE_SEL, "route") + " * 3600",
                            "{{route}}",
                        ),
                    ),
                    "currencyUSD",
                    decimals=4,
                ),
                Panel(
                    "By arm",
                    "USD per hour per arm: primary, canary, fallback, shadow and judge.",
                    (
                        q(
                            rate("mirrorgate_cost_usd_total", SEL, "route, arm") + " * 3600",
                            "{{route}} · {{arm}}",
                        ),
                    ),
                    "currencyUSD",
                    decimals=4,
                ),
                Panel(
                    "By model",
                    "USD per hour per model (the `models` name in the config).",
                    (
                        q(
                            rate("mirrorgate_cost_usd_total", SEL, "target") + " * 3600",
                            "{{target}}",
                        ),
                    ),
                    "currencyUSD",
                    decimals=4,
                ),
                Panel(
                    "Shadow spend by candidate",
                    "USD per hour spent on each shadow candidate (bounded by its "
                    "max_usd_per_hour).",
                    (
                        q(
                            rate(
                                "mirrorgate_cost_usd_total", f'{SEL}, arm="shadow"', "route, target"
                            )
                            + " * 3600",
                            "{{route}} · {{target}}",
                        ),
                    ),
                    "currencyUSD",
                    decimals=4,
                ),
            ),
        ),
        Row(
            "Efficiency",
            (
                Panel(
                    "Cost per request by model",
                    "USD per upstream call, per model and arm.",
                    (q(cost_per_request(SEL, "target, arm"), "{{target}} · {{arm}}"),),
                    "currencyUSD",
                    decimals=6,
                ),
                Panel(
                    "Shadow calls dropped by reason",
                    "Shadow calls not made: budget (max_usd_per_hour reached), concurrency, "
                    "queue_full, opted_out, shutdown.",
                    (
                        q(
                            rate("mirrorgate_shadow_dropped_total", SEL, "route, target, reason"),
                            "{{route}} · {{target}} · {{reason}}",
                        ),
                    ),
                    "short",
                ),
            ),
        ),
    ),
)

EXPERIMENT = f'{SEL}, arm="experiment"'
"""The calls of experiment arms (the arm's name is on the answer, not a label: bounded labels)."""

EXPERIMENTS = Dashboard(
    uid="mirrorgate-experiments",
    title="mirrorgate / Experiments",
    description="Online A/B experiments: operations and their outcomes per arm, cost per "
    "operation, weights, sample-ratio mismatch, guardrail stops, and the experiment arms' calls.",
    filename="experiments.json",
    rows=(
        Row(
            "State",
            (
                Panel(
                    "Running",
                    "1 while an experiment runs on the route (`mirrorgate experiment status "
                    "ROUTE` has the decision in words).",
                    (
                        q(
                            'max by (route) (mirrorgate_experiment_running{route=~"$route"})',
                            "{{route}}",
                        ),
                    ),
                    kind="stat",
                    width=6,
                    height=5,
                ),
                Panel(
                    "Sample-ratio mismatch",
                    "1 while the units per arm do not follow the weights (anytime-valid test, "
                    "p <= 0.01): the assignment is broken and no lift can be trusted. Runbook: "
                    "MirrorgateExperimentSampleRatioMismatch.",
                    (
                        q(
                            'max by (route) (mirrorgate_experiment_srm{route=~"$route"})',
                            "{{route}}",
                        ),
                    ),
                    kind="stat",
                    width=6,
                    height=5,
                ),
                Panel(
                    "Arms stopped by a guardrail",
                    "Arms stopped over the range because a guardrail metric was surely worse "
                    "than control.",
                    (
                        q(
                            "sum by (route) (increase(mirrorgate_experiment_arm_stopped_total"
                            f"{{{ROUTE_SEL}}}[$__range]))",
                            "{{route}}",
                            instant=True,
                        ),
                    ),
                    kind="stat",
                    width=6,
                    height=5,
                ),
                Panel(
                    "Operations over the range",
                    "Operations with an outcome posted over the range, per arm.",
                    (
                        q(
                            "sum by (route, arm) (increase(mirrorgate_operations_total"
                            f'{{{ROUTE_SEL}, outcome=~"completed|not_completed"}}[$__range]))',
                            "{{route}} · {{arm}}",
                            instant=True,
                        ),
                    ),
                    kind="stat",
                    width=6,
                    height=5,
                ),
                Panel(
                    "Weights",
                    "Share of new units assigned to each arm (0 once an arm is stopped).",
                    (
                        q(
                            f"max by (route, arm) (mirrorgate_experiment_weight_percent"
                            f"{{{ROUTE_SEL}}})",
                            "{{route}} · {{arm}}",
                        ),
                    ),
                    "percent",
                ),
                Panel(
                    "Guardrail stops",
                    "Arms stopped, by the guardrail metric that was surely worse.",
                    (
                        q(
                            new_or_increased(
                                "mirrorgate_experiment_arm_stopped_total",
                                ROUTE_SEL,
                                "route, arm, metric",
                            ),
                            "{{route}} · {{arm}} · {{metric}}",
                        ),
                    ),
                    "short",
                ),
            ),
        ),
        Row(
            "Operations and outcomes",
            (
                Panel(
                    "Operations per minute by arm and outcome",
                    "Outcomes posted to POST /v1/outcomes, counted once per operation and kind: "
                    "completed / not_completed, adopted / not_adopted, corrected / "
                    "not_corrected.",
                    (
                        q(
                            rate("mirrorgate_operations_total", ROUTE_SEL, "route, arm, outcome")
                            + " * 60",
                            "{{route}} · {{arm}} · {{outcome}}",
                        ),
                    ),
                    "short",
                    width=24,
                ),
                Panel(
                    "Completion rate by arm",
                    "Share of the operations with a `completed` outcome that completed.",
                    (q(outcome_share("completed"), "{{route}} · {{arm}}"),),
                    "percentunit",
                    width=8,
                ),
                Panel(
                    "Adoption rate by arm",
                    "Share of the operations with an `adopted` outcome whose answer was adopted.",
                    (q(outcome_share("adopted"), "{{route}} · {{arm}}"),),
                    "percentunit",
                    width=8,
                ),
                Panel(
                    "Correction rate by arm",
                    "Share of the operations with a `corrected` outcome that a person corrected.",
                    (q(outcome_share("corrected"), "{{route}} · {{arm}}"),),
                    "percentunit",
                    width=8,
                ),
                Panel(
                    "Outcome rates over the range",
                    "Completion, adoption and correction rates per arm over the selected range: "
                    "the numbers the experiment's decision compares (with intervals, in "
                    "`mirrorgate experiment status`).",
                    tuple(
                        q(
                            outcome_share(outcome, "$__range"),
                            f"{{{{arm}}}} · {outcome}",
                            instant=True,
                        )
                        for outcome in ("completed", "adopted", "corrected")
                    ),
                    "percentunit",
                    kind="table",
                    width=24,
                ),
            ),
        ),
        Row(
            "Cost per operation",
            (
                Panel(
                    "Mean cost per operation by arm",
                    "USD per completed operation: every call of the operation summed (retries, "
                    "fallbacks and judge calls included), observed when its outcome arrives.",
                    (
                        q(
                            mean_operation_cost("route, arm"),
                            "{{route}} · {{arm}}",
                        ),
                    ),
                    "currencyUSD",
                    decimals=6,
                ),
                Panel(
                    "Cost per operation p50 / p95 by arm",
                    "From the histogram: half the operations cost less than p50, 95 % less "
                    "than p95.",
                    tuple(
                        q(
                            quantile(p, "mirrorgate_operation_cost_usd", ROUTE_SEL, "route, arm"),
                            f"p{round(p * 100)} {{{{route}}}} · {{{{arm}}}}",
                        )
                        for p in (0.5, 0.95)
                    ),
                    "currencyUSD",
                    decimals=6,
                ),
            ),
        ),
        Row(
            'Experiment arms\' calls (arm="experiment")',
            (
                Panel(
                    "Requests by model and status class",
                    "Upstream calls of the experiment arms per second (the control arm's calls "
                    "are arm `experiment` too).",
                    (
                        q(
                            rate(
                                "mirrorgate_requests_total",
                                EXPERIMENT,
                                "route, target, status_class",
                            ),
                            "{{route}} · {{target}} · {{status_class}}",
                        ),
                    ),
                    "reqps",
                ),
                Panel(
                    "5xx ratio by model",
                    "Share of the experiment arms' calls that ended in a 5xx.",
                    (
                        q(
                            ratio(
                                "mirrorgate_requests_total",
                                'status_class="5xx"',
                                EXPERIMENT,
                                "route, target",
                            ),
                            "{{route}} · {{target}}",
                        ),
                    ),
                    "percentunit",
                ),
                Panel(
                    "Request duration p50 / p95 by model",
                    "One call, from receiving the request to the last byte (an operation's "
                    "latency end to end is in the decision).",
                    tuple(
                        q(
                            quantile(
                                p,
                                "mirrorgate_request_duration_seconds",
                                EXPERIMENT,
                                "route, target",
                            ),
                            f"p{round(p * 100)} {{{{route}}}} · {{{{target}}}}",
                        )
                        for p in (0.5, 0.95)
                    ),
                    "s",
                ),
                Panel(
                    "Cost per request by model",
                    "USD per upstream call of the experiment arms.",
                    (q(cost_per_request(EXPERIMENT, "route, target"), "{{route}} · {{target}}"),),
                    "currencyUSD",
                    decimals=6,
                ),
            ),
        ),
    ),
)

DASHBOARDS = (OVERVIEW, ROLLOUT, QUALITY, COST, EXPERIMENTS)

ANNOTATIONS = (
    (
        "Rule changes",
        "orange",
        new_or_increased("mirrorgate_rule_changes_total", "", "rule"),
        "Rule change: {{rule}}",
        "rule",
    ),
    (
        "Rollbacks",
        "red",
        new_or_increased("mirrorgate_rollbacks_total", SEL, "route, target, reason"),
        "Rollback of {{route}} from {{target}} ({{reason}})",
        "route,target,reason",
    ),
)


# --- rendering -----------------------------------------------------------------------------------


LINKS = {
    "type": "dashboards",
    "tags": ["mirrorgate"],
    "asDropdown": False,
    "includeVars": True,
    "keepTime": True,
    "title": "mirrorgate",
    "icon": "external link",
    "targetBlank": False,
    "tooltip": "",
    "url": "",
}
"""Every mirrorgate dashboard links to the others, keeping the time range and variables."""


def _variables() -> list[dict[str, Any]]:
    def label_values(name: str, label: str, query: str) -> dict[str, Any]:
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": DATASOURCE,
            "definition": query,
            "query": {"query": query, "refId": f"{name}-values"},
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "sort": 1,
            "hide": 0,
            "regex": "",
            "options": [],
        }

    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
            "regex": "",
            "options": [],
        },
        label_values("route", "Route", "label_values(mirrorgate_requests_total, route)"),
        label_values(
            "target",
            "Model",
            'label_values(mirrorgate_requests_total{route=~"$route"}, target)',
        ),
    ]


def _annotations() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        }
    ]
    for name, color, expr, title, tags in ANNOTATIONS:
        out.append(
            {
                "name": name,
                "datasource": DATASOURCE,
                "enable": True,
                "hide": False,
                "iconColor": color,
                "expr": expr,
                "step": "15s",
                "titleFormat": title,
                "tagKeys": tags,
                "textFormat": "",
                "useValueForTime": False,
            }
        )
    return out


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.decimals is not None:
        defaults["decimals"] = panel.decimals
    options: dict[str, Any]
    if panel.kind == "stat":
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        }
    elif panel.kind == "table":
        options = {"showHeader": True}
    else:
        defaults["custom"] = {"fillOpacity": 10, "showPoints": "never", "spanNulls": False}
        options = {
            "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                       "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }  # fmt: skip
    targets = []
    for i, query in enumerate(panel.queries):
        target: dict[str, Any] = {
            "refId": chr(ord("A") + i),
            "datasource": DATASOURCE,
            "expr": query.expr,
            "legendFormat": query.legend or "__auto",
            "range": not query.instant,
            "instant": query.instant,
        }
        if panel.kind == "table":
            target["format"] = "table"
        targets.append(target)
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": targets,
    }


def render(dashboard: Dashboard) -> dict[str, Any]:
    """The dashboard's JSON model."""
    panels: list[dict[str, Any]] = []
    panel_id, y = 0, 0
    for row in dashboard.rows:
        panel_id += 1
        panels.append({
            "id": panel_id, "type": "row", "title": row.title, "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": [],
        })  # fmt: skip
        y += 1
        x, line_height = 0, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y, line_height = 0, y + line_height, 0
            panel_id += 1
            panels.append(_panel_json(panel, panel_id, x, y))
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": ["mirrorgate"],
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "links": [LINKS],
        "annotations": {"list": _annotations()},
        "templating": {"list": _variables()},
        "panels": panels,
    }


def write_all(out: Path) -> list[Path]:
    """Write every dashboard into `out`; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for dashboard in DASHBOARDS:
        path = out / dashboard.filename
        path.write_text(json.dumps(render(dashboard), indent=2, ensure_ascii=False) + "\n")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "dashboards")
    args = parser.parse_args()
    for path in write_all(args.out):
        print(path)


if __name__ == "__main__":
    main()
