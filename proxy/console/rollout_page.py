"""The HTML of the rollouts pages: every route at a glance, and one route in full — where it is
now, its verdicts and the offline gate's evidence beside them, its timeline, the evidence of
each rollback or guard switch, and its buttons.
Pure: values in, escaped HTML out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import orjson

from proxy.core import CheckRecord, ExchangeRecord, as_utc
from proxy.report import RollbackEvidence, TransitionReport, describe_transition, describe_verdict

from .evidence import ExampleEvidence
from .layout import esc

BUTTONS = ("pause", "resume", "promote", "rollback", "restore")
"""The actions the console offers, in the order of their buttons."""
MAX_TEXT = 20_000
"""Longer request and answer texts are cut on the page (the store keeps them whole)."""


@dataclass(frozen=True, slots=True)
class RollbackView:
    """A rollback or guard switch: the transition, the judge's failed verdicts, the guard's
    record (guard switches), and the example requests' answers."""

    transition: TransitionReport
    judged: RollbackEvidence | None
    record: Mapping[str, Any]
    examples: Sequence[ExampleEvidence]


def when(moment: datetime | str | None) -> str:
    """A `<time>` (shown in the reader's zone by console.js; UTC without it)."""
    if moment is None:
        return "—"
    at = as_utc(moment)
    return (
        f'<time datetime="{esc(at.isoformat())}">{esc(at.strftime("%Y-%m-%d %H:%M:%S UTC"))}</time>'
    )


def _number(value: Any, digits: str = ".3g") -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    return format(value, digits)


def _duration(seconds: Any) -> str:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def route_link(route: str) -> str:
    return "/ui/rollouts/" + quote(route, safe="")


def _phase(state: Mapping[str, Any]) -> str:
    phase = state.get("phase") or "no rollout"
    return f'<span class="phase phase-{esc(phase)}">{esc(phase.replace("_", " "))}</span>'


def _step(state: Mapping[str, Any]) -> str:
    steps = state.get("steps") or []
    step = state.get("step", -1)
    if step is None or step < 0 or not steps:
        return "—"
    return f"{step + 1} of {len(steps)}"


def overview(states: Sequence[Mapping[str, Any]], guarded: Mapping[str, str]) -> str:
    """One card per route: phase, step, weight, who serves it, the last change."""
    if not states:
        return '<p class="empty">No routes are configured.</p>'
    cards = []
    for state in states:
        serving = state.get("serving") or {}
        canary = serving.get("canary")
        guard = guarded.get(state["route"])
        cards.append(
            '<section class="card">'
            f'<h2><a href="{esc(route_link(state["route"]))}">{esc(state["route"])}</a></h2>'
            '<dl class="facts">'
            f"<dt>Phase</dt><dd>{_phase(state)}</dd>"
            f"<dt>Step</dt><dd>{esc(_step(state))}</dd>"
            f"<dt>Canary weight</dt><dd>{esc(_number(state.get('weight_percent'), 'g'))}%</dd>"
            f"<dt>Serving</dt><dd>{esc(serving.get('primary'))} "
            f"({esc(serving.get('arm'))})</dd>"
            + (f"<dt>Canary</dt><dd>{esc(canary)}</dd>" if canary else "")
            + (f"<dt>Guard</dt><dd>{esc(guard)}</dd>" if guard else "")
            + f"<dt>Last change</dt><dd>{when(state.get('changed_at'))}"
            f" by {esc(state.get('actor') or '—')}</dd>"
            "</dl></section>"
        )
    return f'<div class="cards">{"".join(cards)}</div>'


def _now(state: Mapping[str, Any], guard: str | None) -> str:
    serving = state.get("serving") or {}
    override = state.get("override")
    rows = [
        ("Phase", _phase(state)),
        ("Step", esc(_step(state))),
        ("Canary weight", esc(_number(state.get("weight_percent"), "g")) + "%"),
        ("Candidate", esc(state.get("candidate") or "—")),
        ("Baseline", esc(state.get("baseline") or "—")),
        ("Serving", f"{esc(serving.get('primary'))} ({esc(serving.get('arm'))})"),
    ]
    if override:
        rows.append(
            (
                "Override",
                f"{esc(override.get('model'))} as {esc(override.get('arm'))} instead of "
                f"{esc(override.get('config_primary'))}",
            )
        )
    if state.get("rolled_back_to"):
        rows.append(("Rolled back to", esc(state["rolled_back_to"])))
    if guard:
        rows.append(("Guard", esc(guard)))
    eta = state.get("eta") or {}
    if eta.get("summary"):
        rows.append(("Forecast", esc(eta["summary"])))
    rows += [
        ("Last change", f"{when(state.get('changed_at'))} by {esc(state.get('actor') or '—')}"),
        ("Reason", esc(state.get("reason") or "—")),
    ]
    facts = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in rows)
    return (
        '<section aria-labelledby="now"><h2 id="now">Now</h2>'
        f'<dl class="facts">{facts}</dl></section>'
    )


def _buttons(route: str, available: Sequence[str]) -> str:
    """One form per action: a GET to its confirmation page (the change itself is a POST made
    there, after a second, explicit submit)."""
    forms = []
    for action in BUTTONS:
        disabled = "" if action in available else " disabled"
        kind = "danger" if action == "rollback" else "secondary"
        forms.append(
            f'<form method="get" action="{esc(route_link(route))}/confirm">'
            f'<input type="hidden" name="action" value="{action}">'
            f'<button type="submit" class="{kind}"{disabled}>{action.capitalize()}…</button>'
            "</form>"
        )
    return (
        '<section aria-labelledby="act"><h2 id="act">Act</h2>'
        '<p class="note">Each button asks for a reason and a confirmation first. Greyed out: '
        "not possible in the route's current phase.</p>"
        f'<div class="actions">{"".join(forms)}</div></section>'
    )


def _verdict_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    body = []
    for row in rows:
        outcome = str(row.get("verdict") or "")
        interval = (
            f"{_number(row.get('low'))} to {_number(row.get('high'))}"
            if row.get("low") is not None or row.get("high") is not None
            else "—"
        )
        needs = row.get("needs")
        body.append(
            "<tr>"
            f"<td>{esc(row.get('metric'))}"
            + (f" <span class='note'>[{esc(row['scope'])}]</span>" if row.get("scope") else "")
            + f'</td><td class="{esc(outcome)}">{esc(outcome)}</td>'
            f"<td>{esc(_number(row.get('estimate')))}</td>"
            f"<td>{esc(interval)}</td>"
            f"<td>{esc(_number(row.get('threshold')))}</td>"
            f"<td>{esc(row.get('n_primary') if row.get('n_primary') is not None else '—')} / "
            f"{esc(row.get('n_candidate') if row.get('n_candidate') is not None else '—')}</td>"
            f"<td>{esc(needs if needs is not None else '—')}</td>"
            f"<td>{esc(_duration(row.get('eta_s')))}</td>"
            f"<td>{esc(row.get('reason') or '')}</td>"
            "</tr>"
        )
    return (
        '<div class="table-box"><table><thead><tr><th scope="col">Metric</th>'
        '<th scope="col">Verdict</th><th scope="col">Estimate</th>'
        '<th scope="col">Interval</th><th scope="col">Threshold</th>'
        '<th scope="col">Answers (primary / candidate)</th>'
        '<th scope="col">Needs</th><th scope="col">ETA</th><th scope="col">Why</th></tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _verdicts(rows: Sequence[Mapping[str, Any]]) -> str:
    """The newest look's verdicts in full, the looks before it folded away."""
    if not rows:
        return (
            '<section aria-labelledby="verdicts"><h2 id="verdicts">Verdicts</h2>'
            '<p class="empty">The judge has not looked at this route yet.</p></section>'
        )
    looks: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in rows:  # newest first
        looks.setdefault((str(row.get("rollout_id") or ""), int(row.get("look") or 0)), []).append(
            row
        )
    (_, newest), *older = looks.items()
    first = newest[0]
    parts = [
        '<section aria-labelledby="verdicts"><h2 id="verdicts">Verdicts</h2>',
        f"<p>Look {esc(first.get('look'))} at {when(first.get('at'))}, candidate "
        f"{esc(first.get('candidate') or '—')}. <span class='note'>Needs: more candidate answers "
        "the metric needs to pass if its estimate holds; ETA: when it will have them at the "
        "route's current rate.</span></p>",
        _verdict_rows(newest),
    ]
    for (_, look), items in older[:10]:
        parts.append(
            f"<details><summary>Look {esc(look)} at {when(items[0].get('at'))}</summary>"
            f"{_verdict_rows(items)}</details>"
        )
    parts.append("</section>")
    return "".join(parts)


def _share(side: Any) -> str:
    """`passed/cases (rate)` of one side of a stratum."""
    side = side if isinstance(side, Mapping) else {}
    cases, passed = side.get("cases"), side.get("passed")
    if not isinstance(cases, int) or not isinstance(passed, int) or isinstance(cases, bool):
        return "—"
    rate = f" ({passed / cases:.1%})" if cases > 0 else ""
    return f"{passed}/{cases}{rate}"


def _run(run: Any) -> str:
    if not isinstance(run, Mapping):
        return "none"
    return (
        f"{esc(run.get('model'))}, set version {esc(run.get('set_version'))}, "
        f"{when(run.get('started_at'))} <span class='note'>(run group "
        f"{esc(run.get('run_group'))}, config "
        f"{esc(str(run.get('config_fingerprint'))[:12])})</span>"
    )


def _offline(evidence: Mapping[str, Any]) -> str:
    """The offline gate (`canary.require_eval`): its verdict now, the runs it read, each stratum
    of the candidate beside the primary, and the override the current rollout started with."""
    head = '<section aria-labelledby="offline"><h2 id="offline">Offline evidence</h2>'
    if not evidence.get("required"):
        return (
            head + '<p class="empty">This route\'s canary requires no evaluation run '
            "(canary.require_eval is not set).</p></section>"
        )
    allowed = evidence.get("allowed")
    word, kind = (
        ("Allows a start", "pass")
        if allowed is True
        else ("Refuses a start", "fail")
        if allowed is False
        else ("Unknown", "inconclusive")
    )
    parts = [
        head,
        f'<p><span class="{kind}">{word}</span>: {esc(evidence.get("reason") or "—")}</p>',
    ]
    override = evidence.get("override")
    if isinstance(override, Mapping):
        parts.append(
            '<div class="warnings" role="note"><h3>Started past the gate</h3>'
            f"<p>Override reason: {esc(override.get('reason') or '—')}</p>"
            f"<p class='note'>The gate had refused: {esc(override.get('refused') or '—')}</p></div>"
        )
    drop = evidence.get("max_drop")
    rows = [
        ("Set", esc(evidence.get("set") or "—")),
        (
            "Max drop",
            esc(f"{drop * 100:g} points" if isinstance(drop, int | float) else "—"),
        ),
        ("Max age", esc(evidence.get("max_age") or "—")),
        ("Min cases", esc(evidence.get("min_cases") or "—")),
        ("Candidate run", _run(evidence.get("candidate_run"))),
        ("Primary run", _run(evidence.get("primary_run"))),
    ]
    parts.append(
        '<dl class="facts">'
        + "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in rows)
        + "</dl>"
    )
    strata = [s for s in evidence.get("strata") or () if isinstance(s, Mapping)]
    if not strata:
        parts.append('<p class="empty">No strata to compare.</p></section>')
        return "".join(parts)
    body = []
    for row in strata:
        value = row.get("drop")
        shown = f"{value * 100:+.1f} points" if isinstance(value, int | float) else "—"
        blocking = bool(row.get("blocking"))
        status = "blocks" if blocking else "counted" if row.get("counted") else "too few cases"
        body.append(
            "<tr>"
            f'<th scope="row">{esc(row.get("stratum"))}</th>'
            f"<td>{esc(_share(row.get('candidate')))}</td>"
            f"<td>{esc(_share(row.get('primary')))}</td>"
            f"<td>{esc(shown)}</td>"
            + (f'<td class="fail">{esc(status)}</td>' if blocking else f"<td>{esc(status)}</td>")
            + "</tr>"
        )
    parts.append(
        '<div class="table-box"><table><caption>Offline pass rate per stratum, the candidate '
        "beside the primary on the same cases (drop: the primary's rate minus the "
        'candidate\'s)</caption><thead><tr><th scope="col">Stratum</th>'
        '<th scope="col">Candidate passed</th><th scope="col">Primary passed</th>'
        '<th scope="col">Drop</th><th scope="col">Gate</th></tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div></section>"
    )
    return "".join(parts)


def _timeline(transitions: Sequence[TransitionReport]) -> str:
    if not transitions:
        return (
            '<section aria-labelledby="timeline"><h2 id="timeline">Timeline</h2>'
            '<p class="empty">No transitions yet.</p></section>'
        )
    rows = "".join(
        f"<tr><td>{when(t.at)}</td><td>{esc(describe_transition(t))}</td>"
        f"<td>{esc(t.actor)}</td><td>{esc(t.reason)}</td></tr>"
        for t in reversed(transitions)
    )
    return (
        '<section aria-labelledby="timeline"><h2 id="timeline">Timeline</h2>'
        '<div class="table-box"><table><thead><tr><th scope="col">When</th>'
        '<th scope="col">Change</th><th scope="col">Actor</th><th scope="col">Reason</th>'
        f"</tr></thead><tbody>{rows}</tbody></table></div></section>"
    )


def conversation(request_body: str | None) -> str:
    """A stored request as its messages (role, then text), or its raw text."""
    if request_body is None:
        return '<p class="note">The request was not stored (store.bodies).</p>'
    try:
        body = orjson.loads(request_body)
    except orjson.JSONDecodeError:
        body = None
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return f'<pre class="text">{esc(request_body[:MAX_TEXT])}</pre>'
    items = []
    if isinstance(body, dict) and isinstance(body.get("system"), str):  # Anthropic's system
        items.append(("system", body["system"]))
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):  # content parts: their text
            content = "\n".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        items.append((str(message.get("role", "?")), str(content or "")))
    return "".join(
        f'<div class="message"><span class="role">{esc(role)}</span>'
        f'<pre class="text">{esc(text[:MAX_TEXT])}</pre></div>'
        for role, text in items
    )


def _checks(checks: Sequence[CheckRecord]) -> str:
    if not checks:
        return ""
    items = "".join(
        f'<li><span class="{"pass" if c.result == "pass" else "fail"}">{esc(c.result)}</span> '
        f"{esc(c.rule)}@{esc(c.rule_version)} {esc(c.check)}"
        + (f": {esc(c.reason)}" if c.reason else "")
        + "</li>"
        for c in checks
    )
    return f'<ul class="checks">{items}</ul>'


def _answer(title: str, exchange: ExchangeRecord | None, checks: Sequence[CheckRecord]) -> str:
    if exchange is None:
        return (
            f'<div class="answer"><h4>{esc(title)}</h4>'
            '<p class="note">No answer to compare with was recorded: the canary took this '
            "request, and no identical request reached the baseline near it.</p></div>"
        )
    text = exchange.response_text
    shown = (
        f'<pre class="text">{esc(text[:MAX_TEXT])}</pre>'
        if text is not None
        else '<p class="note">The answer was not stored (store.bodies).</p>'
    )
    return (
        f'<div class="answer"><h4>{esc(title)}: {esc(exchange.target)} '
        f'<span class="note">({esc(exchange.arm.value)}, {esc(exchange.status.value)}, '
        f"rule {esc(exchange.rule_version or '—')})</span></h4>{shown}{_checks(checks)}</div>"
    )


def _example(example: ExampleEvidence) -> str:
    failing = example.failing
    if failing is None:
        return (
            f'<article class="example"><h4>Request {esc(example.request_id)}</h4>'
            '<p class="note">The store no longer holds this request.</p></article>'
        )
    other_title = (
        "Same request, other model" if example.same_request else ("Baseline, identical request")
    )
    return (
        f'<article class="example"><h4>Request {esc(example.request_id)} · '
        f"{when(failing.started_at)}</h4>"
        f"{conversation(failing.request_body)}"
        '<div class="side-by-side">'
        f"{_answer('Failed', failing, example.failed_checks)}"
        f"{_answer(other_title, example.other, example.other_checks)}"
        "</div></article>"
    )


def _rollback(view: RollbackView) -> str:
    t = view.transition
    kind = "Guard switch" if t.actor == "guard" else "Rollback"
    parts = [
        '<section class="evidence">',
        f"<h3>{esc(kind)} at {when(t.at)} by {esc(t.actor)}</h3>",
        f"<p>{esc(t.reason)}</p>",
    ]
    failed = view.judged.failed if view.judged is not None else ()
    if failed:
        items = "".join(f"<li>{esc(describe_verdict(v))}</li>" for v in failed)
        parts.append(f"<p>Failed checks of the judge:</p><ul>{items}</ul>")
    record = view.record
    if record.get("rule"):
        parts.append(
            f"<p>Rule {esc(record.get('rule'))}: version {esc(record.get('version'))} "
            f"(before: {esc(record.get('previous_version') or '—')}), primary "
            f"{esc(record.get('primary') or '—')}. {esc(record.get('reason') or '')}</p>"
        )
    candidates = record.get("candidates")
    if isinstance(candidates, list) and candidates:
        rows = "".join(
            f"<tr><td>{esc(c.get('name'))}</td><td>{esc(_number(c.get('compliant')))}</td>"
            f"<td>{esc(c.get('answers'))}</td><td>{esc(_number(c.get('low')))}</td></tr>"
            for c in candidates
            if isinstance(c, dict)
        )
        parts.append(
            '<div class="table-box"><table><caption>Candidates the guard weighed</caption>'
            '<thead><tr><th scope="col">Model</th><th scope="col">Compliant</th>'
            '<th scope="col">Answers</th><th scope="col">Lower bound</th></tr></thead>'
            f"<tbody>{rows}</tbody></table></div>"
        )
    if view.examples:
        parts.append("".join(_example(e) for e in view.examples))
    else:
        parts.append('<p class="note">No example requests were persisted with it.</p>')
    parts.append("</section>")
    return "".join(parts)


def route_page(
    state: Mapping[str, Any],
    *,
    verdicts: Sequence[Mapping[str, Any]],
    offline: Mapping[str, Any],
    transitions: Sequence[TransitionReport],
    rollbacks: Sequence[RollbackView],
    warnings: Sequence[str],
    available: Sequence[str],
    guard: str | None,
    done: str | None,
    problem: str | None,
) -> str:
    """The body of one route's page."""
    parts = []
    if done:
        parts.append(f'<p class="done" role="status">{esc(done)}</p>')
    if problem:
        parts.append(f'<p class="problem" role="alert">{esc(problem)}</p>')
    if warnings:
        items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
        parts.append(f'<div class="warnings"><h2>Warnings</h2><ul>{items}</ul></div>')
    parts += [
        _now(state, guard),
        _buttons(str(state["route"]), available),
        _verdicts(verdicts),
        _offline(offline),
    ]
    evidence = "".join(_rollback(v) for v in reversed(rollbacks))
    parts.append(
        '<section aria-labelledby="evidence"><h2 id="evidence">Rollbacks and guard switches</h2>'
        + (evidence or '<p class="empty">None so far.</p>')
        + "</section>"
    )
    parts.append(_timeline(transitions))
    return "".join(parts)


def confirm_page(
    route: str, action: str, csrf: str, state: Mapping[str, Any], has_fallback: bool
) -> str:
    """The second step of a button: what the action will do, a reason, and the real submit."""
    effects = {
        "pause": "The canary keeps its current weight, but the judge stops moving it.",
        "resume": "The judge starts judging and moving the canary again.",
        "promote": "The candidate becomes the route's primary now, for all traffic.",
        "rollback": "All traffic goes back to the baseline (or the fallback) now.",
        "restore": "The route goes back to the primary in its configuration, overrides cleared.",
    }
    target = ""
    if action == "rollback":
        options = '<option value="primary">the primary (baseline)</option>' + (
            '<option value="fallback">the fallback</option>' if has_fallback else ""
        )
        target = f'<label for="to">Roll back to</label><select id="to" name="to">{options}</select>'
    return (
        f"<p>Route <strong>{esc(route)}</strong> is {_phase(state)} now. "
        f"{esc(effects.get(action, ''))}</p>"
        f'<form class="confirm" method="post" action="{esc(route_link(route))}/{esc(action)}">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        f'<input type="hidden" name="confirm" value="{esc(action)}">'
        f"{target}"
        '<label for="reason">Reason (kept in the timeline)</label>'
        '<textarea id="reason" name="reason" maxlength="1000" required '
        'aria-describedby="reason-help"></textarea>'
        '<p id="reason-help" class="help">Up to 1000 characters; your name is recorded as the '
        "actor.</p>"
        f'<div class="actions"><button type="submit" class="danger">Confirm {esc(action)}</button>'
        f'<a class="button secondary" href="{esc(route_link(route))}">Cancel</a></div></form>'
    )
