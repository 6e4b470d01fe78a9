"""`mirrorgate report`: corrections and ratings per arm, from a real SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from proxy.core.records import Arm, ExchangeRecord, FeedbackRecord, Status
from proxy.store.exchanges import Store
from proxy.store.feedback import FeedbackStore
from tests.conftest import seed_sqlite
from tests.proxy.report.test_checks import rows_under
from tests.proxy.report.test_command import exchange, report, table_row

NOW = datetime.now(UTC)


@pytest.fixture
def setup(tmp_path: Path, migrated_sqlite: Path) -> Iterator[tuple[Path, Store]]:
    """A config naming a fresh, migrated SQLite store; yields (config path, store)."""
    db = tmp_path / "mirrorgate.db"
    seed_sqlite(f"sqlite:///{db}", migrated_sqlite)
    config = tmp_path / "mirrorgate.yaml"
    config.write_text(
        f'store: {{url: "sqlite:///{db}"}}\n'
        'models: {prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m}}\n'
        "routes: {bot: {primary: prod}}\n"
    )
    with Store(f"sqlite:///{db}") as store:
        store.migrate()
        yield config, store


def served(count: int, **fields: Any) -> list[ExchangeRecord]:
    return [exchange(**fields) for _ in range(count)]


def give(store: Store, answer: ExchangeRecord, kind: str, **fields: Any) -> None:
    """Feedback on `answer`, joined to it as `proxy.api.feedback` does."""
    values: dict[str, Any] = {
        "request_id": answer.request_id,
        "kind": kind,
        "route": answer.route,
        "target": answer.target,
        "arm": answer.arm,
        "created_at": NOW - timedelta(minutes=1),
        "rule": answer.rule,
        "rule_version": answer.rule_version,
    }
    values.update(fields)
    assert FeedbackStore(store).add(FeedbackRecord(**values))


def test_correction_rate_and_scores_per_arm_and_rule_version(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    rule = {"rule": "policy"}
    v1 = served(10, **rule, rule_version="v1", started_at=NOW - timedelta(minutes=50))
    v2 = served(10, **rule, rule_version="v2", started_at=NOW - timedelta(minutes=20))
    canary = served(
        5,
        **rule,
        rule_version="v2",
        arm=Arm.CANARY,
        target="cand-b",
        started_at=NOW - timedelta(minutes=20),
    )
    # Never delivered (the client left): not an answer served, its feedback is not counted.
    gone = exchange(**rule, rule_version="v2", status=Status.CLIENT_DISCONNECTED, http_status=0)
    shadows = served(5, **rule, rule_version="v2", arm=Arm.SHADOW, target="cand-a")
    # The LLM judge's calls answer no user either (same request ids as the answers they judge).
    judge_calls = [exchange(request_id=a.request_id, arm=Arm.JUDGE, target="judge-model")
                   for a in v2[:2]]  # fmt: skip
    store.write_batch([*v1, *v2, *canary, gone, *shadows, *judge_calls])

    give(store, v1[0], "correction", corrected=True)
    give(store, v1[1], "correction", corrected=True, correction="150 kg")
    give(store, v1[2], "correction", corrected=False)  # "this answer was right": not a correction
    give(store, v2[0], "correction", corrected=True)
    for answer, score in zip(v2, (4, 5, 3), strict=False):
        give(store, answer, "score", score=score)
    give(store, canary[0], "correction", corrected=True)
    give(store, canary[1], "correction", corrected=True)
    give(store, canary[0], "score", score=2)
    give(store, canary[1], "score", score=1)
    give(store, canary[0], "label", label="wrong-policy")
    give(store, canary[1], "label", label="wrong-policy")
    give(store, gone, "correction", corrected=True)

    code, out, _ = report(config, capsys)
    assert code == 0
    assert "feedback: 14" in out
    rows = rows_under(out, "### Corrections and ratings: bot")
    assert [(r["arm · target"], r["rule version"]) for r in rows] == [
        ("primary · prod", "v1"),
        ("primary · prod", "v2"),
        ("canary · cand-b", "v2"),
    ]  # versions in order of first appearance; shadows and judge calls serve no one
    old, new, cand = rows
    assert (old["answers"], old["corrected"]) == ("10", "2")
    assert old["correction rate (95% CI)"] == "20.0% [5.7, 51.0]"  # 2 of 10, Wilson
    assert (old["scores"], old["mean score"]) == ("0", "—")
    assert (new["answers"], new["corrected"]) == ("10", "1")  # `gone` is not an answer served
    assert new["correction rate (95% CI)"] == "10.0% [1.8, 40.4]"
    assert (new["scores"], new["mean score"]) == ("3", "4.00")  # (4 + 5 + 3) / 3
    assert cand["correction rate (95% CI)"] == "40.0% [11.8, 76.9]"  # 2 of 5
    assert (cand["scores"], cand["mean score"], cand["labels"]) == ("2", "1.50", "wrong-policy 2")
    assert "Not counted: 1 feedback records about answers not served in this window" in out


def test_without_rule_versions_there_is_one_row_per_arm(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    answers = served(4)
    store.write_batch(answers)
    give(store, answers[0], "correction", corrected=True)
    _, out, _ = report(config, capsys)
    row = table_row(out, "primary · prod")  # the arm table's row comes first
    assert row["requests"] == "4"
    rows = rows_under(out, "### Corrections and ratings: bot")
    assert len(rows) == 1
    assert "rule version" not in rows[0]
    assert rows[0]["correction rate (95% CI)"] == "25.0% [4.6, 69.9]"  # 1 of 4


def test_a_correction_is_what_the_judge_and_the_metrics_call_one(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    answers = served(5)
    store.write_batch(answers)
    # Stored as an older gateway stored it: a correction text, the flag left unset.
    give(store, answers[0], "correction", corrected=False, correction="150 kg")
    give(store, answers[1], "correction", corrected=False)  # "this answer was right"
    give(store, answers[2], "correction", corrected=False, correction="")
    _, out, _ = report(config, capsys)
    (row,) = rows_under(out, "### Corrections and ratings: bot")
    assert (row["answers"], row["corrected"]) == ("5", "1")


def test_since_drops_older_feedback_and_an_empty_section_says_so(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    old = exchange(started_at=NOW - timedelta(days=2))
    store.write_batch([old, *served(3)])
    give(store, old, "correction", corrected=True, created_at=NOW - timedelta(days=2))
    _, out, _ = report(config, capsys, "--since", "1h")
    assert "feedback: 0" in out
    assert "No corrections or ratings in this window (3 answers served)." in out
    _, page, _ = report(config, capsys, "--format", "html", "--since", "1h")
    assert "No corrections or ratings in this window (3 answers served)." in page
    assert 'class="corrections"' not in page

    _, page, _ = report(config, capsys, "--format", "html")
    assert '<table class="corrections" data-route="bot">' in page
    assert "25.0%" in page  # 1 of the 4 answers
