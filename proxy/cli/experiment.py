"""`mirrorgate experiment`: start, read and stop a gateway's A/B experiments through its admin API
(docs/experiments.md).

    mirrorgate experiment status ROUTE     the experiment, its arms, and the decision in words
    mirrorgate experiment start ROUTE      start the route's configured experiment
    mirrorgate experiment stop ROUTE       stop it (every unit back to the route's normal serving)

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


def run_experiment(args: argparse.Namespace, transport: httpx.BaseTransport | None = None) -> int:
    """The `experiment` command (arguments checked by the parser in `proxy.cli.main`)."""
    client, has_token = admin_client(args, transport)
    path = f"/admin/experiments/{quote(args.route, safe='')}"
    try:
        with client:
            if args.action == "status":
                body = admin_call(client, args, "GET", path, None, has_token=has_token)
            else:
                payload = {"reason": args.reason} if args.reason else {}
                body = admin_call(
                    client, args, "POST", f"{path}/{args.action}", payload, has_token=has_token
                )
    except RolloutCommandError as exc:
        print(f"mirrorgate: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(body, indent=2) if args.json else render_experiment(args.action, body))
    return 0


def render_experiment(action: str, body: dict[str, Any]) -> str:
    """The answer in a few lines: state, arms and weights, the decision in words."""
    route = body.get("route", "?")
    if not body.get("configured"):
        return f"route {route}: no experiment configured (routes.{route}.experiment)"
    state = body.get("experiment")
    lines: list[str] = []
    if action != "status":
        changed = body.get("changed")
        lines.append(f"{action}: {'done' if changed else 'nothing to change'}")
    if state is None:
        lines.append(f"route {route}: experiment configured, never started")
        return "\n".join(lines)
    lines.append(
        f"route {route}: experiment {state['id']} {state['state']} since {state['started_at']}"
        + (f", stopped {state['stopped_at']}" if state.get("stopped_at") else "")
        + f" (by {state['actor']}: {state['reason']})"
    )
    serving = body.get("serving", {}).get("weights_percent", {})
    for arm, weight in state.get("weights_percent", {}).items():
        model = state.get("models", {}).get(arm, "?")
        tags = []
        if arm == state.get("control"):
            tags.append("control")
        if arm in state.get("stopped_arms", []):
            tags.append("stopped by a guardrail")
        now = serving.get(arm)
        shown = f"{weight:g}%" if now is None or now == weight else f"{weight:g}% -> {now:g}%"
        lines.append(
            f"  {arm:<16} {model:<20} {shown}" + (f"  ({', '.join(tags)})" if tags else "")
        )
    decision = body.get("decision")
    if decision:
        lines.append(f"decision ({decision.get('at')}):")
        lines.extend(f"  {line}" for line in str(decision.get("text", "")).splitlines())
    elif state["state"] == "running":
        lines.append("decision: none yet (the decider looks every interval_s)")
    for warning in body.get("warnings", []):
        lines.append(f"warning: {warning}")
    return "\n".join(lines)
