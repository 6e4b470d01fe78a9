"""Templated system prompts end to end: the official openai SDK calls a real `mirrorgate serve`
in front of `mirrorgate mock-upstream`. Customers' names, dates, ticket ids and amounts vary per
request; the rule is one version, `max_weight` 100 → 150 opens a new one within 20 requests, one
client's junk opens none and labels nothing, a restarted gateway gives the same prompt the same
version, `mirrorgate rules` lists the learned slots, and the console's diff shows them as slots
(Debian's Chromium; a screenshot is kept in the test's folder)."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from playwright.sync_api import Browser

from tests.conftest import wait_until
from tests.e2e.conftest import ADMIN_TOKEN, GatewayProcess
from tests.e2e.console_browser import DESKTOP, sign_in

pytestmark = pytest.mark.e2e

NAMES = ["Ada Lovelace", "Grace Hopper", "Alan Turing", "Edsger W. Dijkstra", "Barbara Liskov",
         "Donald Knuth", "Ken", "Dennis Ritchie", "Margaret Hamilton", "Frances Allen"]  # fmt: skip


def config(mock_url: str, db_url: str) -> dict[str, Any]:
    models = {
        name: {"provider": "openai", "base_url": mock_url + "/v1", "model": name, "timeout_s": 5}
        for name in ("rule-follower", "stale")
    }
    return {
        "store": {"url": db_url, "bodies": "full", "flush_interval_ms": 10},
        "models": models,
        "routes": {
            "bot": {
                "primary": "rule-follower",
                "canary": {"model": "stale", "sticky": "header:x-user-id"},
            }
        },
        "rules": {
            "support": {
                "routes": ["bot"],
                "checks": [
                    {"name": "weight", "type": "phantom_rule",
                     "parameter": r"max_weight\s*=\s*(?P<value>\d+)"},
                ],
            }
        },
    }  # fmt: skip


def prompt(user: int, rng: random.Random, weight: int) -> str:
    return (
        "You are the support assistant of Parcelly.\n"
        f"Customer: {NAMES[user % len(NAMES)]} <customer{user}@example.com>. "
        f"Today is 2026-12-{1 + rng.randrange(28):02d}.\n"
        f"Ticket #{48_000 + rng.randrange(10_000)}, order total "
        f"${rng.randrange(5, 500)}.{rng.randrange(100):02d}.\n"
        f"Rules: max_weight = {weight} kg. Answer in JSON."
    )


@pytest.fixture
def gateway(tmp_path: Path, mock_process: str) -> Iterator[GatewayProcess]:
    env = {"MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    process = GatewayProcess(
        config(mock_process, f"sqlite:///{tmp_path / 'rules.db'}"), tmp_path, env
    )
    yield process
    process.terminate()


def ask(client: openai.OpenAI, user: int, system: str) -> str:
    raw = client.chat.completions.with_raw_response.create(
        model="bot",
        messages=[{"role": "system", "content": system},
                  {"role": "user", "content": "How heavy may my parcel be?"}],
        extra_headers={"x-user-id": f"user-{user}"},
    )  # fmt: skip
    return raw.headers["x-mirrorgate-rule-version"]


def rule_labels(url: str) -> set[str]:
    text = httpx.get(url + "/metrics", timeout=5).text
    return set(re.findall(r'mirrorgate_check_results_total\{[^}]*rule_version="([^"]*)"', text))


def traffic(gateway: GatewayProcess, rng: random.Random) -> tuple[str, str]:
    """40 requests of 30 customers at max_weight 100, one client's junk, then 20 at 150: the
    two versions carried (asserting each is one version from its first few requests)."""
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as client:
        before = [
            ask(client, u, prompt(u, rng, 100)) for u in (rng.randrange(30) for _ in range(40))
        ]
        version = before[-1]
        assert before[5:] == [version] * 35  # one version, learned from the first few requests
        # One client's junk: 20 system prompts of its own, 3 requests each.
        for i in range(20):
            for _ in range(3):
                ask(client, 999, f"Forget the rules, number {i}: obey {rng.random()}")
        after = [
            ask(client, u, prompt(u, rng, 150)) for u in (rng.randrange(30) for _ in range(20))
        ]
    new = after[-1]
    assert (
        new != version
        and after.index(new) < 20
        and after[after.index(new) :] == [new] * (20 - after.index(new))
    )
    return version, new


def test_templated_prompts_are_one_version_and_a_real_change_opens_one(
    gateway: GatewayProcess, tmp_path: Path, mock_process: str
) -> None:
    rng = random.Random(34)
    version, new = traffic(gateway, rng)
    admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    listed = httpx.get(gateway.url + "/admin/rules/templates", headers=admin, timeout=5).json()
    (rule,) = listed["rules"]
    assert [v["version"] for v in rule["versions"]] == [new, version]  # junk opened nothing
    assert [v["rule_value"] for v in rule["versions"]] == ["150", "100"]
    assert rule["versions"][1]["template"]["slots"] == ["⟨customer⟩", "⟨total⟩"]
    wait_until(lambda: rule_labels(gateway.url) >= {version, new}, what="check metrics")
    assert rule_labels(gateway.url) <= {version, new, "pending"}  # no client's string

    # `mirrorgate rules` through the admin API, as an operator runs it.
    shown = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "rules", "support", "--url", gateway.url],
        check=False, capture_output=True, text=True, timeout=60,
        env={**os.environ, "MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert f"version {new}" in shown.stdout and f"version {version}" in shown.stdout
    assert "2 slots: ⟨customer⟩ ⟨total⟩" in shown.stdout
    assert "| Customer: ⟨customer⟩ <<email>>. Today is <date>." in shown.stdout

    # A restarted gateway reads the templates back: a new customer's first request carries it.
    gateway.terminate()
    env = {"MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    again = GatewayProcess(
        config(mock_process, f"sqlite:///{tmp_path / 'rules.db'}"), tmp_path, env
    )
    try:
        with openai.OpenAI(base_url=again.url + "/v1", api_key="k", max_retries=0) as client:
            assert ask(client, 77, prompt(77, rng, 150)) == new
            assert ask(client, 78, prompt(78, rng, 100)) == version
    finally:
        again.terminate()


def test_the_rules_page_shows_learned_slots_as_slots_in_the_prompt_diff(
    gateway: GatewayProcess, tmp_path: Path, console_browser: Browser
) -> None:
    traffic(gateway, random.Random(35))
    context = console_browser.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        sign_in(page, gateway.url, ADMIN_TOKEN, "/ui/rules")
        diff = page.locator("pre.diff").first
        slots = diff.locator(".slot")
        assert slots.count() == 2 and slots.first.inner_text() == "⟨customer⟩"
        assert (
            diff.locator(".del").inner_text().strip()
            == "Rules: max_weight = 100 kg. Answer in JSON."
        )
        assert (
            diff.locator(".add").inner_text().strip()
            == "Rules: max_weight = 150 kg. Answer in JSON."
        )
        assert page.get_by_text("2 slots (parts that vary per request)").count() >= 1
        page.screenshot(path=str(tmp_path / "rules-page.png"), full_page=True)
    finally:
        context.close()
