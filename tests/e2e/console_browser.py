"""The console in a real browser: fixtures shared by every console browser test.

- `start_console(seed=None, **options)`: a real `mirrorgate serve` in front of the session's
  `mirrorgate mock-upstream`, on 127.0.0.1, with an admin token and two reviewer tokens, route
  `bot` (see `tests.e2e.conftest.rollout_gateway_config`: primary `rule-follower`, canary
  `stale`, rule `shipping`), bodies kept, on a SQLite store that `seed(store)` fills first (the
  store is migrated before). Every one is stopped by its PID after the test.
- `console_browser`: Debian's Chromium driven by Playwright (the system browser: no download).
  Skipped when either is missing, failed under MIRRORGATE_REQUIRE_SERVICES=1.
- `sign_in(page, url, token, next_path)`: sign a page in through the form, by keyboard.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from proxy.store.exchanges import Store
from tests.conftest import require_service
from tests.e2e.conftest import ADMIN_TOKEN, GatewayProcess, rollout_gateway_config

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REVIEWER_TOKENS = ("e2e-reviewer-one-t0ken", "e2e-reviewer-two-t0ken")
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@dataclass
class ConsoleGateway:
    """A gateway process serving the console."""

    process: GatewayProcess
    db_url: str
    admin_token: str = ADMIN_TOKEN
    reviewer_tokens: tuple[str, ...] = REVIEWER_TOKENS

    @property
    def url(self) -> str:
        return self.process.url


def console_config(mock_url: str, db_url: str, **options: Any) -> dict[str, Any]:
    """Route `bot` of the rollout tests, with request and answer bodies kept (the console shows
    them) and extra top-level sections from `options["extra"]`."""
    extra = options.pop("extra", {})
    config = rollout_gateway_config(mock_url, db_url, **options)
    config["store"] = {**config["store"], "bodies": "full", "flush_interval_ms": 10}
    for key, value in extra.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return config


@pytest.fixture
def start_console(tmp_path: Path, mock_process: str) -> Iterator[Callable[..., ConsoleGateway]]:
    started: list[GatewayProcess] = []

    def start(
        seed: Callable[[Store], None] | None = None, db_url: str | None = None, **options: Any
    ) -> ConsoleGateway:
        url = db_url or f"sqlite:///{tmp_path / 'console.db'}"
        if seed is not None:
            with Store(url) as store:
                store.migrate()
                seed(store)
        env = {
            "MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN,
            "MIRRORGATE_REVIEWER_TOKENS": ",".join(REVIEWER_TOKENS),
        }
        process = GatewayProcess(console_config(mock_process, url, **options), tmp_path, env=env)
        started.append(process)
        return ConsoleGateway(process, url)

    yield start
    for process in started:
        process.terminate()


@pytest.fixture(scope="module")
def console_browser() -> Iterator[Browser]:
    require_service(
        "Playwright", importlib.util.find_spec("playwright") is not None, "pip install playwright"
    )
    require_service(f"Chromium at {CHROMIUM}", CHROMIUM.exists(), "apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def sign_in(page: Page, url: str, token: str, next_path: str = "/ui") -> None:
    """Sign `page` in on the console at `url` as a person would: type the token, press Enter;
    wait until the browser has arrived where the sign-in sends it."""
    page.goto(f"{url}/ui/signin?next={next_path}")
    page.locator("#token").fill(token)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda address: "/ui/signin" not in address)
