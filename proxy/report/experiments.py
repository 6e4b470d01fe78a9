"""The report's experiment section: each route's latest A/B experiment in the window, per arm its
units and operations, each metric's value on control and on the arm, the lift with its
interval, the verdict in words, and the sample-ratio check — read from the decision the decider
persisted (the same one `mirrorgate experiment status` shows), in Markdown and in HTML.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core import ExperimentState

from .format import DASH, format_time


@dataclass(frozen=True, slots=True)
class ExperimentReport:
    """One experiment and its last decision."""

    state: ExperimentState
    decision: Mapping[str, Any] | None = None
    events: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


def _value(value: Any, scale: str | None, metric: str) -> str:
    if value is None:
        return DASH
    if metric.startswith("cost"):
        return f"${value:.4g}"
    if metric.startswith("latency"):
        return f"{value:.3g}s"
    if scale == "points":
        return f"{value * 100:.1f}%"
    return f"{value:.3g}"


def _lift(lift: Mapping[str, Any]) -> str:
    estimate, low, high = lift.get("estimate"), lift.get("low"), lift.get("high")
    if estimate is None:
        return DASH
    if lift.get("scale") == "points":
        shown = f"{estimate * 100:+.1f} pts"
        interval = "" if low is None or high is None else f" [{low * 100:+.1f}, {high * 100:+.1f}]"
    else:
        shown = f"{estimate * 100:+.0f} %"
        interval = "" if low is None or high is None else f" [{low * 100:+.0f}, {high * 100:+.0f}]"
    return shown + interval


def rows(report: ExperimentReport) -> list[list[str]]:
    """arm · model · units · operations · metric · control · arm · lift [interval] · verdict."""
    decision = report.decision or {}
    out: list[list[str]] = []
    for arm in decision.get("arms", []):
        verdict = arm.get("verdict", "")
        if arm.get("stopped"):
            verdict += " (arm stopped)"
        for n, lift in enumerate(arm.get("lifts", [])):
            metric = str(lift.get("metric", ""))
            out.append(
                [
                    str(arm.get("arm")) if n == 0 else "",
                    str(arm.get("model") or "") if n == 0 else "",
                    str(arm.get("units")) if n == 0 else "",
                    str(arm.get("operations")) if n == 0 else "",
                    metric,
                    _value(lift.get("control_value"), lift.get("scale"), metric),
                    _value(lift.get("arm_value"), lift.get("scale"), metric),
                    _lift(lift),
                    verdict if n == 0 else "",
                ]
            )
    return out


HEADER = [
    "arm",
    "model",
    "units",
    "operations",
    "metric",
    "control",
    "arm value",
    "lift",
    "verdict",
]


def headline(report: ExperimentReport) -> str:
    state = report.state
    started = format_time(state.started_at) if state.started_at else "?"
    text = f"Experiment {state.experiment_id}, control {state.control}, started {started}"
    if state.stopped_at is not None:
        text += f", stopped {format_time(state.stopped_at)}"
    else:
        text += ", running"
    weights = ", ".join(f"{arm} {w * 100:g}%" for arm, w in state.weights.items())
    return f"{text}; weights {weights}."


def srm_text(report: ExperimentReport) -> str:
    srm = (report.decision or {}).get("srm")
    if not srm:
        return "Sample ratio: not checked yet."
    if srm.get("flagged"):
        return f"Sample ratio: MISMATCH — {srm.get('text', '')}"
    return f"Sample ratio: in line with the weights ({srm.get('text', '')})."


def markdown_section(route: str, report: ExperimentReport | None) -> list[str]:
    if report is None:
        return []
    cell = _md
    lines = [f"### Experiment: {cell(route)}", "", cell(headline(report)), ""]
    decision = report.decision
    if decision is None:
        return [*lines, "No decision yet (the decider had not looked).", ""]
    lines.append("| " + " | ".join(HEADER) + " |")
    lines.append("|" + "---|" * len(HEADER))
    for row in rows(report):
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    lines.append("")
    lines.append(cell(srm_text(report)))
    lines.append("")
    lines.append("Decision:")
    lines.append("")
    lines.extend(f"- {cell(line)}" for line in str(decision.get("text", "")).splitlines())
    stops = [e for e in report.events if e.get("kind") == "arm_stopped"]
    for event in stops:
        lines.append(f"- arm {cell(str(event.get('arm')))} stopped: {cell(str(event['detail']))}")
    lines.append("")
    return lines


def html_section(route: str, report: ExperimentReport | None) -> str:
    if report is None:
        return ""
    e = _e
    parts = ["<h3>Experiment</h3>", f'<p class="note">{e(headline(report))}</p>']
    decision = report.decision
    if decision is None:
        return "".join(parts) + '<p class="note">No decision yet (the decider had not looked).</p>'
    head = "".join(f"<th>{e(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows(report)
    )
    parts.append(
        f'<div class="table-wrap"><table class="experiment" data-route="{e(route)}">'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )
    parts.append(f"<p>{e(srm_text(report))}</p>")
    items = "".join(f"<li>{e(line)}</li>" for line in str(decision.get("text", "")).splitlines())
    parts.append(f"<p><strong>Decision</strong></p><ul>{items}</ul>")
    return "".join(parts)


def _md(text: str) -> str:
    """A store value inside Markdown: no pipes, no backticks, no line breaks."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'").replace("\n", " ")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
