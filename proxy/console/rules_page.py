"""The HTML of the rules page: each rule's versions, newest first, with the prompt diff against
the version before (line by line, every line escaped), when each was first seen, the share of
answers that passed its checks per arm and model, and the rule-flip probes' scores per model.
Pure: values in, escaped HTML out."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from analyzers.rule_template import loads
from analyzers.summary import wilson_interval
from proxy.store import AnswerTally, RuleEvent, VersionTraffic

from .layout import esc
from .rollout_page import when

MAX_DIFF_LINES = 400
_SLOT = re.compile(r"⟨([^⟨⟩\s]{1,40})⟩")
"""A learned slot as a template's text writes it (`analyzers.rule_template.render`)."""


def _marked(text: str) -> str:
    """`text` escaped, each learned slot (`⟨customer⟩`) shown as a slot, not as text."""
    out: list[str] = []
    at = 0
    for found in _SLOT.finditer(text):
        out.append(esc(text[at : found.start()]))
        name = esc(found.group(1))
        out.append(f'<span class="slot" title="learned slot: varies per request">⟨{name}⟩</span>')
        at = found.end()
    out.append(esc(text[at:]))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class VersionView:
    """One rule version as the page shows it."""

    event: RuleEvent
    traffic: VersionTraffic | None
    tallies: Sequence[AnswerTally]
    """Per (arm, target), over every route of the rule."""


def diff_html(diff: str | None) -> str:
    """A unified diff as lines marked added, removed or kept (headers and hunks left out); the
    learned slots of a template (`⟨customer⟩`) are marked as slots: what varies per request is
    no change."""
    if diff is None:
        return (
            '<p class="note">No prompt diff: the first version of the rule, or prompts are not '
            "stored (store.bodies).</p>"
        )
    lines = []
    for line in diff.splitlines()[:MAX_DIFF_LINES]:
        if line.startswith(("+++", "---", "@@")):
            continue
        if line.startswith("+"):
            lines.append(f'<span class="add">{_marked(line[1:])}</span>')
        elif line.startswith("-"):
            lines.append(f'<span class="del">{_marked(line[1:])}</span>')
        else:
            kept = line[1:] if line[:1] == " " else line
            lines.append(f'<span class="same">{_marked(kept)}</span>')
    if not lines:
        return '<p class="note">The system prompt did not change.</p>'
    return (
        '<pre class="diff" aria-label="System prompt changes: lines starting with + were added, '
        'with - removed; ⟨slots⟩ are learned parts that vary per request">'
        + "\n".join(lines)
        + "</pre>"
    )


def _rate(passed: int, total: int) -> str:
    if total == 0:
        return "—"
    low, high = wilson_interval(passed, total)
    return f"{passed / total:.0%} ({low:.0%} to {high:.0%})"


def _tallies(tallies: Sequence[AnswerTally]) -> str:
    if not tallies:
        return '<p class="note">No answer was checked on this version.</p>'
    rows = "".join(
        f"<tr><td>{esc(t.arm.value)}</td><td>{esc(t.target)}</td>"
        f"<td>{esc(_rate(t.answers - t.failing, t.answers))}</td>"
        f"<td>{t.answers - t.failing} / {t.answers}</td></tr>"
        for t in sorted(tallies, key=lambda t: (t.arm.value, t.target))
    )
    return (
        '<div class="table-box"><table><caption>Answers passing every check, with 95% '
        'intervals</caption><thead><tr><th scope="col">Arm</th><th scope="col">Model</th>'
        '<th scope="col">Pass rate</th><th scope="col">Passed / answers</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )


def _probes(scores: Mapping[str, Mapping[str, object]]) -> str:
    if not scores:
        return ""
    rows = []
    for target, score in scores.items():
        adaptation = score.get("adaptation")
        stuck = score.get("stuck_rate")
        rows.append(
            f"<tr><td>{esc(target)}</td><td>{esc(score.get('probes'))}</td>"
            f"<td>{esc(_scored(adaptation))}</td><td>{esc(_scored(stuck))}</td></tr>"
        )
    return (
        '<div class="table-box"><table><caption>Rule-flip probes: how often each model follows a '
        "changed value (adaptation) or keeps the old one (stuck)</caption><thead><tr>"
        '<th scope="col">Model</th><th scope="col">Probes</th><th scope="col">Adaptation</th>'
        f'<th scope="col">Stuck</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )


def _scored(value: object) -> str:
    if not isinstance(value, Mapping) or value.get("rate") is None:
        return "—"
    return f"{value['rate']:.0%} ({value['low']:.0%} to {value['high']:.0%})"


def rules_page(
    versions: Mapping[str, Sequence[VersionView]],
    probes: Mapping[str, Mapping[str, Mapping[str, object]]],
    configured: Sequence[str],
) -> str:
    """Every rule of `configured` (and any the store knows), its versions newest first."""
    names = list(dict.fromkeys([*configured, *versions, *probes]))
    if not names:
        return '<p class="empty">No rules are configured and none was seen.</p>'
    toc = "".join(f'<li><a href="#rule-{i}">{esc(n)}</a></li>' for i, n in enumerate(names))
    parts = [f'<nav aria-label="Rules"><ul class="toc">{toc}</ul></nav>']
    for i, name in enumerate(names):
        listed = versions.get(name, ())
        parts.append(f'<section aria-labelledby="rule-{i}"><h2 id="rule-{i}">{esc(name)}</h2>')
        if name not in configured:
            parts.append('<p class="note">No longer in the configuration.</p>')
        parts.append(_probes(probes.get(name, {})))
        if not listed:
            parts.append('<p class="empty">No version of this rule has been seen yet.</p>')
        for view in listed:
            event, traffic = view.event, view.traffic
            seen = (
                f"{traffic.exchanges} exchanges, {when(traffic.first_seen)} to "
                f"{when(traffic.last_seen)}"
                if traffic is not None
                else "no stored exchanges"
            )
            value = f" · value {esc(event.rule_value)}" if event.rule_value else ""
            stored = loads(event.template) if event.template is not None else None
            template = ""
            if stored is not None:
                slots = stored[0].count(None)
                template = (
                    f"<dt>Template</dt><dd>learned from its prompts: {slots} "
                    f"slot{'s' if slots != 1 else ''} (parts that vary per request), "
                    f"{len(stored[0]) - slots} fixed words</dd>"
                )
            parts.append(
                '<article class="version">'
                f"<h3>Version {esc(event.version)}</h3>"
                '<dl class="facts">'
                f"<dt>First seen</dt><dd>{when(event.first_seen_at)} on route "
                f"{esc(event.route)} (request {esc(event.request_id)}){value}</dd>"
                f"<dt>Before it</dt><dd>{esc(event.previous_version or '—')}</dd>"
                f"<dt>Traffic</dt><dd>{seen}</dd>{template}</dl>"
                f"{diff_html(event.prompt_diff)}{_tallies(view.tallies)}</article>"
            )
        parts.append("</section>")
    return "".join(parts)
