"""The rules page (admins only).

GET /ui/rules    every rule's versions, newest first: the prompt diff, when it was first
                 seen, its pass rates per arm and model, and the rule-flip probes' scores
                 per model (the same tallies as `GET /admin/rules`)
"""

# No `from __future__ import annotations`: FastAPI reads the routes' dependencies from their
# annotations.

import asyncio
from collections import defaultdict
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from proxy.api import probe_scores
from proxy.core import Arm
from proxy.store import AnswerTally, StoreUnavailableError

from .auth import Principal
from .layout import page
from .parts import ConsoleParts, admin_page, console_parts
from .rules_page import VersionView, rules_page

VERSIONS_SHOWN = 20
"""The newest versions of each rule the page shows."""
SINCE_EVER = datetime(1970, 1, 1, tzinfo=UTC)


def _versions(parts: ConsoleParts) -> dict[str, list[VersionView]]:
    """rule → its newest versions, each with its traffic and pass tallies (blocking)."""
    config = parts.config()
    events = parts.rule_events.events()
    traffic = parts.rule_events.traffic()
    by_rule: dict[str, list[VersionView]] = defaultdict(list)
    for event in sorted(events, key=lambda e: e.first_seen_at, reverse=True):
        if len(by_rule[event.rule]) >= VERSIONS_SHOWN:
            continue
        spec = config.rules.get(event.rule)
        routes = dict.fromkeys([*(spec.routes if spec is not None else ()), event.route])
        merged: dict[tuple[Arm, str], list[int]] = defaultdict(lambda: [0, 0])
        for route in routes:
            for tally in parts.guard.answer_tallies(route, event.rule, event.version, SINCE_EVER):
                counts = merged[(tally.arm, tally.target)]
                counts[0] += tally.answers
                counts[1] += tally.failing
        tallies = [AnswerTally(arm, target, n, bad) for (arm, target), (n, bad) in merged.items()]
        by_rule[event.rule].append(
            VersionView(event, traffic.get((event.rule, event.version)), tallies)
        )
    return dict(by_rule)


rules_router = APIRouter(prefix="/ui")


@rules_router.get("/rules")
async def rules(
    principal: Annotated[Principal, Depends(admin_page)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
) -> HTMLResponse:
    configured = list(parts.config().rules)
    try:
        versions = await asyncio.to_thread(_versions, parts)
        probed = list(parts.probed_rules())
        scores = await asyncio.to_thread(probe_scores, parts.probes, probed, None)
        body = rules_page(versions, scores, configured)
    except StoreUnavailableError:
        body = (
            '<p class="problem" role="alert">The store cannot be reached: rule versions '
            "are read from it. Try again shortly.</p>"
        )
    return page(
        title="Rules",
        principal=principal,
        csrf=parts.auth.csrf_token(principal),
        active="rules",
        body=body,
    )
