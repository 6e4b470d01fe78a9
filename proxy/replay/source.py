"""Where replayed requests come from: the store, or a JSONL file of requests.

From the store: successful (`status: ok`) exchanges of the primary, canary and fallback arms, newest
first up to `--limit`, then replayed oldest first. Only exchanges whose request body was stored
(`store.bodies: full` or `redacted`) can be replayed; the others are counted and reported.

From a file (`--from-file`), one JSON object per line:

    {"id": "req-1", "endpoint": "chat.completions", "request": {...}, "route": "bot",
     "response": "the recorded answer", "target": "prod"}

`id`, `endpoint` (chat.completions, completions, embeddings, responses or messages) and `request`
(the full body) are required; `route` (default `file:<stem>`), `response` (the original answer,
to measure agreement with) and `target` (who gave it, default `recorded`) are optional. A line that
cannot be used is reported as a problem, with its number, and skipped; blank lines are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from proxy.core import Arm, ExchangeRecord, Status
from proxy.store import Store

from .job import ENDPOINTS_BY_NAME, Reference, ReplayJob

REPLAYED_ARMS = (Arm.PRIMARY, Arm.CANARY, Arm.FALLBACK)
"""Arms whose answers reached a client: the ones worth replaying."""


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """A recorded request, ready to be sent to any candidate speaking its wire format."""

    request_id: str
    route: str
    endpoint: str
    body: dict[str, Any]
    reference: Reference | None
    rule: str | None = None
    rule_version: str | None = None

    def job(self, candidate: str) -> ReplayJob:
        """This request, for `candidate`."""
        return ReplayJob(
            request_id=self.request_id,
            route=self.route,
            candidate=candidate,
            endpoint=ENDPOINTS_BY_NAME[self.endpoint],
            body=self.body,
            reference=self.reference,
            pair_kind="replay",
            tags=("replay",),
            rule=self.rule,
            rule_version=self.rule_version,
        )


@dataclass(frozen=True, slots=True)
class ReplaySource:
    """The requests to replay, and what was left out."""

    requests: tuple[ReplayRequest, ...]
    without_body: int = 0
    """Store exchanges that would have been replayed but have no stored request body."""
    problems: tuple[str, ...] = ()
    """`<file>:<line>: <why>` for every line of a file that was skipped."""


def from_store(
    store: Store,
    *,
    route: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
    page_size: int = 1000,
) -> ReplaySource:
    """The newest `limit` (default: all) replayable exchanges of `route` since `since`."""
    replayable: list[tuple[ExchangeRecord, dict[str, Any]]] = []
    bodiless: list[datetime] = []
    for arm in REPLAYED_ARMS:
        found = 0
        for record in _newest_first(store, arm, route, since, page_size):
            if record.status is not Status.OK or record.endpoint not in ENDPOINTS_BY_NAME:
                continue
            body = _body(record)
            if body is None:
                bodiless.append(record.started_at)
                continue
            replayable.append((record, body))
            found += 1
            if limit is not None and found >= limit:
                break  # the newest `limit` overall are among the newest `limit` of each arm
    replayable.sort(key=lambda pair: pair[0].started_at, reverse=True)
    if limit is not None:
        replayable = replayable[:limit]
    cutoff = replayable[-1][0].started_at if replayable and limit is not None else None
    # Counted like the selection: within the window, and no older than the oldest one replayed.
    without_body = sum(1 for started in bodiless if cutoff is None or started >= cutoff)
    requests = []
    for record, body in reversed(replayable):
        requests.append(
            ReplayRequest(
                request_id=record.request_id,
                route=record.route,
                endpoint=record.endpoint,
                body=body,
                reference=Reference(
                    target=record.target,
                    text=record.response_text or "",
                    status=record.status.value,
                    duration_s=record.duration_s,
                    ttft_s=record.ttft_s,
                    cost_usd=record.cost_usd,
                    masked=True,
                ),
                rule=record.rule,
                rule_version=record.rule_version,
            )
        )
    return ReplaySource(tuple(requests), without_body=without_body)


def _body(record: ExchangeRecord) -> dict[str, Any] | None:
    if not record.request_body:
        return None
    try:
        body = json.loads(record.request_body)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _newest_first(
    store: Store, arm: Arm, route: str | None, since: datetime | None, page_size: int
) -> Iterator[ExchangeRecord]:
    """Every record of `arm`, newest first, a page at a time.

    The store pages by time only, so each page ends just after the oldest record seen so far and
    the records seen at that very microsecond are skipped the next time; a page made only of
    records from one microsecond doubles the page size until it gets past them.
    """
    until: datetime | None = None
    at_boundary: set[tuple[str, str, datetime]] = set()
    size = page_size
    while True:
        rows = store.query(
            route=route, arm=arm, since=since, until=until, limit=size, newest_first=True
        )
        fresh = [r for r in rows if (r.request_id, r.target, r.started_at) not in at_boundary]
        if not fresh and len(rows) == size:
            size *= 2
            continue
        yield from fresh
        if len(rows) < size:
            return
        boundary = rows[-1].started_at
        at_boundary = {
            (r.request_id, r.target, r.started_at) for r in rows if r.started_at == boundary
        }
        until = boundary + timedelta(microseconds=1)
        size = page_size


def from_file(path: Path, *, route: str | None = None, limit: int | None = None) -> ReplaySource:
    """The requests of a JSONL file (see the module docstring), in file order; at most `limit`
    of those on `route`. Raises `OSError` when the file cannot be read."""
    default_route = f"file:{path.stem}"
    requests: list[ReplayRequest] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                request = _parse_line(line, default_route)
            except ValueError as exc:
                problems.append(f"{path}:{number}: {exc}; line skipped")
                continue
            if request.request_id in seen:
                problems.append(
                    f"{path}:{number}: id '{request.request_id}' was already used on line "
                    f"{seen[request.request_id]}; line skipped"
                )
                continue
            seen[request.request_id] = number
            if route is not None and request.route != route:
                continue
            if limit is None or len(requests) < limit:
                requests.append(request)
    return ReplaySource(tuple(requests), problems=tuple(problems))


def _parse_line(line: str, default_route: str) -> ReplayRequest:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at character {exc.pos + 1})") from None
    except ValueError as exc:  # e.g. a number too large to convert
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(item, dict):
        raise ValueError("not a JSON object")
    request_id = _text(item, "id", required=True)
    endpoint = item.get("endpoint")
    if endpoint not in ENDPOINTS_BY_NAME:
        known = ", ".join(ENDPOINTS_BY_NAME)
        raise ValueError(f"'endpoint' must be one of {known}, not {endpoint!r}")
    body = item.get("request")
    if not isinstance(body, dict):
        raise ValueError("'request' must be the request body, a JSON object")
    check_stream(body, endpoint)
    response = item.get("response")
    if response is not None and not isinstance(response, str):
        raise ValueError("'response' must be a string (the recorded answer text)")
    reference = None
    if response is not None:
        reference = Reference(target=_text(item, "target") or "recorded", text=response)
    return ReplayRequest(
        request_id=request_id or "",
        route=_text(item, "route") or default_route,
        endpoint=endpoint,
        body=body,
        reference=reference,
    )


def check_stream(body: dict[str, Any], endpoint: str) -> None:
    """Raise `ValueError` when the body's `stream` is not usable on `endpoint`."""
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ValueError("'stream' must be true or false")
    if stream and not ENDPOINTS_BY_NAME[endpoint].streams:
        raise ValueError(f"{endpoint} does not stream")


def _text(item: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = item.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{key}' must be a non-empty string")
    return value


def jobs_for(requests: Sequence[ReplayRequest], candidates: Sequence[str]) -> list[ReplayJob]:
    """Every request for every candidate, request by request."""
    return [request.job(candidate) for request in requests for candidate in candidates]
