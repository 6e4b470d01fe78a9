"""`make screenshots`: PNGs of every console page at 1280 and 390 px into docs/console/.

Starts the fake model and a gateway on 127.0.0.1 (route `bot` of the rollout tests, shadowed by
its canary model, bodies kept; route `support` with a two-arm experiment; a fresh SQLite store),
drives a real rollback through it (the stale canary keeps an old rule), writes the review
browser test's pairs into the store (`tests.review_scene`), starts the experiment through the
admin API and runs operations with their outcomes through it until the decision has numbers,
signs in with the admin token (and a reviewer token for the review page) in Debian's Chromium,
and photographs each page of PAGES. Add a page by adding a line to PAGES. Every process it
starts is stopped by its PID.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.store.exchanges import Store  # noqa: E402
from tests.conftest import BEHAVIOR  # noqa: E402
from tests.e2e.conftest import ADMIN, ADMIN_TOKEN, free_port  # noqa: E402
from tests.e2e.console_browser import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    REVIEWER_TOKENS,
    console_config,
)
from tests.review_scene import review_pairs  # noqa: E402
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
    ("experiment", "/ui/experiments/support", "admin"),
    ("review", "/ui/review", "reviewer"),
]
EXPERIMENT: dict[str, Any] = {
    "arms": {"control": {"model": "rule-follower"}, "cheaper": {"model": "echo"}},
    "unit": "operation",
    "primary_metric": "completion_rate",
    "guardrails": ["error_rate"],
    "minimum_detectable_effect": 0.1,
    "interval_s": 0.5,
    "min_units": 20,
}
"""Route `support`'s experiment: the application completes 60 % of control's operations and
80 % of cheaper's (`_experiment`)."""
COMPLETION = {"control": 0.6, "cheaper": 0.8}
OPERATIONS = 240
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


def _experiment(url: str) -> None:
    """Start route `support`'s experiment through the admin API, run OPERATIONS operations of one
    call each through it and post each one's outcome, then wait for a decision with numbers."""
    draw = random.Random(16)
    with httpx.Client(base_url=url, timeout=10) as client:
        started = client.post(
            "/admin/experiments/support/start", headers=ADMIN, json={"reason": "which arm"}
        )
        started.raise_for_status()
        for n in range(OPERATIONS):
            operation = f"ticket-{n}"
            answer = client.post(
                "/v1/chat/completions",
                headers={"x-mirrorgate-operation": operation},
                json={"model": "support", "messages": [
                    {"role": "user", "content": "Where is my parcel?"}]},
            )  # fmt: skip
            answer.raise_for_status()
            arm = answer.headers.get("x-mirrorgate-experiment-arm", "control")
            completed = draw.random() < COMPLETION.get(arm, 0.5)
            client.post(
                "/v1/outcomes", json={"operation_id": operation, "completed": completed}
            ).raise_for_status()
        deadline, status = time.monotonic() + 30, {}
        while time.monotonic() < deadline:
            status = client.get("/admin/experiments/support", headers=ADMIN).json()
            decision = status.get("decision") or {}
            arms = decision.get("arms") or []
            units = decision.get("control_units", 0) + sum(a["units"] for a in arms)
            if units >= OPERATIONS and all(a["lifts"] for a in arms):
                return
            time.sleep(0.2)
    raise SystemExit(f"the experiment has no decision: {status}")


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
            config["routes"]["bot"]["shadows"] = [{"model": "stale", "sample": 0.0}]
            config["routes"]["support"] = {"primary": "rule-follower", "experiment": EXPERIMENT}
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
            with Store(f"sqlite:///{work / 'c.db'}") as store:
                store.write_batch(review_pairs(datetime.now(UTC), markup_first=False))
            _experiment(url)
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
