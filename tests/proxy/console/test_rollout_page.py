"""The rollout pages' HTML from plain values: the buttons, the verdicts, the request's messages
and the confirmation step."""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.console.rollout_page import confirm_page, conversation, overview, route_page, when

STATE: dict[str, Any] = {
    "route": "b<o>t", "phase": "progressing", "step": 0, "steps": [10, 50],
    "weight_percent": 10.0, "candidate": "cand", "baseline": "prod",
    "serving": {"primary": "prod", "arm": "primary", "canary": "cand"},
    "override": None, "rolled_back_to": None, "actor": "judge", "reason": "<why>",
    "changed_at": "2026-03-01T12:00:00+00:00",
}  # fmt: skip
VERDICT = {
    "rollout_id": "r1", "candidate": "cand", "look": 3, "scope": "", "metric": "error_rate",
    "verdict": "inconclusive", "estimate": 0.012, "low": 0.001, "high": 0.05,
    "threshold": 0.02, "n_primary": 400, "n_candidate": 40, "needs": 120, "eta_s": 600.0,
    "reason": "needs more", "at": "2026-03-01T12:00:00+00:00",
}  # fmt: skip


def _page(**kwargs: Any) -> str:
    values: dict[str, Any] = {
        "verdicts": [VERDICT], "transitions": [], "rollbacks": [], "warnings": ["<w>"],
        "available": ["pause"], "guard": None, "done": None, "problem": None,
    }  # fmt: skip
    return route_page(STATE, **{**values, **kwargs})


def test_the_route_page_shows_now_verdicts_and_only_allowed_buttons() -> None:
    html = _page()
    assert "<o>" not in html and "&lt;why&gt;" in html
    assert "1 of 2" in html and "10%" in html and "&lt;w&gt;" in html
    assert re.search(r"<td>0.012</td><td>0.001 to 0.05</td><td>0.02</td><td>400 / 40</td>"
                     r"<td>120</td><td>10 min</td>", html)  # fmt: skip
    enabled = re.findall(r'value="(\w+)"><button type="submit" class="\w+">', html)
    disabled = re.findall(r'value="(\w+)"><button type="submit" class="\w+" disabled>', html)
    assert enabled == ["pause"]
    assert disabled == ["resume", "promote", "rollback", "restore"]
    assert 'action="/ui/rollouts/b%3Co%3Et/confirm"' in html


def test_older_looks_are_folded_away() -> None:
    older = {**VERDICT, "look": 2, "verdict": "pass"}
    html = _page(verdicts=[VERDICT, older])
    assert html.count("<details>") == 1 and "Look 2" in html


def test_the_overview_links_each_route() -> None:
    html = overview([STATE], {"b<o>t": "switch on a rule regression"})
    assert 'href="/ui/rollouts/b%3Co%3Et"' in html and "switch on a rule regression" in html
    assert "No routes" in overview([], {})


def test_a_request_is_shown_as_its_messages() -> None:
    body = {
        "system": "be <brief>",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "<hi>"}, {"type": "image"}]},
            {"role": "assistant", "content": "ok"},
            "junk",
        ],
    }
    html = conversation(json.dumps(body))
    assert re.findall(r'<span class="role">(\w+)</span>', html) == ["system", "user", "assistant"]
    assert "be &lt;brief&gt;" in html and "&lt;hi&gt;" in html
    assert '<pre class="text">plain &lt;x&gt;</pre>' in conversation("plain <x>")
    assert "not stored" in conversation(None)


def test_the_confirmation_asks_for_a_reason_and_a_target_for_a_rollback() -> None:
    html = confirm_page("bot", "rollback", "tok", STATE, has_fallback=True)
    assert 'name="confirm" value="rollback"' in html and 'name="csrf" value="tok"' in html
    assert '<label for="reason">' in html and 'id="reason" name="reason"' in html
    assert 'value="fallback"' in html and '<label for="to">' in html
    assert 'value="fallback"' not in confirm_page("bot", "rollback", "t", STATE, has_fallback=False)
    assert "<select" not in confirm_page("bot", "pause", "t", STATE, has_fallback=True)


def test_times_are_machine_readable() -> None:
    assert when(None) == "—"
    assert when("2026-03-01T12:00:00+00:00") == (
        '<time datetime="2026-03-01T12:00:00+00:00">2026-03-01 12:00:00 UTC</time>'
    )
