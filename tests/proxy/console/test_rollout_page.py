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
        "offline": {"required": False},
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


OFFLINE: dict[str, Any] = {
    "required": True, "allowed": False, "reason": "<script>refused</script>", "set": "s<1>",
    "max_drop": 0.02, "max_age": "7d", "min_cases": 20,
    "candidate_run": {"model": "c<a>nd", "set_version": 3, "run_group": "g<1>",
                      "started_at": "2026-03-01T12:00:00+00:00", "config_fingerprint": "f" * 40},
    "primary_run": None,
    "strata": [
        {"stratum": "difficulty=<hard>", "candidate": {"cases": 20, "passed": 10},
         "primary": {"cases": 20, "passed": 18}, "drop": 0.4, "counted": True, "blocking": True},
        {"stratum": "task=legal", "candidate": {"cases": 4, "passed": "x"},
         "primary": "hostile", "drop": "no", "counted": False, "blocking": False},
        "not a stratum",
    ],
    "override": {"reason": "<b>INC-42</b>", "refused": "hard: 10/20"},
}  # fmt: skip


def test_the_offline_evidence_is_an_escaped_table_beside_the_verdicts() -> None:
    html = _page(offline=OFFLINE)
    assert html.index('id="verdicts"') < html.index('id="offline"') < html.index('id="evidence"')
    section = html[html.index('id="offline"') : html.index('id="evidence"')]
    assert "<script>" not in section and "<b>" not in section and "<1>" not in section
    assert "Refuses a start" in section and "&lt;script&gt;refused&lt;/script&gt;" in section
    assert "Override reason: &lt;b&gt;INC-42&lt;/b&gt;" in section
    assert "<caption>Offline pass rate per stratum" in section
    assert re.search(r'<th scope="row">difficulty=&lt;hard&gt;</th><td>10/20 \(50.0%\)</td>'
                     r'<td>18/20 \(90.0%\)</td><td>\+40.0 points</td><td class="fail">blocks'
                     r"</td>", section)  # fmt: skip
    assert re.search(r'task=legal</th><td>—</td><td>—</td><td>—</td><td>too few cases</td>',
                     section)  # fmt: skip
    assert "2 points" in section and "set version 3" in section and "ffffffffffff)" in section
    assert "Primary run</dt><dd>none" in section


def test_a_route_without_the_gate_says_so() -> None:
    html = _page()
    section = html[html.index('id="offline"') : html.index('id="evidence"')]
    assert "requires no evaluation run" in section and "<table>" not in section
