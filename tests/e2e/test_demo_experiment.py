"""`mirrorgate demo --scene experiment` as a real process: the decision arrives live, names the
right arm (the script's true completion rates make `cheaper` better and `terse` worse), and the
store it leaves holds the experiment and its decision."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_the_scene_decides_for_the_better_arm() -> None:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "demo", "--scene", "experiment", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    took = time.monotonic() - began
    print(f"the experiment scene took {took:.1f}s end to end")  # timed, never asserted
    out = done.stdout
    assert done.returncode == 0, done.stderr + out
    assert "Traceback" not in done.stderr
    decided = re.search(r"DECISION after ([\d.]+)s and (\d+) operations: ship cheaper", out)
    assert decided, out
    print(f"decision after {decided.group(1)}s, {decided.group(2)} operations")
    assert "terse is worse" in out or "terse is stopped" in out
    assert re.search(r"cheaper: completion \+[\d.]+ pts \[.*\].*ship it", out), out
    found = re.search(r"records stay in (\S+\.db)", out)
    assert found, out
    with closing(sqlite3.connect(f"file:{Path(found.group(1))}?mode=ro", uri=True)) as conn:
        ((state, decision),) = conn.execute("SELECT state, decision FROM experiments").fetchall()
        arms = conn.execute(
            "SELECT DISTINCT experiment_arm FROM exchanges WHERE experiment_arm IS NOT NULL"
        ).fetchall()
    assert state == "stopped"
    verdicts = {a["arm"]: a["verdict"] for a in json.loads(decision)["arms"]}
    assert verdicts["cheaper"] == "ship"
    assert {a for (a,) in arms} == {"control", "cheaper", "terse"}
