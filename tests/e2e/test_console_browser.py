"""The console in Debian's Chromium (Playwright): signing in, the rollout page with a real
rollback's evidence, a reviewer who cannot pause, keyboard focus order and the phone layout."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Browser

from tests.conftest import wait_until
from tests.e2e.conftest import RolloutClient
from tests.e2e.console_browser import DESKTOP, PHONE, ConsoleGateway, sign_in

pytestmark = pytest.mark.e2e


def test_an_admin_signs_in_by_keyboard_and_lands_on_the_rollouts(
    start_console: Callable[..., ConsoleGateway], console_browser: Browser
) -> None:
    gateway = start_console()
    context = console_browser.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        sign_in(page, gateway.url, gateway.admin_token)
        assert page.url == gateway.url + "/ui/rollouts"
        cookies = {c["name"]: c for c in context.cookies()}
        session = cookies["mirrorgate_console"]
        assert session["httpOnly"] and session["sameSite"] == "Strict"
        assert page.evaluate("document.cookie") == ""  # no script can read it
    finally:
        context.close()


USERS = [f"user-{i}" for i in range(40)]


def _rolled_back(gateway: ConsoleGateway, client: RolloutClient) -> None:
    """A real rollback: the stale canary keeps answering 100 once the rule wants 150."""
    assert client.act(gateway.process, "start").status_code == 200
    for i in range(60):
        client.ask(gateway.process, USERS[i % len(USERS)])
    for i in range(600):
        client.ask(gateway.process, USERS[i % len(USERS)], version="v2", weight=150)
        if i % 20 == 19 and client.rollout(gateway.process)["phase"] == "rolled_back":
            break
    wait_until(lambda: client.rollout(gateway.process)["phase"] == "rolled_back", what="rollback")


def test_the_rollout_page_shows_a_real_rollbacks_evidence_and_a_reviewer_cannot_pause(
    start_console: Callable[..., ConsoleGateway],
    console_browser: Browser,
    rollout_client: RolloutClient,
) -> None:
    gateway = start_console()
    _rolled_back(gateway, rollout_client)
    admin = console_browser.new_context(viewport=DESKTOP)
    try:
        page = admin.new_page()
        sign_in(page, gateway.url, gateway.admin_token, "/ui/rollouts/bot")
        evidence = page.locator("section.evidence").first
        assert "by judge" in evidence.locator("h3").inner_text()
        example = evidence.locator("article.example").first
        answers = example.locator(".answer")
        assert answers.count() == 2
        failed, baseline = answers.nth(0), answers.nth(1)
        assert (
            "Failed: stale" in failed.inner_text() and '{"max_weight": 100}' in failed.inner_text()
        )
        assert "max-weight" in failed.locator("ul.checks").inner_text()
        assert "rule-follower" in baseline.inner_text()
        assert '{"max_weight": 150}' in baseline.inner_text()
        # side by side at 1280 px: the two answers share a row
        one, two = failed.bounding_box(), baseline.bounding_box()
        assert one is not None and two is not None
        assert abs(one["y"] - two["y"]) < 2 and two["x"] > one["x"] + one["width"] - 1
    finally:
        admin.close()

    # Restore, start again, and let a reviewer try to pause: no button, and the POST is refused.
    assert rollout_client.act(gateway.process, "restore").status_code == 200
    assert rollout_client.act(gateway.process, "start").status_code == 200
    reviewer = console_browser.new_context(viewport=DESKTOP)
    try:
        page = reviewer.new_page()
        sign_in(page, gateway.url, gateway.reviewer_tokens[0])
        assert page.url.endswith("/ui/review")
        assert page.get_by_role("button", name=re.compile("Pause")).count() == 0
        assert page.locator('a[href="/ui/rollouts"]').count() == 0
        shown = page.goto(gateway.url + "/ui/rollouts/bot")
        assert shown is not None and shown.status == 403
        page.goto(gateway.url + "/ui/review")
        csrf = page.locator('input[name="csrf"]').first.get_attribute("value")
        answer = page.evaluate(
            """async (csrf) => {
                const body = new URLSearchParams({csrf, confirm: "pause", reason: "mine"});
                const r = await fetch("/ui/rollouts/bot/pause", {method: "POST", body});
                return r.status;
            }""",
            csrf,
        )
        assert answer == 403
    finally:
        reviewer.close()
    assert rollout_client.rollout(gateway.process)["phase"] == "progressing"


def test_keyboard_focus_runs_in_reading_order_and_the_phone_layout_fits(
    start_console: Callable[..., ConsoleGateway], console_browser: Browser
) -> None:
    gateway = start_console()
    context = console_browser.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        sign_in(page, gateway.url, gateway.admin_token, "/ui/rollouts/bot")
        order = []
        for _ in range(8):
            page.keyboard.press("Tab")
            order.append(page.evaluate("document.activeElement.textContent.trim()"))
        assert order[:7] == [
            "Skip to content", "mirrorgate", "Review", "Rollouts", "Rules", "Experiments",
            "Sign out",
        ]  # fmt: skip
        # every control the page has is labelled
        unlabelled = page.evaluate(
            """() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
                 .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
                 .length"""
        )
        assert unlabelled == 0
        for path in ("/ui/rollouts", "/ui/rollouts/bot", "/ui/rules", "/ui/experiments",
                     "/ui/review", "/ui/rollouts/bot/confirm?action=rollback"):  # fmt: skip
            page.set_viewport_size(PHONE)
            page.goto(gateway.url + path)
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{path} scrolls sideways at 390 px by {overflow} px"
    finally:
        context.close()
