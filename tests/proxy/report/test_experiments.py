"""The report's experiment section: an experiment persisted with a real decision, then
`mirrorgate report` in Markdown and HTML shows per arm its units, each metric with its lift and
interval, the verdict, the decision in words and the sample-ratio check."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from analyzers.experiments import Unit, decide
from proxy.cli.main import main
from proxy.config import parse_config
from proxy.core import ExperimentState
from proxy.rollout import decision_json
from proxy.store import ExperimentStore
from proxy.store.exchanges import Store
from tests.conftest import seed_sqlite

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
DOC = {
    "models": {
        name: {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
        for name in ("prod", "cand")
    },
    "routes": {
        "bot": {
            "primary": "prod",
            "experiment": {
                "arms": {"control": {"model": "prod"}, "cheaper": {"model": "cand"}},
                "guardrails": ["cost_per_operation"],
                "minimum_detectable_effect": 0.05,
            },
        },
    },
}


def units(arm: str, n: int, completed: float, cost: float) -> list[Unit]:
    return [
        Unit(arm, 1, 1, 0, cost, completed=int(i < completed * n), outcomes=1) for i in range(n)
    ]


@pytest.fixture
def config(tmp_path: Path, migrated_sqlite: Path) -> Path:
    url = f"sqlite:///{tmp_path / 'mirrorgate.db'}"
    seed_sqlite(url, migrated_sqlite)
    doc = {**DOC, "store": {"url": url}}
    path = tmp_path / "mirrorgate.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec = parse_config(yaml.safe_dump(doc), env={}).routes["bot"].experiment
    assert spec is not None
    with Store(url) as store:
        store.migrate()
        experiments = ExperimentStore(store)
        state = ExperimentState(
            route="bot", experiment_id="e-report", running=True, weights=spec.shares(),
            control="control", fingerprint="f", started_at=T0, actor="alice",
            reason="is cand as good", models={"control": "prod", "cheaper": "cand"},
        )  # fmt: skip
        experiments.start(state)
        decision = decide(
            "completion_rate",
            ["cost_per_operation"],
            "control",
            {
                "control": units("control", 400, 0.5, 0.02),
                "cheaper": units("cheaper", 400, 0.7, 0.01),
            },
            mde=0.05,
            rate_per_s=1.0,
            weights=spec.shares(),
        )
        at = T0 + timedelta(minutes=10)
        experiments.save_decision("e-report", decision_json(decision, state, spec, at), at)
        experiments.stop("bot", actor="alice", reason="shipped", at=T0 + timedelta(minutes=20))
    return path


def test_markdown_shows_each_arm_its_lifts_and_the_decision(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--config", str(config)]) == 0
    text = capsys.readouterr().out
    section = text[text.index("### Experiment: bot") :]
    assert "Experiment e-report, control control" in section and "stopped" in section
    rows = [line for line in section.splitlines() if line.startswith("| cheaper")]
    assert rows and "| cand | 400 | 400 | completion_rate | 50.0% | 70.0% | +20.0 pts [" in rows[0]
    assert "| ship |" in rows[0]
    assert "cost_per_operation" in section and "-50 % [" in section
    assert "Sample ratio: in line with the weights" in section
    assert "Decision:" in section and "- cheaper" in section


def test_html_has_the_same_section_escaped(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--config", str(config), "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert "<h3>Experiment</h3>" in page
    assert '<table class="experiment" data-route="bot">' in page
    assert html.escape("+20.0 pts [") in page


def test_a_report_without_experiments_has_no_section(
    tmp_path: Path, migrated_sqlite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    seed_sqlite(url, migrated_sqlite)
    doc = {**DOC, "store": {"url": url}}
    path = tmp_path / "empty.yaml"
    path.write_text(yaml.safe_dump(doc))
    with Store(url) as store:
        store.migrate()
    assert main(["report", "--config", str(path)]) == 0
    assert "### Experiment" not in capsys.readouterr().out
