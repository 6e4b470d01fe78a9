"""Blind review in Debian's Chromium (Playwright), against a real `mirrorgate serve`: a reviewer
signs in, scores ten pairs by keyboard alone, and the scores appear in the store, in
`mirrorgate_reviews_total` and in the canary's `human_preference` verdict; no model, target,
upstream model or arm name is in the review page's DOM or in any response the page fetched; an
answer holding `<script>` is shown as text and does not run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Response

from proxy.store import ReviewStore
from proxy.store.exchanges import Store
from tests.conftest import wait_until
from tests.e2e.conftest import RolloutClient, rollout_gateway_config
from tests.e2e.console_browser import DESKTOP, PHONE, ConsoleGateway, sign_in
from tests.review_scene import PAIRS, review_pairs

pytestmark = pytest.mark.e2e

SECRETS = ("rule-follower", "stale", "echo", "primary", "canary", "shadow", "fallback")
"""The route's models (their names are also what is sent upstream) and every arm."""


def _bot_with_review(mock_url: str, db_url: str) -> dict[str, Any]:
    """Route `bot` of the rollout tests with its canary shadowed too (blind review pairs the
    primary's live answer with the canary model's shadow answer) and judged on
    `human_preference` from ten reviews."""
    bot = rollout_gateway_config(
        mock_url, db_url, metrics=["error_rate", "human_preference"],
        thresholds={"min_samples_reviews": PAIRS},
    )["routes"]["bot"]  # fmt: skip
    return {**bot, "shadows": [{"model": "stale", "sample": 0.0}]}


def _human_preference(client: RolloutClient, gateway: ConsoleGateway) -> dict[str, Any] | None:
    for verdict in client.rollout(gateway.process)["verdicts"]:
        if verdict["metric"] == "human_preference" and verdict["n_candidate"] == PAIRS:
            found: dict[str, Any] = verdict
            return found
    return None


def test_a_reviewer_scores_ten_pairs_by_keyboard_and_the_scores_reach_the_decision(
    start_console: Callable[..., ConsoleGateway],
    console_browser: Browser,
    rollout_client: RolloutClient,
    mock_process: str,
    tmp_path: Any,
) -> None:
    db_url = f"sqlite:///{tmp_path / 'console.db'}"
    gateway = start_console(
        db_url=db_url, extra={"routes": {"bot": _bot_with_review(mock_process, db_url)}}
    )
    started = rollout_client.act(gateway.process, "start")
    assert started.status_code == 200, started.text
    with Store(db_url) as store:  # traffic after the rollout started: the judge's window
        store.write_batch(review_pairs(datetime.now(UTC)))

    context = console_browser.new_context(viewport=DESKTOP)
    bodies: list[str] = []
    problems: list[str] = []

    def keep(response: Response) -> None:
        try:
            bodies.append(response.text())
        except Exception:  # a redirect has no body to read
            bodies.append(response.url)

    try:
        page: Page = context.new_page()
        page.on("response", keep)
        page.on("pageerror", lambda error: problems.append(str(error)))
        sign_in(page, gateway.url, gateway.reviewer_tokens[0], "/ui/review?route=bot")
        assert "/ui/review" in page.url
        page.wait_for_selector("#review-form:not([hidden])")
        saw_script = False
        for n in range(PAIRS):
            texts = (page.text_content("#answer-a") or "", page.text_content("#answer-b") or "")
            if any("<script>" in t for t in texts):
                saw_script = True
                holder = "#answer-a" if "<script>" in texts[0] else "#answer-b"
                assert page.eval_on_selector(holder, "node => node.children.length") == 0
                assert page.evaluate("window.__ran === undefined")
            # the focus starts on answer A's score: two digits, a preference, Enter
            assert page.evaluate("document.activeElement.name") == "score_a"
            page.keyboard.press("4")
            page.keyboard.press("2" if n % 2 else "5")
            page.keyboard.press("b" if n % 4 == 3 else "a")
            page.keyboard.press("Enter")
            page.wait_for_function(
                "n => document.getElementById('progress-yours').textContent === String(n)",
                arg=n + 1,
            )
        page.wait_for_selector("#review-empty:not([hidden])")
        assert saw_script, "the pair whose answer is markup was never shown"
        assert page.evaluate("window.__ran === undefined")
        dom = page.content()
        page.set_viewport_size(PHONE)  # stacked at phone width, nothing sideways
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    finally:
        context.close()
    assert problems == []

    # no model, target or arm name: not in the DOM, not in anything the page fetched
    for text in [dom, *bodies]:
        for secret in SECRETS:
            assert secret not in text, (secret, text[:200])

    # the scores are in the store, joined to both exchanges, with the side each was shown on
    with Store(db_url) as store:
        reviewed = ReviewStore(store).reviewed(route="bot")
    assert len(reviewed) == PAIRS
    assert {r.review.reviewer_id for r in reviewed} == {reviewed[0].review.reviewer_id}
    assert {r.item.candidate.candidate_target for r in reviewed} == {"stale"}
    assert sorted(r.review.score_a for r in reviewed) == [4] * PAIRS
    assert sorted(r.review.score_b or 0 for r in reviewed) == [2] * 5 + [5] * 5
    preferred_a = sum(r.review.preference == "A" for r in reviewed)
    assert preferred_a == 8  # n % 4 == 3 pressed B: items 3 and 7
    # ... counted ...
    assert (
        rollout_client.metric(
            gateway.process, "mirrorgate_reviews_total", route="bot", target="stale", arm="shadow"
        )
        == PAIRS
    )
    # ... and judged: the canary's human_preference verdict reads these ten reviews
    verdict = wait_until(
        lambda: _human_preference(rollout_client, gateway),
        timeout_s=20.0,
        what="the human_preference verdict",
    )
    share = sum(1.0 if r.candidate_preference == 1.0 else 0.0 for r in reviewed) / PAIRS
    assert verdict["scope"] == "reviews"
    assert verdict["estimate"] == pytest.approx(0.5 - share)
    assert verdict["verdict"] in ("pass", "fail", "inconclusive")
