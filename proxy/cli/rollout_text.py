"""Rollout state as short text for a terminal (`mirrorgate rollout`), from the admin API's JSON
(`proxy.api.rollouts.state_json` plus `transitions` and `verdicts`).

Pure: dicts in, text out. Every key is read defensively, so a gateway one version ahead or behind
still prints what both know.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.core import as_utc

SHOWN_TRANSITIONS = 5
_RATIO_METRICS = ("latency_", "ttft_", "cost_")
"""Metrics whose estimate is candidate / primary; every other one is a difference of rates."""
_STEPPED = ("progressing", "paused")


def render_action(action: str, body: Mapping[str, Any]) -> str:
    """The answer to an operator action: what happened, then the route's state."""
    state = _mapping(body.get("rollout"))
    route = state.get("route", "?")
    if body.get("changed"):
        first = f"route {route}: changed by {action} — now {_phase_line(state)}"
    else:
        first = f"route {route}: unchanged — already {_phase_line(state)}"
    return "\n".join([first, *_state_lines(state)])


def render_status(body: Mapping[str, Any]) -> str:
    """One route in full: state, recent transitions, the latest verdict of each metric."""
    lines = [f"route {body.get('route', '?')}: {_phase_line(body)}", *_state_lines(body)]
    eta = _mapping(body.get("eta"))
    if eta.get("summary"):
        lines.append(f"  forecast     {eta['summary']}")
    lines += _transition_lines(_rows(body.get("transitions")))
    lines += _verdict_lines(_rows(body.get("verdicts")), body.get("rollout_id"))
    lines += _offline_lines(_mapping(body.get("offline_evidence")))
    warnings = [str(w) for w in body.get("warnings") or () if w]
    if warnings:
        lines += ["warnings:", *(f"  ! {w}" for w in warnings)]
    return "\n".join(lines)


def render_plan(body: Mapping[str, Any]) -> str:
    """`rollout plan`: the route's recent traffic, each step's time and what holds it, advice."""
    traffic = _mapping(body.get("traffic"))
    rate = traffic.get("rate_per_s")
    span, since = body.get("span_s"), body.get("since", "?")
    counted = f"{_num(rate, '.3g')} req/s on the route, {traffic.get('requests', 0)} requests"
    if isinstance(span, int | float) and span < 0.95 * _since_s(since):
        # A young gateway: the rate is measured over the data there is, and says so.
        head = f"plan on the {_duration(span)} of traffic there is (of the last {since} asked; "
    else:
        head = f"plan on the last {since} of traffic ("
    lines = [f"route {body.get('route', '?')}: {head}{counted})"]
    rows = [("STEP", "CANARY/S", "TAKES", "P90", "HELD LONGEST BY", "NEEDS")]
    for step in _rows(body.get("steps")):
        needs = _mapping(step.get("needs"))
        holding = str(step.get("holding") or "-")
        duration = step.get("duration_s")
        took = _duration(duration) if isinstance(duration, int | float) else "does not pass"
        count = needs.get(holding)
        p90 = step.get("duration_p90_s")
        unit = "probes per model" if holding.startswith("rule_adaptation") else "canary answers"
        rows.append(
            (
                _pct(step.get("weight_percent")),
                _num(step.get("canary_per_s"), ".3g"),
                took,
                _duration(p90) if isinstance(p90, int | float) else "-",
                holding,
                f"{count} {unit}" if isinstance(count, int) else "-",
            )
        )
    lines += [f"  {r}" for r in _columns(rows)]
    total, total_p90 = body.get("total_s"), body.get("total_p90_s")
    steps = _rows(body.get("steps"))
    first = steps[0].get("duration_s") if steps else None
    if isinstance(total, int | float) and isinstance(first, int | float):
        line = f"the first step passes in ~{_duration(first)}, promotion in ~{_duration(total)}"
        if isinstance(total_p90, int | float):
            line += f" (9 in 10 rollouts by {_duration(total_p90)})"
        lines.append(line)
    else:
        lines.append("cannot be promoted at this traffic with these settings")
    lines += [f"  advice: {a}" for a in body.get("advice") or ()]
    lines += [f"  warning: {w}" for w in body.get("warnings") or ()]
    return "\n".join(lines)


def _since_s(since: object) -> float:
    """`30m`, `2h`, `7d` in seconds (an ISO time or anything else: unbounded)."""
    text = str(since or "")
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if len(text) > 1 and text[-1] in units:
        try:
            return float(text[:-1]) * units[text[-1]]
        except ValueError:
            pass
    return float("inf")


def render_routes(body: Mapping[str, Any]) -> str:
    """Every route, one line each."""
    header = ("ROUTE", "PHASE", "STEP", "CANARY", "CANDIDATE", "SERVING", "LAST CHANGE")
    table = [header]
    for state in _rows(body.get("rollouts")):
        serving = _mapping(state.get("serving"))
        stepped = state.get("phase") in _STEPPED
        changed = state.get("changed_at")
        table.append(
            (
                str(state.get("route", "?")),
                str(state.get("phase") or "-"),
                _step(state) if stepped else "-",
                f"{_pct(serving.get('canary_weight_percent'))}" if serving.get("canary") else "-",
                str(state.get("candidate") or "-"),
                _serving_short(state),
                f"{_when(changed)} {state.get('actor') or ''}".rstrip() if changed else "-",
            )
        )
    if len(table) == 1:
        return "no routes"
    return "\n".join(_columns(table))


# --- pieces -----------------------------------------------------------------------------------


def _phase_line(state: Mapping[str, Any]) -> str:
    phase = state.get("phase")
    if phase is None:
        return "no rollout (the route has no canary in its config)"
    if phase in _STEPPED:
        return f"{phase}, step {_step(state)} at {_pct(state.get('weight_percent'))} of traffic"
    if phase == "rolled_back" and state.get("rolled_back_to"):
        return f"rolled_back to {state['rolled_back_to']}"
    return str(phase)


def _state_lines(state: Mapping[str, Any]) -> list[str]:
    serving = _mapping(state.get("serving"))
    override = state.get("override")
    lines: list[tuple[str, str]] = []
    candidate, baseline = state.get("candidate"), state.get("baseline")
    if candidate and baseline and state.get("phase") in _STEPPED:
        lines.append(("candidate", f"{candidate}, judged against baseline {baseline}"))
    elif candidate and baseline:
        lines.append(("candidate", f"{candidate} (its rollout's baseline: {baseline})"))
    elif candidate:
        lines.append(("candidate", f"{candidate} (not started)"))
    arm = serving.get("arm") or "primary"
    line = f"{serving.get('primary') or '-'} ({arm} arm)"
    if serving.get("canary"):
        line += f"; canary {serving['canary']} at {_pct(serving.get('canary_weight_percent'))}"
    lines.append(("serving", line))
    if isinstance(override, Mapping):
        lines.append(
            (
                "override",
                f"{override.get('model')} as {override.get('arm')}, instead of config primary "
                f"{override.get('config_primary')}",
            )
        )
    if state.get("rollout_id"):
        started = f" started {_when(state['started_at'])}" if state.get("started_at") else ""
        step = state.get("step_started_at")
        this_step = f", this step since {_when(step)}" if step else ""
        lines.append(("rollout", f"{state['rollout_id']}{started}{this_step}"))
    if state.get("changed_at"):
        who, why = state.get("actor") or "?", state.get("reason") or "-"
        lines.append(("last change", f"{_when(state['changed_at'])} by {who}: {why}"))
    width = max(len(name) for name, _ in lines)
    return [f"  {name:<{width}}  {text}" for name, text in lines]


def _transition_lines(events: Sequence[Mapping[str, Any]]) -> list[str]:
    if not events:
        return ["transitions: none"]
    shown = events[:SHOWN_TRANSITIONS]
    more = f", {len(shown)} of {len(events)}; --json for all" if len(events) > len(shown) else ""
    rows = []
    for event in shown:
        to = str(event.get("to_phase") or "-")
        if to in _STEPPED:
            to += f" {_pct(event.get('weight'))}"
        rows.append(
            (
                _when(event.get("at")),
                str(event.get("actor") or "?"),
                str(event.get("action") or "?"),
                f"{event.get('from_phase') or 'idle'} → {to}",
                str(event.get("reason") or ""),
            )
        )
    return [f"transitions (newest first{more}):", *(f"  {r}" for r in _columns(rows))]


def _verdict_lines(verdicts: Sequence[Mapping[str, Any]], rollout_id: Any) -> list[str]:
    # Newest first: the first verdict seen for a (scope, metric) is its latest.
    latest: dict[tuple[str, str], Mapping[str, Any]] = {}
    for verdict in verdicts:
        if rollout_id and verdict.get("rollout_id") != rollout_id:
            continue
        latest.setdefault((str(verdict.get("scope")), str(verdict.get("metric"))), verdict)
    if not latest:
        return ["verdicts: none for this rollout yet"]
    newest = next(iter(latest.values()))
    head = f"verdicts (latest per metric; look {newest.get('look')} at {_when(newest.get('at'))}):"
    rows = []
    for (scope, metric), verdict in latest.items():
        name = metric if scope == "traffic" else f"{metric} ({scope.removeprefix('rule:')})"
        outcome = str(verdict.get("verdict") or "?")
        rows.append(
            (
                outcome,
                name,
                _estimate(metric, verdict),
                _limit(metric, verdict.get("threshold")),
                f"n {verdict.get('n_candidate')} canary / {verdict.get('n_primary')} primary",
                _needs(outcome, verdict),
                "" if outcome == "pass" else str(verdict.get("reason") or ""),
            )
        )
    rows.sort(key=lambda row: ({"fail": 0, "inconclusive": 1}.get(row[0], 2), row[1]))
    return [head, *(f"  {r}" for r in _columns(rows))]


def _needs(outcome: str, verdict: Mapping[str, Any]) -> str:
    """What an unsettled metric needs: `needs 240 more (~20 min)`."""
    if outcome != "inconclusive":
        return ""
    needs, eta = verdict.get("needs"), verdict.get("eta_s")
    if not isinstance(needs, int):
        return "cannot pass at this estimate"
    if isinstance(eta, int | float):
        return f"needs {needs} more (~{_duration(eta)})"
    return f"needs {needs} more"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _estimate(metric: str, verdict: Mapping[str, Any]) -> str:
    value, low, high = verdict.get("estimate"), verdict.get("low"), verdict.get("high")
    if not isinstance(value, int | float):
        return "-"
    if metric == "judge_score":
        return f"{value:+.2f} points [{_num(low, '+.2f')}, {_num(high, '+.2f')}]"
    if metric.startswith(_RATIO_METRICS):
        interval = f" [{_num(low, '.3f')}, {_num(high, '.3f')}]"
        return f"x{value:.3f}{interval}"
    interval = f" [{_num(low, '+.2f', 100)}, {_num(high, '+.2f', 100)}]"
    return f"{value * 100:+.2f} pp{interval}"


def _limit(metric: str, threshold: Any) -> str:
    if not isinstance(threshold, int | float):
        return "-"
    if metric.startswith(_RATIO_METRICS):
        return f"limit x{threshold:g}"
    if metric == "judge_score":
        return f"limit -{threshold:g} points"
    return f"limit +{threshold * 100:.3g} pp"


def _num(value: Any, spec: str, scale: float = 1.0) -> str:
    return format(value * scale, spec) if isinstance(value, int | float) else "?"


def _step(state: Mapping[str, Any]) -> str:
    step, steps = state.get("step"), state.get("steps")
    if not isinstance(step, int) or step < 0:
        return "-"
    total = len(steps) if isinstance(steps, list) and steps else "?"
    return f"{step + 1}/{total}"


def _serving_short(state: Mapping[str, Any]) -> str:
    serving = _mapping(state.get("serving"))
    text = str(serving.get("primary") or "-")
    if serving.get("arm") not in (None, "primary"):
        text += f" ({serving['arm']})"
    elif state.get("override"):
        text += " (override)"
    return text


def _pct(value: Any) -> str:
    return f"{value:g}%" if isinstance(value, int | float) else "?%"


def _when(iso: Any) -> str:
    """`2026-03-01 12:00:05Z` (UTC, to the second) from an ISO time; the input if unparseable."""
    if not isinstance(iso, str):
        return "-"
    try:
        moment = as_utc(iso)
    except ValueError:
        return iso
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _rows(value: Any) -> list[Mapping[str, Any]]:
    return [row for row in value if isinstance(row, Mapping)] if isinstance(value, list) else []


def _offline_lines(evidence: Mapping[str, Any]) -> list[str]:
    """The offline gate: its verdict now, each stratum compared, the start's override."""
    if not evidence.get("required"):
        return []
    allowed = evidence.get("allowed")
    word = "passes" if allowed else "refuses" if allowed is False else "unknown"
    lines = [f"offline gate (set {evidence.get('set', '?')}): {word}: {evidence.get('reason')}"]
    rows = [("STRATUM", "CANDIDATE", "PRIMARY", "DROP", "")]
    for row in _rows(evidence.get("strata")):
        mine, theirs = _mapping(row.get("candidate")), _mapping(row.get("primary"))
        drop = row.get("drop")
        rows.append(
            (
                str(row.get("stratum", "?")),
                f"{mine.get('passed', 0)}/{mine.get('cases', 0)}",
                f"{theirs.get('passed', 0)}/{theirs.get('cases', 0)}",
                f"{drop * 100:+.1f} pts" if isinstance(drop, int | float) else "-",
                "BLOCKS" if row.get("blocking") else "" if row.get("counted") else "too few",
            )
        )
    if len(rows) > 1:
        lines += [f"  {r}" for r in _columns(rows)]
    override = _mapping(evidence.get("override"))
    if override:
        lines.append(f"  overridden at start: {override.get('reason')}")
    return lines
