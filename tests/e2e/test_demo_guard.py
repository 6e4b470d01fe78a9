"""`mirrorgate demo --scene guard` as a real process: what it prints and the store it leaves.

Act 1: rule-flip probes find `cand-a` stuck on the old rule while `prod` follows, and the judge
rolls the canary back on `rule_adaptation`. Act 2: after a rule change the guard switches
`returns-bot` from the memorising `legacy` to `safe`, whose answers are then arm fallback."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def scene() -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "demo", "--scene", "guard", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    found = re.search(r"records\s+(\S+\.db)", done.stdout)
    assert found, done.stdout + done.stderr
    yield done, Path(found.group(1))


def rows(db: Path, query: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return conn.execute(query).fetchall()


def test_the_scene_exits_cleanly(scene: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, _ = scene
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert "stopped cleanly" in done.stdout


def test_act_1_the_judge_refuses_the_canary_on_rule_adaptation(
    scene: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, db = scene
    out = done.stdout
    assert re.search(r"CANARY REFUSED [\d.]+s after it started", out), out
    assert re.search(r"verdict\s+rule_adaptation \(probes:shipping-policy\): fail", out), out
    assert re.search(r"asked (150|175), answered 100", out), out
    assert re.search(r"example probe requests: [0-9a-f]{32}", out), out
    # The score per target, as GET /admin/rules gives it: cand-a stuck, prod following.
    cand = re.search(r"cand-a\s+adaptation\s+(\d+)%", out)
    prod = re.search(r"prod\s+adaptation\s+(\d+)%", out)
    assert cand and prod, out
    assert int(cand.group(1)) <= 10 and int(prod.group(1)) >= 90, out
    # The store: the judge's rollback, on rule_adaptation, before any rule changed.
    events = rows(
        db,
        "SELECT action, to_phase, actor, reason FROM rollout_events "
        "WHERE route = 'support-bot' ORDER BY revision",
    )
    assert [e[:3] for e in events] == [
        ("start", "progressing", "operator"),
        ("rollback", "rolled_back", "judge"),
    ], events
    assert str(events[-1][3]).startswith("rule_adaptation failed on rule shipping-policy"), events
    probes = dict(
        ((target, result), n)
        for target, result, n in rows(
            db,
            "SELECT target, result, count(*) FROM probe_results "
            "WHERE rule = 'shipping-policy' GROUP BY target, result",
        )
    )
    stuck, followed = probes.get(("cand-a", "stuck"), 0), probes.get(("prod", "followed"), 0)
    assert stuck >= 30 and probes.get(("cand-a", "followed"), 0) <= stuck // 10, probes
    assert followed >= 30 and probes.get(("prod", "stuck"), 0) == 0, probes


def test_act_2_the_guard_switches_returns_bot_to_safe(
    scene: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, db = scene
    out = done.stdout
    switched = re.search(r"SWITCHED ([\d.]+)s after the rule changed: route 'returns-bot' is "
                         r"served by 'safe' as arm fallback", out)  # fmt: skip
    assert switched, out
    assert out.index("the business rule changes on returns-bot") < switched.start()
    assert re.search(r"\[critical\] rule_regression rule=returns-policy version=v2", out), out
    assert re.search(r"candidate cand-a\s+\d+/\d+ compliant", out), out
    assert "mirrorgate rollout restore returns-bot" in out
    # The store: one transition by the guard, and from it on, safe answers as arm fallback.
    events = rows(
        db,
        "SELECT action, to_phase, actor, created_at FROM rollout_events "
        "WHERE route = 'returns-bot' ORDER BY revision",
    )
    assert [e[:3] for e in events] == [("rollback", "rolled_back", "guard")], events
    decisions = rows(
        db, "SELECT rule, version, outcome, model FROM guard_decisions WHERE route = 'returns-bot'"
    )
    assert decisions == [("returns-policy", "v2", "switched", "safe")], decisions
    fallback = rows(
        db,
        "SELECT target, count(*), min(started_at) FROM exchanges "
        "WHERE route = 'returns-bot' AND arm = 'fallback' GROUP BY target",
    )
    assert len(fallback) == 1 and fallback[0][0] == "safe" and int(str(fallback[0][1])) >= 3
    switch_at = str(events[0][3])[:23].replace("T", " ")
    assert str(fallback[0][2])[:23].replace("T", " ") >= switch_at[:19], (fallback, events)
    answers = re.search(r"returns-bot answers: (.*)$", out, re.MULTILINE)
    assert answers and "fallback said 150" in answers.group(1), out
    assert "fallback said 100" not in answers.group(1), out


def test_a_short_scene_honours_duration_and_says_what_did_not_happen() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "demo", "--scene", "guard", "--port", "0",
         "--duration", "3", "--restore"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    assert "the canary was not refused in this run" in done.stdout
    assert "no switch in this run" in done.stdout
    assert "mirrorgate rollout restore returns-bot" in done.stdout  # nothing to restore: shown
    assert "stopped cleanly" in done.stdout


def test_ctrl_c_ends_the_scene_cleanly() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "demo", "--scene", "guard", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        for line in process.stdout:  # the story has begun once the canary is started
            if "$ mirrorgate rollout start support-bot" in line:
                break
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "What happened:" in rest and "stopped cleanly" in rest
    assert "Traceback" not in err
