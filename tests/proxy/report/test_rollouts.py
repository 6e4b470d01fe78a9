"""The report's rollout section: a real rollout persisted through `RolloutStore`, then
`mirrorgate report` in Markdown and HTML."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from analyzers.verdicts import MetricVerdict, Outcome
from proxy.cli.main import main
from proxy.config import parse_config
from proxy.core import Action, RolloutState, initial_state, transition
from proxy.core.records import Arm, ExchangeRecord, Status
from proxy.report.rollouts import build_rollouts, describe_transition, describe_verdict
from proxy.store.exchanges import Store
from proxy.store.rollouts import RolloutStore
from tests.conftest import seed_sqlite

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
DOC = {
    "models": {
        name: {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
        for name in ("prod", "cand")
    },
    "routes": {
        "bot": {"primary": "prod", "canary": {"model": "cand", "steps": [10, 50, 100]}},
        "plain": {"primary": "prod"},
    },
}
SPEC = parse_config(yaml.safe_dump(DOC), env={}).routes["bot"]
EXAMPLE = "req-bad-1"


def verdict(metric: str, outcome: Outcome, estimate: float) -> MetricVerdict:
    return MetricVerdict(
        metric=metric,
        outcome=outcome,
        estimate=estimate,
        low=estimate - 0.01,
        high=estimate + 0.02,
        threshold=0.02,
        n_primary=400,
        n_candidate=60,
        alpha=0.05,
        reason=f"{metric} {outcome.value}",
    )


def seed_rollout(store: Store, route: str = "bot") -> None:
    """start (T0) → look 1 passes (T0+10) → advance (T0+11) → look 2 fails (T0+20) → rollback
    (T0+20, with the judge's evidence)."""
    rollouts = RolloutStore(store)

    def act(state: RolloutState, action: Action, minutes: int, actor: str, reason: str,
            evidence: dict[str, object] | None = None) -> RolloutState:  # fmt: skip
        change = transition(
            state, action, SPEC, now=T0 + timedelta(minutes=minutes), reason=reason, actor=actor
        )
        assert rollouts.commit(change, evidence)
        return change.after

    state = act(initial_state(route, SPEC), Action.START, 0, "alice", "ship cand")
    rollouts.add_verdicts(
        state, 1, [("", verdict("error_rate", Outcome.PASS, 0.001))], T0 + timedelta(minutes=10)
    )
    state = act(state, Action.ADVANCE, 11, "judge", "step 0 passed")
    failing = verdict("error_rate", Outcome.FAIL, 0.09)
    rollouts.add_verdicts(
        state,
        2,
        [("", failing), ("", verdict("latency_p95", Outcome.INCONCLUSIVE, 1.1))],
        T0 + timedelta(minutes=20),
    )
    evidence = {
        "look": 2,
        "verdicts": [
            {"scope": "", "metric": "error_rate", "verdict": "fail", "estimate": 0.09,
             "low": 0.08, "high": 0.11, "threshold": 0.02, "reason": "error_rate fail"},
            {"scope": "", "metric": "latency_p95", "verdict": "inconclusive", "estimate": 1.1,
             "low": None, "high": None, "threshold": 1.25, "reason": "needs more"},
        ],
        "example_request_ids": [EXAMPLE],
    }  # fmt: skip
    act(state, Action.ROLLBACK, 20, "judge", "error_rate failed", evidence)


def write_config(tmp_path: Path, url: str) -> Path:
    with Store(url) as store:
        store.migrate()
        seed_rollout(store)
    path = tmp_path / "mirrorgate.yaml"
    path.write_text(yaml.safe_dump({"store": {"url": url}, **DOC}))
    return path


@pytest.fixture
def config(tmp_path: Path, migrated_sqlite: Path) -> Path:
    url = f"sqlite:///{tmp_path / 'mirrorgate.db'}"
    seed_sqlite(url, migrated_sqlite)
    return write_config(tmp_path, url)


def report(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["report", "--config", str(config), *args]) == 0
    return capsys.readouterr().out


def section(markdown: str, heading: str) -> str:
    start = markdown.index(heading)
    end = markdown.find("\n#", start + len(heading))
    return markdown[start : end if end != -1 else None]


def test_markdown_lists_transitions_and_verdicts_in_time_order(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = section(report(config, capsys), "### Rollouts: bot")
    rows = [line for line in text.splitlines() if line.startswith("| 20")]
    whats = [row.split("|")[2].strip() for row in rows]
    assert whats == [
        "transition",
        "verdict, look 1",
        "transition",
        "verdict, look 2",
        "verdict, look 2",
        "**rollback**",
    ]
    times = [row.split("|")[1].strip() for row in rows]
    assert times == sorted(times)
    assert "pending → progressing (start, step 0, canary 10%)" in rows[0]
    assert "| alice | ship cand |" in rows[0]
    assert "progressing → progressing (advance, step 1, canary 50%)" in rows[2]
    assert "error_rate: fail, 0.09 (0.08 to 0.11) against 0.02" in rows[3]
    assert "progressing → rolled_back (rollback) | judge |" in rows[5]
    # The rollback's evidence: its reason, the verdicts that failed (only those), examples.
    assert "Rolled back at " in text and "error_rate failed" in text
    evidence = text[text.index("Rolled back at") :]
    assert "Failing verdicts: error_rate: fail" in evidence
    assert "latency_p95" not in evidence
    assert f"Example requests: {EXAMPLE}." in evidence


def test_the_history_reads_the_same_from_postgresql(
    tmp_path: Path, pg_schema: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, pg_schema[0])
    since = (T0 + timedelta(minutes=15)).isoformat()
    text = section(report(config, capsys, "--since", since), "### Rollouts: bot")
    whats = [line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| 20")]
    assert whats == ["verdict, look 2", "verdict, look 2", "**rollback**"]
    assert f"Example requests: {EXAMPLE}." in text


def test_a_route_without_rollouts_says_so_and_since_cuts_the_history(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The rollout has no exchanges: the route is reported for its rollout alone.
    assert "## Route bot" in report(config, capsys)
    since = (T0 + timedelta(minutes=15)).isoformat()
    text = section(report(config, capsys, "--since", since), "### Rollouts: bot")
    whats = [line.split("|")[2].strip() for line in text.splitlines() if line.startswith("| 20")]
    assert whats == ["verdict, look 2", "verdict, look 2", "**rollback**"]
    db_url = yaml.safe_load(config.read_text())["store"]["url"]
    with Store(db_url) as store:
        store.write_batch([live_exchange("plain")])
    text = report(config, capsys, "--route", "plain")
    assert "No rollout transitions or verdicts in this window." in section(
        text, "### Rollouts: plain"
    )


def live_exchange(route: str, **fields: object) -> ExchangeRecord:
    values: dict[str, object] = {
        "request_id": uuid.uuid4().hex,
        "route": route,
        "target": "prod",
        "upstream_model": "m",
        "arm": Arm.PRIMARY,
        "endpoint": "chat.completions",
        "provider": "openai",
        "streamed": False,
        "started_at": datetime.now(UTC) - timedelta(minutes=5),
        "duration_s": 0.2,
        "ttft_s": None,
        "overhead_s": 0.0,
        "status": Status.OK,
        "http_status": 200,
        "cost_usd": 0.0,
    }
    values.update(fields)
    return ExchangeRecord(**values)  # type: ignore[arg-type]


def test_html_draws_the_rollout_on_a_time_axis(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = report(config, capsys, "--format", "html")
    svg = re.search(r'<svg class="chart rollout"[^>]*data-route="bot".*?</svg>', page, re.S)
    assert svg is not None
    chart = svg.group(0)
    phases = re.findall(r'<rect class="phase phase-(\w+)"[^>]* x="([\d.]+)"', chart)
    assert [phase for phase, _ in phases] == ["progressing", "progressing", "rolled_back"]
    xs = [float(x) for _, x in phases]
    assert xs == sorted(xs) and xs[0] < xs[-1]
    # Transitions at 0, 11 and 20 minutes: the marks are spaced as the times are.
    marks = [
        float(x) for x in re.findall(r'<line class="transition[^"]*"[^>]*x1="([\d.]+)"', chart)
    ]
    assert len(marks) == 3
    assert (marks[1] - marks[0]) / (marks[2] - marks[0]) == pytest.approx(11 / 20, abs=0.01)
    assert chart.count('class="transition rollback"') == 1
    assert chart.count('class="verdict fail"') == 1
    assert chart.count('class="verdict pass"') == 1
    assert chart.count('class="verdict inconclusive"') == 1
    assert '<table class="rollout-events" data-route="bot">' in page
    assert 'class="rollback-evidence"' in page and EXAMPLE in page


def test_history_rows_become_reports_and_words() -> None:
    at = T0
    events: list[dict[str, Any]] = [
        {"route": "r", "action": "start", "from_phase": None, "to_phase": "progressing",
         "step": 0, "weight": 10.0, "actor": "bob", "reason": "go", "evidence": {}, "at": at},
        {"route": "r", "action": "rollback", "from_phase": "progressing",
         "to_phase": "rolled_back", "step": -1, "weight": 0.0, "actor": "judge", "reason": "bad",
         "evidence": {"verdicts": "not a list", "example_request_ids": [1, 2, 3, 4, 5, 6, 7]},
         "at": at + timedelta(minutes=1)},
    ]  # fmt: skip
    verdicts: list[dict[str, Any]] = [
        {"route": "r", "look": 1, "scope": "v2", "metric": "m", "verdict": "pass",
         "estimate": None, "low": None, "high": None, "threshold": None, "reason": "",
         "at": at + timedelta(seconds=30)},
    ]  # fmt: skip
    (rollout,) = build_rollouts(events, verdicts).values()
    assert [type(item).__name__ for item in rollout.timeline()] == [
        "TransitionReport", "VerdictReport", "TransitionReport",
    ]  # fmt: skip
    (rollback,) = rollout.rollbacks
    assert rollback.failed == () and rollback.examples == ("1", "2", "3", "4", "5")
    assert describe_transition(rollout.transitions[0]) == (
        "(none) → progressing (start, step 0, canary 10%)"
    )
    assert describe_verdict(rollout.verdicts[0]) == "m [v2]: pass"
    assert (rollout.first_at, rollout.last_at) == (at, at + timedelta(minutes=1))
