"""`mirrorgate demo` tells the whole story with no setup and stops cleanly."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def _demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", "demo", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_story_climbs_the_steps_then_rolls_back_after_the_rule_change() -> None:
    done = _demo()
    out = done.stdout
    assert done.returncode == 0, done.stderr + out
    assert "Traceback" not in done.stderr
    # The canary climbs every step on the judge's word before the rule changes...
    climbs = re.findall(r">> canary at (\d+)%\s+by (\w+)", out)
    assert climbs == [("10", "operator"), ("25", "judge"), ("50", "judge")], out
    assert out.index(">> canary at 50%") < out.index("the business rule changes")
    # ...then the new rule version's check fails on the canary only, and the judge rolls back.
    # The first failing look warns; the next one rolls back.
    warning = re.search(
        r"!! warning alert sent: canary new-model of route support-bot is failing", out
    )
    assert warning, out
    rollback = re.search(
        r"ROLLED BACK ([\d.]+)s after the rule changed: canary 'new-model' at 0%; "
        r"the primary 'prod' serves every user again",
        out,
    )
    assert rollback, out
    assert warning.start() < rollback.start()
    assert "check_pass_rate:max-weight failed on rule shipping-policy version v2" in out
    assert re.search(r"candidate passes 0% \(0/\d+\), primary 100%", out)
    alert = re.search(
        r"alert\s+-> webhook: \[critical\] rule_regression rule=shipping-policy version=v2 "
        r"check=max-weight\s+example requests: ([0-9a-f]{32})",
        out,
    )
    assert alert, out
    # The summary lists every phase with its timestamp, in order.
    summary = out[out.index("What happened") :]
    phases = re.findall(r"\d\d:\d\d:\d\d\.\d{3}\s+(\w+)\s+-> (\w+)\s+(\d+)%\s+(\w+)", summary)
    assert phases == [
        ("pending", "progressing", "10", "operator"),
        ("progressing", "progressing", "25", "judge"),
        ("progressing", "progressing", "50", "judge"),
        ("progressing", "rolled_back", "0", "judge"),
    ], summary
    assert "Now: phase rolled_back to primary, serving prod." in out
    assert re.search(r"Answers by arm: canary \d+, primary \d+$", out, re.MULTILINE)
    assert "stopped cleanly" in out
    assert "Next: `mirrorgate demo --scene guard`" in out


def test_a_short_demo_still_exits_cleanly() -> None:
    done = _demo("--duration", "3")
    assert done.returncode == 0, done.stderr
    assert "/metrics" in done.stdout and "stopped cleanly" in done.stdout
    assert "What happened" in done.stdout
