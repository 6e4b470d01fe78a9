"""`mirrorgate rules`: a gateway's rule versions and the templates learned from their system
prompts, through its admin API (`GET /admin/rules/templates`, docs/rules.md).

    mirrorgate rules [RULE] [--url URL] [--json]

`--url`, the token (`MIRRORGATE_ADMIN_TOKEN`), `--json`, `--timeout` and the exit codes are those
of `mirrorgate rollout` (`proxy.cli.rollout`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import quote

import httpx

from .rollout import RolloutCommandError, admin_call, admin_client

TEXT_LINES_SHOWN = 40
"""Lines of a template's text printed per version (the rest is cut with a note)."""


def run_rules(args: argparse.Namespace, transport: httpx.BaseTransport | None = None) -> int:
    """The `rules` command (arguments checked by the parser in `proxy.cli.main`)."""
    client, has_token = admin_client(args, transport)
    path = "/admin/rules/templates"
    if args.rule is not None:
        path += f"?rule={quote(args.rule, safe='')}"
    try:
        with client:
            body = admin_call(client, args, "GET", path, None, has_token=has_token)
    except RolloutCommandError as exc:
        print(f"mirrorgate: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(body, indent=2) if args.json else render_rules(body))
    return 0


def render_rules(body: dict[str, Any]) -> str:
    """Per rule: its settings, what this replica holds, and each version with its template."""
    rules = body.get("rules") or []
    if not rules:
        return "no rules are configured and none was seen"
    lines: list[str] = []
    for rule in rules:
        support = rule.get("version_support") or {}
        settings = (
            f"template {rule.get('template')}, a new version needs "
            f"{support.get('min_requests')} requests from {support.get('min_units')} units, "
            f"max_versions {rule.get('max_versions')}"
            if rule.get("configured")
            else "no longer configured"
        )
        lines.append(f"rule {rule.get('rule')}: {settings}")
        held = rule.get("held")
        if held is not None:
            lines.append(
                f"  held here: {held['open_templates']} open templates, "
                f"{held['pending_templates']} pending, {held['variants']} variants "
                f"({held['evicted']} evicted, {held['retired']} versions retired)"
            )
        versions = rule.get("versions") or []
        if not versions:
            lines.append("  no version seen yet")
        for version in versions:
            named = " (named)" if version.get("named") else ""
            value = f", value {version['rule_value']}" if version.get("rule_value") else ""
            lines.append(
                f"  version {version.get('version')}{named}: since {version.get('changed_at')}, "
                f"{version.get('exchanges')} exchanges{value}"
            )
            template = version.get("template")
            if template is None:
                continue
            slots = template.get("slots") or []
            lines.append(
                f"    template: {template.get('fixed_words')} fixed words, "
                + (f"{len(slots)} slots: {' '.join(slots)}" if slots else "no slots")
            )
            text = template.get("text")
            if text:
                shown = text.splitlines()
                for line in shown[:TEXT_LINES_SHOWN]:
                    lines.append(f"    | {line}")
                if len(shown) > TEXT_LINES_SHOWN:
                    lines.append(f"    | … ({len(shown) - TEXT_LINES_SHOWN} more lines)")
    return "\n".join(lines)
