"""`mirrorgate demo` runs the whole scene with no setup and stops cleanly."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def test_demo_serves_traffic_and_exits_cleanly() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "demo", "--port", "0", "--duration", "4"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "/metrics" in out and "/readyz" in out
    counts = [int(n) for n in re.findall(r"requests\s+(\d+)\s+errors\s+0", out)]
    assert counts and counts[-1] > 0, out
    assert "stopped cleanly" in out
    assert "Traceback" not in done.stderr
