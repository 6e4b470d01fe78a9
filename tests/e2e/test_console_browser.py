"""The console in Debian's Chromium (Playwright): signing in, the rollout page with a real
rollback's evidence, a reviewer who cannot pause, keyboard focus order and the phone layout."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Browser

from tests.e2e.console_browser import DESKTOP, ConsoleGateway, sign_in

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
