"""prometheus/mirrorgate-rules.yml: every alert unit-tested, wired to the runbook and to
mirrorgate's Alertmanager webhook. promtool itself runs the rules and their unit tests in
tests/e2e/test_promtool.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.metric_catalog import METRIC_NAME, exposed_sample_names

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "prometheus" / "mirrorgate-rules.yml"
RULE_TESTS = ROOT / "prometheus" / "mirrorgate-rules.test.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"

ROLLBACK_ALERTS = {"MirrorgateCanaryErrorRate", "MirrorgateCanaryCheckFailures"}
"""The alerts that make Alertmanager roll a route back (`mirrorgate_action: rollback`)."""
GATEWAY_WIDE_ALERTS = {
    "MirrorgateGatewayDown",
    "MirrorgateRecorderDrops",
    "MirrorgateInternalErrors",
}
"""Alerts about a whole gateway process: no route to roll back, so no `mirrorgate_route`."""


def alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    doc = yaml.safe_load(RULE_TESTS.read_text())
    firing: set[str] = set()
    silent: set[str] = set()
    for group in doc["tests"]:
        for case in group.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else silent).add(case["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert names - firing == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested not firing"


def test_every_alert_has_for_severity_summary_and_a_runbook_section() -> None:
    headings = {
        github_anchor(line.lstrip("#"))
        for line in RUNBOOK.read_text().splitlines()
        if line.startswith("#")
    }
    for rule in alerts():
        name = rule["alert"]
        assert "for" in rule, name
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], name
        page, _, anchor = annotations["runbook_url"].partition("#")
        assert page == "docs/runbook.md", name
        assert anchor == github_anchor(name) and anchor in headings, name


def test_route_alerts_carry_the_labels_the_webhook_acts_on() -> None:
    for rule in alerts():
        name, labels = rule["alert"], rule["labels"]
        if name in GATEWAY_WIDE_ALERTS:
            assert "mirrorgate_route" not in labels and "mirrorgate_action" not in labels, name
            continue
        assert labels["mirrorgate_route"] == "{{ $labels.route }}", name
        # The webhook rolls back on a missing action too, so every other alert says `notify`.
        expected = "rollback" if name in ROLLBACK_ALERTS else "notify"
        assert labels["mirrorgate_action"] == expected, name


def test_rules_use_only_metrics_the_gateway_exposes(tmp_path: Path) -> None:
    exposed = exposed_sample_names(tmp_path)
    used = {name for rule in alerts() for name in METRIC_NAME.findall(rule["expr"])}
    assert used and used <= exposed, used - exposed


def test_no_keys_newer_than_debians_prometheus() -> None:
    # Prometheus 2.42 refuses a rules file with `query_offset` (groups) or `keep_firing_for`.
    doc = yaml.safe_load(RULES.read_text())
    assert all(set(group) <= {"name", "interval", "limit", "rules"} for group in doc["groups"])
    allowed = {"alert", "expr", "for", "labels", "annotations"}
    assert all(set(rule) <= allowed for rule in alerts())
