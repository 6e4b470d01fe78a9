"""`mirrorgate rollout`: drive a gateway's rollouts through its admin API
(docs/rollouts.md).

    mirrorgate rollout status [ROUTE]                                   every route, or one
    mirrorgate rollout plan ROUTE [--since 1h]          can the steps pass at recent traffic
    mirrorgate rollout start|pause|resume|promote|abort|rollback ROUTE  one operator action
    mirrorgate rollout rollback ROUTE --to primary|fallback             a rollback's target
    mirrorgate rollout start ROUTE --force --reason "..."    past a refusing offline gate

`--url` (default `$MIRRORGATE_URL`, else `http://127.0.0.1:8080`) is the gateway's base URL; the
bearer token comes from `MIRRORGATE_ADMIN_TOKEN` (unset: no `Authorization` header, which a
gateway on loopback without a token accepts). `--json` prints the API's JSON instead of text.

Exit codes: 0 when the gateway answered 200 (an action that changed nothing included), 1 for
anything the user can fix — no or wrong token, unknown route, illegal transition (with the
current phase), store unavailable, gateway unreachable — named on one line of stderr, 2 for usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any
from urllib.parse import quote

import httpx

from .rollout_text import render_action, render_plan, render_routes, render_status

TOKEN_ENV = "MIRRORGATE_ADMIN_TOKEN"
URL_ENV = "MIRRORGATE_URL"


class RolloutCommandError(Exception):
    """A problem the user can fix; the message is the one line printed on stderr (exit 1)."""


def run_rollout(args: argparse.Namespace, transport: httpx.BaseTransport | None = None) -> int:
    """The `rollout` command (arguments checked by the parser in `proxy.cli.main`).

    `transport` replaces the network for the requests (tests reach an in-process gateway
    through it); by default they go over HTTP to `args.url`."""
    client, has_token = admin_client(args, transport)
    try:
        with client:
            body = _exchange(client, args, has_token=has_token)
    except RolloutCommandError as exc:
        print(f"mirrorgate: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(body, indent=2))
    elif args.action == "plan":
        print(render_plan(body))
    elif args.action != "status":
        print(render_action(args.action, body))
    elif args.route is None:
        print(render_routes(body))
    else:
        print(render_status(body))
    if args.action == "status" and args.route is None and body.get("store_reachable") is False:
        print(
            "mirrorgate: warning: the gateway cannot reach its store; "
            "it serves and shows its last known state",
            file=sys.stderr,
        )
    return 0


def _exchange(client: httpx.Client, args: argparse.Namespace, *, has_token: bool) -> Any:
    if args.action == "status":
        path = "/admin/rollouts" if args.route is None else _route_path(args.route)
        response = _send(client, "GET", path, None)
    elif args.action == "plan":
        since = quote(args.since or "1h", safe="")
        response = _send(client, "GET", f"{_route_path(args.route)}/plan?since={since}", None)
    else:
        # Always a JSON object, `{}` at least: the gateway takes state changes only as JSON.
        payload: dict[str, Any] = {"reason": args.reason} if args.reason else {}
        if getattr(args, "to", None) is not None:
            payload["to"] = args.to
        if getattr(args, "force", False):
            payload["force"] = True
        response = _send(client, "POST", f"{_route_path(args.route)}/{args.action}", payload)
    return answer_of(response, args, has_token=has_token)


def admin_client(
    args: argparse.Namespace, transport: httpx.BaseTransport | None
) -> tuple[httpx.Client, bool]:
    """A client of the admin API at `args.url`, with the admin token of `MIRRORGATE_ADMIN_TOKEN`
    when it is set; and whether it is (the refusals say what to do without one)."""
    token = os.environ.get(TOKEN_ENV, "")
    client = httpx.Client(
        base_url=args.url,
        headers={"authorization": f"Bearer {token}"} if token else {},
        timeout=httpx.Timeout(args.timeout),
        transport=transport,
    )
    return client, bool(token)


def admin_call(
    client: httpx.Client, args: argparse.Namespace, method: str, path: str, payload: Any,
    *, has_token: bool,
) -> dict[str, Any]:  # fmt: skip
    """One admin API call: its JSON object, or the refusal in words (`RolloutCommandError`)."""
    return answer_of(_send(client, method, path, payload), args, has_token=has_token)


def answer_of(
    response: httpx.Response, args: argparse.Namespace, *, has_token: bool
) -> dict[str, Any]:
    """The JSON object of a 200 answer, or the refusal in words (`RolloutCommandError`)."""
    if response.status_code != 200:
        raise RolloutCommandError(_refusal(response, args, has_token=has_token))
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise RolloutCommandError(
            f"{args.url} answered {response.request.url.path} with something other than a "
            "JSON object: is it a mirrorgate gateway?"
        )
    return body


def _route_path(route: str) -> str:
    return f"/admin/rollouts/{quote(route, safe='')}"


def _send(client: httpx.Client, method: str, path: str, payload: Any) -> httpx.Response:
    where = str(client.base_url).rstrip("/")
    try:
        return client.request(method, path, json=payload)
    except httpx.TimeoutException:
        timeout = client.timeout.read
        raise RolloutCommandError(
            f"the gateway at {where} did not answer within {timeout:g}s"
        ) from None
    except httpx.HTTPError as exc:
        why = _connect_reason(exc)
        raise RolloutCommandError(
            f"cannot reach the gateway at {where}: {why} (set --url or ${URL_ENV})"
        ) from None


def _connect_reason(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    if "refused" in text.lower():
        return "connection refused"
    return text.splitlines()[0]


def _refusal(response: httpx.Response, args: argparse.Namespace, *, has_token: bool) -> str:
    """The one stderr line for a non-200 answer."""
    status = response.status_code
    error = _error_of(response)
    said = error.get("message") if isinstance(error.get("message"), str) else None
    if status == 401:
        if not has_token:
            return f"the admin API needs a token: set {TOKEN_ENV} (401: {said or 'unauthorized'})"
        return f"the gateway did not accept the token in {TOKEN_ENV} (401: {said or '-'})"
    if status == 403:
        return f"the gateway refused the token in {TOKEN_ENV} (403: {said or 'forbidden'})"
    if status == 404 and said is not None:
        return f"{said} on {args.url} (404)"
    if status == 404:
        return (
            f"{args.url} has no {response.request.url.path} (404): is it a mirrorgate gateway "
            "with rollouts?"
        )
    if status == 409:
        phase = error.get("phase") or "idle"
        return f"{said or 'illegal transition'} (409; current phase: {phase})"
    if status == 503:
        return (
            f"the gateway cannot reach its store, nothing changed; retry later "
            f"(503: {said or 'unavailable'})"
        )
    detail = said or _snippet(response.text)
    return f"{args.url} answered {status}: {detail}"


def _error_of(response: httpx.Response) -> dict[str, Any]:
    """The `error` object of a mirrorgate error body (OpenAI format), or {}."""
    try:
        body = response.json()
    except ValueError:
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _snippet(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
