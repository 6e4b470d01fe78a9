"""`make screenshots`: PNGs of every console page at 1280 and 390 px into docs/console/.

Starts the fake model and a gateway on 127.0.0.1 (route `bot` of the rollout tests, bodies kept,
a fresh SQLite store), drives a real rollback through it (the stale canary keeps an old rule),
signs in with the admin token (and a reviewer token for the review page) in Debian's Chromium,
and photographs each page of PAGES. Add a page by adding a line to PAGES. Every process it
starts is stopped by its PID.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import BEHAVIOR  # noqa: E402
from tests.e2e.conftest import ADMIN, ADMIN_TOKEN, free_port  # noqa: E402
from tests.e2e.console_browser import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    REVIEWER_TOKENS,
    console_config,
)
from tests.rollout_scene import rule_request  # noqa: E402

OUT = ROOT / "docs" / "console"
PAGES = [
    # (file name, path, who signs in: "admin" or "reviewer")
    ("signin", "/ui/signin", None),
    ("rollouts", "/ui/rollouts", "admin"),
    ("rollout", "/ui/rollouts/bot", "admin"),
    ("confirm", "/ui/rollouts/bot/confirm?action=restore", "admin"),
    ("rules", "/ui/rules", "admin"),
    ("experiments", "/ui/experiments", "admin"),
    ("review", "/ui/review", "reviewer"),
]
WIDTHS = {"1280": {"width": 1280, "height": 900}, "390": {"width": 390, "height": 844}}


def _wait(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the process exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def _rollback(url: str) -> None:
    with httpx.Client(base_url=url, timeout=10) as client:
        client.post("/admin/rollouts/bot/start", headers=ADMIN, json={}).raise_for_status()
        for i in range(60):
            client.post("/v1/chat/completions", **rule_request(f"user-{i % 40}"))
        for i in range(600):
            client.post("/v1/chat/completions", **rule_request(f"user-{i % 40}", "v2", 150))
            phase = client.get("/admin/rollouts/bot", headers=ADMIN).json()["phase"]
            if phase == "rolled_back":
                return
    raise SystemExit("the canary was not rolled back")


def _optimise(path: Path) -> None:
    if importlib.util.find_spec("PIL") is None:
        return
    from PIL import Image  # noqa: PLC0415 - optional: the PNGs are kept as they are without it

    with Image.open(path) as image:
        image.convert("P", palette=Image.Palette.ADAPTIVE, colors=128).save(path, optimize=True)


def main() -> None:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - a dev dependency only

    OUT.mkdir(parents=True, exist_ok=True)
    started: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        try:
            behavior = work / "behavior.yaml"
            behavior.write_text(yaml.safe_dump({**BEHAVIOR, "record_requests": False}))
            mock_port, port = free_port(), free_port()
            mock = subprocess.Popen(
                [sys.executable, "-m", "proxy.cli", "mock-upstream", "--port", str(mock_port),
                 "--behavior", str(behavior)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            started.append(mock)
            _wait(f"http://127.0.0.1:{mock_port}/_mock/stats", mock)
            config = console_config(f"http://127.0.0.1:{mock_port}", f"sqlite:///{work / 'c.db'}")
            config["server"] = {"port": port}
            (work / "c.yaml").write_text(yaml.safe_dump(config))
            env = {**os.environ, "MIRRORGATE_ADMIN_TOKEN": ADMIN_TOKEN,
                   "MIRRORGATE_REVIEWER_TOKENS": ",".join(REVIEWER_TOKENS)}  # fmt: skip
            gateway = subprocess.Popen(
                [sys.executable, "-m", "proxy.cli", "serve", "--config", str(work / "c.yaml")],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            started.append(gateway)
            url = f"http://127.0.0.1:{port}"
            _wait(url + "/readyz", gateway)
            _rollback(url)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
                )
                tokens = {"admin": ADMIN_TOKEN, "reviewer": REVIEWER_TOKENS[0]}
                contexts = {}
                for who, token in tokens.items():
                    contexts[who] = browser.new_context()
                    page = contexts[who].new_page()
                    page.goto(url + "/ui/signin")
                    page.locator("#token").fill(token)
                    page.keyboard.press("Enter")
                    page.wait_for_url(lambda address: "/ui/signin" not in address)
                anonymous = browser.new_context()
                for name, path, who in PAGES:
                    context = contexts[who] if who is not None else anonymous
                    page = context.new_page()
                    for width, viewport in WIDTHS.items():
                        page.set_viewport_size(viewport)
                        page.goto(url + path)
                        target = OUT / f"{name}-{width}.png"
                        page.screenshot(path=str(target), full_page=True)
                        _optimise(target)
                        print(target.relative_to(ROOT))
                    page.close()
                browser.close()
        finally:
            for proc in reversed(started):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)


if __name__ == "__main__":
    main()
