"""The blind review page (`/ui/review`) and its JSON calls (`/ui/api/review/…`), for reviewers and
admins.

    GET  /ui/review?route=R&version=V        the page: pick a queue, then the item (the server
                                              renders it escaped; review.js takes over)
    POST /ui/review                          the page's form without JavaScript (form-encoded)
    GET  /ui/api/review/queues               routes and rule versions to choose from
    GET  /ui/api/review/next?route&version   the next item: request turns, answers A and B
    POST /ui/api/review/items/{id}           {score_a, score_b, preference, reason?} → 201;
                                              409 when this reviewer already reviewed it
    POST /ui/api/review/items/{id}/skip      not now, and never again for this reviewer
    GET  /ui/api/review/progress?route&version  reviews, agreement, position bias

What leaves here about an item is `review_view.item_view`: the opaque item id, the request's
turns and the two answers, labelled A and B. Targets, arms, request and pair ids stay in the
store. Every POST needs the session's CSRF token (`x-csrf-token`, or the form's `csrf`).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' dependencies from their
# annotations.

import asyncio
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from analyzers.review_agreement import ScoredPair, agreement, position_bias
from proxy.api import read_limited
from proxy.core import Arm, GatewayError
from proxy.store import (
    ANY_VERSION,
    REASON_MAX_CHARS,
    ReviewItem,
    ReviewRecord,
    StoreUnavailableError,
)

from .auth import Principal
from .forms import read_form
from .layout import esc, page, security_headers
from .parts import ConsoleParts, api_principal, console_parts, page_principal
from .refusal import ConsoleRefusal
from .review_queue import ReviewQueue
from .review_view import item_view

T = TypeVar("T")
MAX_REVIEW_BYTES = 16 * 1024
"""A review is two digits, a word and a reason of at most 2,000 characters (up to 8 KB as UTF-8,
more when escaped in JSON): 16 KiB holds any valid one."""
_ITEM_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_FIELDS = {"score_a", "score_b", "preference", "reason"}
_PREFERENCES = ("A", "B", "tie")


def _refuse_json(status: int, message: str) -> ConsoleRefusal:
    return ConsoleRefusal(status, message, json=True)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"the field '{key[:50]}' is given twice")
        result[key] = value
    return result


def parse_review(raw: dict[str, Any]) -> tuple[int, int, str, str | None]:
    """(score_a, score_b, preference, reason) of a posted review, or ValueError saying what is
    wrong (the caller answers 400)."""
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise ValueError(f"a review has no field '{unknown[0][:50]}'")
    scores = []
    for name in ("score_a", "score_b"):
        value = raw.get(name)
        if isinstance(value, str) and value.isdigit() and len(value) == 1:
            value = int(value)  # a form posts text
        if type(value) is not int or not 1 <= value <= 5:
            raise ValueError(f"{name} must be a whole number from 1 to 5")
        scores.append(value)
    preference = raw.get("preference")
    if preference not in _PREFERENCES:
        raise ValueError("preference must be A, B or tie")
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ValueError("reason must be text")
    if reason is not None and len(reason) > REASON_MAX_CHARS:
        raise ValueError(f"reason is longer than {REASON_MAX_CHARS} characters")
    reason = (reason or "").strip() or None
    return scores[0], scores[1], str(preference), reason


async def _read_json(request: Request) -> dict[str, Any]:
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        raise _refuse_json(415, "a review is posted as application/json")
    try:
        body = await read_limited(request, MAX_REVIEW_BYTES, "the review")
    except GatewayError as exc:
        raise _refuse_json(exc.status, str(exc)) from None
    try:
        parsed = json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError:
        raise _refuse_json(400, "the body is not UTF-8") from None
    except ValueError as exc:
        message = str(exc) if "given twice" in str(exc) else "the body is not JSON"
        raise _refuse_json(400, message) from None
    if not isinstance(parsed, dict):
        raise _refuse_json(400, "a review is a JSON object")
    return parsed


# Built once per process: the endpoints reach their gateway's parts through the request.
review_router = APIRouter(prefix="/ui")


async def _blocking(call: Callable[[], T], *, json_refusal: bool = True) -> T:
    """`call` on a worker thread; the store's outage is a 503 in the caller's format."""
    try:
        return await asyncio.to_thread(call)
    except StoreUnavailableError:
        raise ConsoleRefusal(
            503, "the store cannot be reached just now: try again", json=json_refusal
        ) from None


def _choose(
    parts: ConsoleParts, route: str | None, version: str | None, *, json_refusal: bool
) -> tuple[str, str]:
    """The queue asked for: a configured route (default: the first with shadows) and a rule
    version (`*`: every one)."""
    routes = parts.config().routes
    if route is None or route == "":
        shadowed = [name for name, spec in routes.items() if spec.shadows]
        route = shadowed[0] if shadowed else next(iter(routes), "")
    if route not in routes:
        raise ConsoleRefusal(404, f"there is no route '{route[:100]}'", json=json_refusal)
    version = version or ANY_VERSION
    if len(version) > 200:
        raise ConsoleRefusal(400, "the rule version is too long", json=json_refusal)
    return route, version


def _versions_of(parts: ConsoleParts, route: str) -> list[str]:
    """The rule versions seen on `route`'s rule, newest first (blocking)."""
    rule = parts.config().rule_of(route)
    if rule is None:
        return []
    events = [e for e in parts.rule_events.events() if e.rule == rule]
    return [e.version for e in reversed(events)]


def _known_item(parts: ConsoleParts, item_id: str) -> ReviewItem:
    if not _ITEM_ID.match(item_id):
        raise _refuse_json(404, "no such item")
    item = parts.reviews.item(item_id)
    if item is None:
        raise _refuse_json(404, "no such item")
    return item


def _progress(
    parts: ConsoleParts, route: str, version: str, principal: Principal
) -> dict[str, Any]:
    """The queue's reviews: yours, agreement between reviewers, position bias (blocking)."""
    reviewed = parts.reviews.reviewed(route=route, rule_version=version)
    scored = [
        ScoredPair(
            r.item.item_id,
            r.review.score_a or 0,
            r.review.score_b or 0,
            r.review.preference or "tie",
        )
        for r in reviewed
        if r.review.preference is not None
    ]
    agreed = agreement(scored)
    bias = position_bias([s.preference for s in scored])
    return {
        "route": route,
        "rule_version": version,
        "yours": sum(r.review.reviewer_id == principal.reviewer_id for r in reviewed),
        "reviews": len(scored),
        "open": parts.reviews.open_count(route, version, principal.reviewer_id),
        "agreement": {
            "items": agreed.items,
            "kappa": agreed.kappa,
            "same_preference": agreed.observed,
            "mean_score_difference": agreed.mean_score_difference,
        },
        "position": {
            "reviews": bias.reviews,
            "a": bias.a,
            "b": bias.b,
            "ties": bias.ties,
            "a_share": bias.a_share,
        },
    }


def _next_view(
    parts: ConsoleParts, route: str, version: str, principal: Principal
) -> dict[str, Any]:
    """The next item's view (skipping items whose exchanges are gone), or why there is none
    (blocking)."""
    queue = ReviewQueue(parts.reviews, parts.rule_events, parts.rollouts.store, parts.config)
    for _ in range(20):
        item = queue.next_item(route, version, principal.reviewer_id)
        if item is None:
            break
        texts = parts.reviews.texts(item)
        if texts is not None:
            return {"item": item_view(item, texts), "empty": None}
        # retention took an exchange: put the item out of this reviewer's way
        parts.reviews.add(ReviewRecord(item.item_id, principal.reviewer_id, _now(), skipped=True))
    return {"item": None, "empty": queue.why_empty(route, version)}


def _store_review(
    parts: ConsoleParts,
    item: ReviewItem,
    principal: Principal,
    fields: tuple[int, int, str, str | None],
) -> bool:
    score_a, score_b, preference, reason = fields
    stored = parts.reviews.add(
        ReviewRecord(
            item_id=item.item_id,
            reviewer_id=principal.reviewer_id,
            created_at=_now(),
            score_a=score_a,
            score_b=score_b,
            preference=preference,  # type: ignore[arg-type]
            reason=reason,
        )
    )
    if stored:
        c = item.candidate
        # An experiment item's sides name their arms (`experiment:<arm>`): the label keeps to
        # the arms every dashboard knows.
        arm = Arm.EXPERIMENT.value if c.source == "experiment" else c.candidate_arm
        parts.metrics.reviews.labels(c.route, c.candidate_target, arm).inc()
    return stored


# --- JSON ---------------------------------------------------------------------------------


@review_router.get("/api/review/queues")
async def queues(
    principal: Annotated[Principal, Depends(api_principal)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
) -> Response:
    counts = await _blocking(parts.reviews.queues)
    routes = parts.config().routes
    body = {
        "routes": [name for name, spec in routes.items() if spec.shadows],
        "queues": [
            {
                "route": c.route,
                "rule_version": c.rule_version,
                "open": c.open,
                "reviews": c.reviews,
            }
            for c in counts
            if c.route in routes
        ],
    }
    return JSONResponse(body, headers=security_headers())


@review_router.get("/api/review/next")
async def next_item(
    principal: Annotated[Principal, Depends(api_principal)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
    route: str | None = None,
    version: str | None = None,
) -> Response:
    route, version = _choose(parts, route, version, json_refusal=True)
    body = await _blocking(lambda: _next_view(parts, route, version, principal))
    return JSONResponse(body, headers=security_headers())


@review_router.get("/api/review/progress")
async def progress_of(
    principal: Annotated[Principal, Depends(api_principal)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
    route: str | None = None,
    version: str | None = None,
) -> Response:
    route, version = _choose(parts, route, version, json_refusal=True)
    body = await _blocking(lambda: _progress(parts, route, version, principal))
    return JSONResponse(body, headers=security_headers())


@review_router.post("/api/review/items/{item_id}")
async def submit(
    request: Request,
    item_id: str,
    principal: Annotated[Principal, Depends(api_principal)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
) -> Response:
    raw = await _read_json(request)
    try:
        fields = parse_review(raw)
    except ValueError as exc:
        raise _refuse_json(400, str(exc)) from None
    item = await _blocking(lambda: _known_item(parts, item_id))
    if not await _blocking(lambda: _store_review(parts, item, principal, fields)):
        raise _refuse_json(409, "you have already reviewed (or skipped) this item")
    return JSONResponse({"stored": True}, 201, headers=security_headers())


@review_router.post("/api/review/items/{item_id}/skip")
async def skip(
    request: Request,
    item_id: str,
    principal: Annotated[Principal, Depends(api_principal)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
) -> Response:
    body = await _read_limited_or_refuse(request)
    if body.strip() not in (b"", b"{}"):
        raise _refuse_json(400, "a skip has no body")
    item = await _blocking(lambda: _known_item(parts, item_id))
    record = ReviewRecord(item.item_id, principal.reviewer_id, _now(), skipped=True)
    if not await _blocking(lambda: parts.reviews.add(record)):
        raise _refuse_json(409, "you have already reviewed (or skipped) this item")
    return JSONResponse({"skipped": True}, headers=security_headers())


async def _read_limited_or_refuse(request: Request) -> bytes:
    try:
        return await read_limited(request, 1024, "the skip")
    except GatewayError as exc:
        raise _refuse_json(exc.status, str(exc)) from None


# --- the page -----------------------------------------------------------------------------


@review_router.get("/review")
async def review_page(
    principal: Annotated[Principal, Depends(page_principal)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
    route: str | None = None,
    version: str | None = None,
    done: str | None = None,
) -> Response:
    route, version = _choose(parts, route, version, json_refusal=False)
    view, versions, counts = await _blocking(
        lambda: (_next_view(parts, route, version, principal), _versions_of(parts, route),
                 _progress(parts, route, version, principal)),
        json_refusal=False,
    )  # fmt: skip
    csrf = parts.auth.csrf_token(principal)
    body = render_page(parts, route, version, versions, view, counts, csrf, done)
    return page(
        title="Blind review",
        principal=principal,
        csrf=csrf,
        active="review",
        body=body,
        scripts=("review.js",),
    )


@review_router.post("/review")
async def review_form(
    request: Request,
    principal: Annotated[Principal, Depends(page_principal)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
) -> Response:
    form = await read_form(request, {"csrf", "item", "route", "version", "action", *_FIELDS})
    if not parts.auth.csrf_ok(principal, form.get("csrf")):
        raise ConsoleRefusal(403, "the form's CSRF token is missing or wrong")
    route, version = _choose(parts, form.get("route"), form.get("version"), json_refusal=False)
    item_id = form.get("item", "")
    try:
        item = await _blocking(lambda: _known_item(parts, item_id), json_refusal=False)
    except ConsoleRefusal:
        raise ConsoleRefusal(404, "no such item") from None
    done = "skipped"
    if form.get("action") == "skip":
        record = ReviewRecord(item.item_id, principal.reviewer_id, _now(), skipped=True)
        await _blocking(lambda: parts.reviews.add(record), json_refusal=False)
    else:
        fields_in = {k: v for k, v in form.items() if k in _FIELDS and v != ""}
        try:
            fields = parse_review(fields_in)
        except ValueError as exc:
            raise ConsoleRefusal(400, str(exc)) from None
        stored = await _blocking(
            lambda: _store_review(parts, item, principal, fields), json_refusal=False
        )
        done = "stored" if stored else "already"
    query = urlencode({"route": route, "version": version, "done": done})
    return RedirectResponse(f"/ui/review?{query}", 303, headers=security_headers())


def _now() -> datetime:
    return datetime.now(UTC)


_DONE = {
    "stored": "Review stored.",
    "skipped": "Skipped.",
    "already": "You had already reviewed that pair.",
}


def _radios(name: str, legend: str, options: list[tuple[str, str]], hint: str) -> str:
    inputs = "".join(
        f'<label class="choice"><input type="radio" name="{name}" value="{esc(value)}" '
        f"required> {esc(label)}</label>"
        for value, label in options
    )
    return (
        f'<fieldset class="field" id="field-{name}" data-field="{name}">'
        f'<legend>{esc(legend)} <span class="hint">{esc(hint)}</span></legend>{inputs}</fieldset>'
    )


def render_page(
    parts: ConsoleParts,
    route: str,
    version: str,
    versions: list[str],
    view: dict[str, Any],
    counts: dict[str, Any],
    csrf: str,
    done: str | None,
) -> str:
    """The page's HTML: every text from the store or a model goes through `esc`."""
    routes = [name for name, spec in parts.config().routes.items() if spec.shadows]
    route_options = "".join(
        f'<option value="{esc(r)}"{" selected" if r == route else ""}>{esc(r)}</option>'
        for r in routes or [route]
    )
    version_options = f'<option value="{ANY_VERSION}">every rule version</option>' + "".join(
        f'<option value="{esc(v)}"{" selected" if v == version else ""}>{esc(v)}</option>'
        for v in versions
    )
    pick = (
        '<form class="pick" method="get" action="/ui/review">'
        '<label for="pick-route">Route</label>'
        f'<select id="pick-route" name="route">{route_options}</select>'
        '<label for="pick-version">Rule version</label>'
        f'<select id="pick-version" name="version">{version_options}</select>'
        '<button type="submit">Show this queue</button></form>'
    )
    status = f"<p>{esc(_DONE.get(done or '', ''))}</p>" if done in _DONE else ""
    item = view["item"]
    if item is None:
        current = f'<p class="empty" id="review-empty">{esc(view["empty"])}</p>'
        item_id, turns, left_out, answer_a, answer_b = "", [], 0, "", ""
    else:
        item_id, turns, left_out = item["id"], item["request"], item["turns_left_out"]
        answer_a, answer_b = item["answers"]["A"], item["answers"]["B"]
        current = '<p class="empty" id="review-empty" hidden></p>'
    shown_turns = "".join(
        f'<li class="turn"><span class="role">{esc(t["role"])}</span>'
        f'<pre class="text">{esc(t["text"])}</pre></li>'
        for t in turns
    )
    more = (
        f'<p class="note" id="turns-left-out">{left_out} earlier turns are not shown.</p>'
        if left_out
        else '<p class="note" id="turns-left-out" hidden></p>'
    )
    scores = [(str(n), str(n)) for n in range(1, 6)]
    keys = (
        '<details class="keys" open><summary>Keyboard</summary><ul>'
        "<li><kbd>1</kbd> to <kbd>5</kbd>: the first digit scores answer A, the second answer B "
        "(or move to a score and type its digit)</li>"
        "<li><kbd>A</kbd>, <kbd>B</kbd>, <kbd>T</kbd>: prefer A, prefer B, a tie</li>"
        "<li><kbd>↑</kbd> <kbd>↓</kbd>: previous / next field; <kbd>←</kbd> <kbd>→</kbd>: "
        "change the choice in a field</li>"
        "<li><kbd>Enter</kbd>: submit (in the reason: <kbd>Shift</kbd>+<kbd>Enter</kbd> for a "
        "new line); <kbd>S</kbd>: skip this pair; <kbd>R</kbd>: write a reason</li></ul></details>"
    )
    form = (
        f'<form id="review-form" class="review-form" method="post" action="/ui/review"'
        f"{'' if item is not None else ' hidden'}>"
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        f'<input type="hidden" id="review-item-id" name="item" value="{esc(item_id)}">'
        f'<input type="hidden" name="route" value="{esc(route)}">'
        f'<input type="hidden" name="version" value="{esc(version)}">'
        + _radios("score_a", "Score of answer A", scores, "1 poor, 5 excellent")
        + _radios("score_b", "Score of answer B", scores, "1 poor, 5 excellent")
        + _radios(
            "preference",
            "Which answer is better?",
            [("A", "A"), ("B", "B"), ("tie", "Tie")],
            "A, B or T",
        )
        + '<div class="field" data-field="reason"><label for="reason">Why (optional, up to '
        f"{REASON_MAX_CHARS} characters)</label>"
        f'<textarea id="reason" name="reason" rows="3" maxlength="{REASON_MAX_CHARS}">'
        "</textarea></div>"
        '<div class="actions" data-field="submit">'
        '<button type="submit" id="review-submit">Submit review</button> '
        '<button type="submit" name="action" value="skip" id="review-skip" formnovalidate>'
        "Skip</button></div>"
        '<p id="review-status" role="status" aria-live="polite"></p></form>'
    )
    answers = (
        f'<section id="review-item" class="item" aria-label="The pair to review"'
        f"{'' if item is not None else ' hidden'}>"
        "<h2>Request</h2>"
        f'{more}<ol class="turns" id="request-turns">{shown_turns}</ol>'
        '<div class="answers">'
        '<section class="answer" aria-labelledby="answer-a-title">'
        '<h2 id="answer-a-title">Answer A</h2>'
        f'<pre class="text" id="answer-a">{esc(answer_a)}</pre></section>'
        '<section class="answer" aria-labelledby="answer-b-title">'
        '<h2 id="answer-b-title">Answer B</h2>'
        f'<pre class="text" id="answer-b">{esc(answer_b)}</pre></section></div></section>'
    )
    return (
        f'<div id="review-app" data-csrf="{esc(csrf)}" data-route="{esc(route)}" '
        f'data-version="{esc(version)}">'
        f"{pick}{status}{current}{answers}{form}{keys}"
        f"{_progress_html(counts)}</div>"
    )


def _fmt(value: float | None, pattern: str = "{:.2f}") -> str:
    return "—" if value is None else pattern.format(value)


def _progress_html(counts: dict[str, Any]) -> str:
    agreed, position = counts["agreement"], counts["position"]
    if agreed["items"]:
        agreement_text = (
            f"Cohen's kappa {_fmt(agreed['kappa'])} on the preference over "
            f"{agreed['items']} pairs two reviewers scored (same preference "
            f"{_fmt(agreed['same_preference'], '{:.0%}')}); scores differ by "
            f"{_fmt(agreed['mean_score_difference'])} points on average."
        )
    else:
        agreement_text = "Shown once two reviewers have scored the same pairs."
    share = position["a_share"]
    bias_text = (
        f"A was preferred in {_fmt(share, '{:.0%}')} of {position['a'] + position['b']} decided "
        f"reviews ({position['ties']} ties); answers are placed by a fair coin, so about 50% "
        "means no position bias."
        if share is not None
        else "No decided review yet."
    )
    return (
        '<section class="progress" aria-labelledby="progress-title" id="review-progress">'
        '<h2 id="progress-title">Progress and agreement</h2><dl>'
        f'<dt>Your reviews here</dt><dd id="progress-yours">{counts["yours"]}</dd>'
        f'<dt>Reviews here, everyone</dt><dd id="progress-reviews">{counts["reviews"]}</dd>'
        f'<dt>Open for you</dt><dd id="progress-open">{counts["open"]}</dd>'
        f'<dt>Agreement between reviewers</dt><dd id="progress-agreement">'
        f"{esc(agreement_text)}</dd>"
        f'<dt>Position bias</dt><dd id="progress-position">{esc(bias_text)}</dd>'
        "</dl></section>"
    )
