"""The rules page's HTML: the prompt diff line by line, pass rates with intervals, probes."""

from __future__ import annotations

from datetime import UTC, datetime

from proxy.console.rules_page import VersionView, diff_html, rules_page
from proxy.core import Arm
from proxy.store import AnswerTally, RuleEvent

EVENT = RuleEvent("r", "v2", "v1", datetime(2026, 3, 1, tzinfo=UTC), "req", "bot", None)


def test_a_diff_is_shown_line_by_line() -> None:
    html = diff_html("--- a\n+++ b\n@@ -1,2 +1,2 @@\n keep\n-old\n+new <x>")
    assert html.count("<span") == 3
    assert '<span class="same">keep</span>' in html
    assert '<span class="del">old</span>' in html
    assert '<span class="add">new &lt;x&gt;</span>' in html
    assert "No prompt diff" in diff_html(None)
    assert "did not change" in diff_html("--- a\n+++ b\n")


def test_pass_rates_come_with_intervals_and_counts() -> None:
    view = VersionView(EVENT, None, [AnswerTally(Arm.CANARY, "cand", 40, 10)])
    html = rules_page({"r": [view]}, {}, ["r"])
    assert "<td>canary</td><td>cand</td><td>75% (" in html and "30 / 40" in html
    assert "no stored exchanges" in html


def test_rules_known_only_to_the_store_are_marked() -> None:
    view = VersionView(EVENT, None, [])
    html = rules_page({"r": [view]}, {}, [])
    assert "No longer in the configuration" in html
    assert "No version of this rule" in rules_page({}, {}, ["fresh"])
    assert "No rules are configured" in rules_page({}, {}, [])


def test_probe_scores_show_adaptation_and_stuck_rates() -> None:
    score = {
        "probes": 20,
        "adaptation": {"rate": 0.9, "low": 0.7, "high": 0.97},
        "stuck_rate": {"rate": None, "low": None, "high": None},
    }
    html = rules_page({}, {"r": {"m<1>": score}}, ["r"])
    assert "<td>m&lt;1&gt;</td><td>20</td><td>90% (70% to 97%)</td><td>—</td>" in html
