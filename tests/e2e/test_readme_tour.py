"""The README's "A five-minute tour" runs as written: its fenced blocks are read from README.md and
run for real — only the ports (free ones) and the scratch folder are substituted.

Block by block: the first (sh) starts the fake model and the gateway, as a new user would, and is
stopped by its process group at the end; the curl call answers 200 with exactly the mirrorgate
headers the tour lists; the feedback call, fed the request id and token curl printed, is recorded;
the `openai` and `anthropic` snippets run as written and each lands in the store. When the tour
changes shape (a block added, removed or reordered), the test fails and says so: update it with
the README.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import require_service, wait_until
from tests.e2e.conftest import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SCRATCH = 'cd "$(mktemp -d)"'
REQUEST_ID_PLACEHOLDER = "5d1c…"
TOKEN_PLACEHOLDER = "mgf1.1767225600.Jc3…"
# What each block of the tour must be, in order: its language and a line that says what it does.
SHAPE = [
    ("sh", "mirrorgate serve --config mirrorgate.yaml"),
    ("sh", "curl -si http://127.0.0.1:8080/v1/chat/completions"),
    ("sh", "curl -s http://127.0.0.1:8080/v1/feedback"),
    ("python", "from openai import OpenAI"),
    ("python", "from anthropic import Anthropic"),
]
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def tour_section() -> str:
    text = (REPO / "README.md").read_text()
    found = re.search(r"^## A five-minute tour\n(.*?)^## ", text, re.DOTALL | re.MULTILINE)
    assert found, "README.md has no '## A five-minute tour' section followed by another section"
    return found.group(1)


def tour_blocks(section: str) -> list[str]:
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    shape = [(lang, marker) for (lang, _), (_, marker) in zip(blocks, SHAPE, strict=False)]
    assert len(blocks) == len(SHAPE) and shape == [(lang, m) for lang, m in SHAPE], (
        "the tour's fenced blocks changed shape; update tests/e2e/test_readme_tour.py with it: "
        f"{[lang for lang, _ in blocks]}"
    )
    for (_, body), (_, marker) in zip(blocks, SHAPE, strict=True):
        assert marker in body, f"a tour block no longer contains {marker!r}"
    return [body for _, body in blocks]


def with_ports(text: str, mock_port: int, gateway_port: int) -> str:
    return re.sub(r"\b8080\b", str(gateway_port), re.sub(r"\b9999\b", str(mock_port), text))


def run_sh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def rows(database: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(database) as db:
        try:
            return db.execute(query).fetchall()
        except sqlite3.OperationalError:  # the gateway has not created the table yet
            return []


@pytest.fixture
def curl() -> str:
    found = shutil.which("curl")
    require_service("curl", found is not None, "the tour's curl steps need it")
    assert found is not None
    return found


def test_the_readme_tour_runs_as_written(tmp_path: Path, curl: str) -> None:
    section = tour_section()
    start, ask, feedback, openai_snippet, anthropic_snippet = tour_blocks(section)
    mock_port, gateway_port = free_port(), free_port()
    gateway = f"http://127.0.0.1:{gateway_port}"
    assert (REPO / ".venv/bin/mirrorgate").exists(), "the tour needs `make install` (.venv)"
    repo_files = {name: (REPO / name).exists() for name in ("mirrorgate.yaml", "mirrorgate.db")}

    # 1. The fake model and the gateway, in the tour's scratch folder (ours, to look inside).
    assert start.count(SCRATCH) == 1, f"the tour no longer starts with {SCRATCH}"
    script = with_ports(start, mock_port, gateway_port).replace(SCRATCH, f"cd '{tmp_path}'")
    log = tmp_path.parent / f"{tmp_path.name}-tour.log"
    with log.open("wb") as out:
        first_terminal = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:

        def healthy() -> bool:
            if first_terminal.poll() is not None:
                pytest.fail(f"the tour's first block exited with {first_terminal.returncode}:\n"
                            + log.read_text(errors="replace"))  # fmt: skip
            try:
                return httpx.get(gateway + "/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout_s=60, what="the tour's gateway on /healthz")
        printed = log.read_text(errors="replace")
        mock_url = f"http://127.0.0.1:{mock_port}"
        assert (
            f"mirrorgate mock-upstream listening on {mock_url} "
            f"(OpenAI base_url {mock_url}/v1, Anthropic base_url {mock_url})"
        ) in printed, printed
        assert (tmp_path / "mirrorgate.yaml").exists()
        database = tmp_path / "mirrorgate.db"

        # 2. curl: 200, with exactly the mirrorgate headers the tour lists, as many as it says.
        answer = run_sh(with_ports(ask, mock_port, gateway_port))
        assert answer.returncode == 0, answer.stderr
        head, _, body = answer.stdout.replace("\r\n", "\n").partition("\n\n")
        assert head.splitlines()[0].split()[1] == "200", answer.stdout
        headers = dict(
            (name.strip().lower(), value.strip())
            for name, value in (line.split(":", 1) for line in head.splitlines()[1:])
        )
        got = sorted(name for name in headers if name.startswith("x-mirrorgate-"))
        listed = sorted(re.findall(r"^# (x-mirrorgate-[\w-]+):", ask, re.MULTILINE))
        assert got == listed, (got, listed)
        said = re.search(r"plus (\w+) mirrorgate headers", section)
        assert said and NUMBERS[said.group(1)] == len(listed), "the tour miscounts its headers"
        assert headers["x-mirrorgate-arm"] == "primary"
        assert json.loads(body)["choices"][0]["message"]["content"]
        request_id = headers["x-mirrorgate-request-id"]
        token = headers["x-mirrorgate-feedback-token"]

        # The feedback call, with the id and token curl printed in place of the placeholders.
        assert REQUEST_ID_PLACEHOLDER in feedback and TOKEN_PLACEHOLDER in feedback
        posted = run_sh(
            with_ports(feedback, mock_port, gateway_port)
            .replace(REQUEST_ID_PLACEHOLDER, request_id)
            .replace(TOKEN_PLACEHOLDER, token)
        )
        assert posted.returncode == 0, posted.stderr
        assert json.loads(posted.stdout)["request_id"] == request_id, posted.stdout
        recorded = rows(database, "select request_id, corrected, correction from feedback")
        assert recorded == [(request_id, 1, "It is in Lyon.")]

        # 3. The SDK snippets, as written (their base_url differs only by the port).
        for snippet, route in ((openai_snippet, "support-bot"), (anthropic_snippet, "claude-bot")):
            code = with_ports(snippet, mock_port, gateway_port)
            assert f"http://127.0.0.1:{gateway_port}" in code
            ran = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                check=False, cwd=tmp_path,
            )  # fmt: skip
            assert ran.returncode == 0, (route, ran.stderr)
            assert ran.stdout.strip(), route

        # 4. What was recorded: one exchange per call, each by its route's model, in the scratch
        # folder's database.
        query = "select route, target, arm, status from exchanges order by id"
        expected = [
            ("support-bot", "prod", "primary", "ok"),
            ("support-bot", "prod", "primary", "ok"),
            ("claude-bot", "claude", "primary", "ok"),
        ]
        wait_until(lambda: len(rows(database, query)) >= 3, timeout_s=30, what="3 exchanges")
        assert rows(database, query) == expected
        assert rows(database, "select request_id from exchanges order by id")[0] == (request_id,)
    finally:
        if first_terminal.poll() is None:
            os.killpg(first_terminal.pid, signal.SIGTERM)  # the group of the shell we started
        try:
            first_terminal.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(first_terminal.pid, signal.SIGKILL)
            first_terminal.wait()
    # The tour wrote nothing into the repository.
    assert {name: (REPO / name).exists() for name in repo_files} == repo_files
