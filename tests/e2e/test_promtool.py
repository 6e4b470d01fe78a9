"""prometheus/mirrorgate-rules.yml through Debian's promtool, a real process: the rules are
valid and their unit tests pass, and fail when a threshold is loosened."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.prometheus.test_alert_rules import RULE_TESTS, RULES, alerts

pytestmark = pytest.mark.e2e


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    require_service("promtool", binary is not None, "apt-get install prometheus")
    assert binary is not None
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, check=False)


def test_promtool_accepts_the_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_catch_a_broken_threshold(tmp_path: Path) -> None:
    # The unit tests are a claim that can fail: loosen one threshold and they must say so.
    broken = RULES.read_text().replace("> 0.05\n", "> 0.5\n")
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    result = promtool("test", "rules", str(tmp_path / RULE_TESTS.name))
    assert result.returncode != 0
    assert "alertname: MirrorgateHighErrorRate" in result.stdout + result.stderr
