"""`mirrorgate report`: rule checks by rule version, from a real SQLite store."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from proxy.core.records import Arm, CheckRecord
from proxy.report.format import format_time
from proxy.store.exchanges import Store
from tests.conftest import seed_sqlite
from tests.proxy.report.test_command import exchange, report

NOW = datetime.now(UTC)
RULE = "policy"


@pytest.fixture
def setup(tmp_path: Path, migrated_sqlite: Path) -> Iterator[tuple[Path, Store]]:
    """A config naming a fresh, migrated SQLite store; yields (config path, store)."""
    db = tmp_path / "mirrorgate.db"
    seed_sqlite(f"sqlite:///{db}", migrated_sqlite)
    config = tmp_path / "mirrorgate.yaml"
    config.write_text(
        f'store: {{url: "sqlite:///{db}"}}\n'
        'models: {prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m}}\n'
        "routes: {bot: {primary: prod}, other: {primary: prod}}\n"
    )
    with Store(f"sqlite:///{db}") as store:
        store.migrate()
        yield config, store


def rule_event(store: Store, version: str, previous: str | None, at: datetime) -> None:
    """A rule-change event, inserted as `proxy.store.RuleEventStore` writes it."""
    table = sa.table(
        "rule_events",
        sa.column("rule"),
        sa.column("version"),
        sa.column("previous_version"),
        sa.column("first_seen_at", sa.DateTime(timezone=True)),
        sa.column("request_id"),
        sa.column("route"),
        sa.column("prompt_diff"),
    )
    row = {
        "rule": RULE,
        "version": version,
        "previous_version": previous,
        "first_seen_at": at,
        "request_id": f"first-{version}",
        "route": "bot",
        "prompt_diff": None,
    }
    with store.engine.begin() as conn:
        conn.execute(sa.insert(table), [row])


def checks(
    version: str, check: str, arm: Arm, target: str, at: datetime, **results: int
) -> list[CheckRecord]:
    """`results` counts per verdict: pass_=3, fail=1, error=1."""
    return [
        CheckRecord(
            request_id=f"req-{version}-{check}-{target}-{result}-{i}",
            route="bot",
            target=target,
            arm=arm,
            rule=RULE,
            rule_version=version,
            check=check,
            result=result.rstrip("_"),
            reason="",
            created_at=at,
            pair_id="p" if arm is Arm.SHADOW else None,
        )
        for result, count in results.items()
        for i in range(count)
    ]


def rows_under(markdown: str, heading: str) -> list[dict[str, str]]:
    """Every row of the first table after `heading`, keyed by column name."""
    lines = markdown.splitlines()
    start = lines.index(heading)
    header = next(i for i in range(start, len(lines)) if lines[i].startswith("| "))
    names = [cell.strip() for cell in lines[header].strip("|").split("|")]
    rows = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def find(rows: list[dict[str, str]], check: str, label: str) -> dict[str, str]:
    return next(r for r in rows if r["check"] == check and r["arm · target"] == label)


@pytest.fixture
def two_versions(setup: tuple[Path, Store]) -> Path:
    """Rule `policy` changes from v1 (2 h ago) to v2 (1 h ago), then v3 (5 min ago, unchecked)."""
    config, store = setup
    v1_at, v2_at = NOW - timedelta(hours=2), NOW - timedelta(hours=1)
    rule_event(store, "v1", None, v1_at)
    rule_event(store, "v2", "v1", v2_at)
    rule_event(store, "v3", "v2", NOW - timedelta(minutes=5))
    early, late = NOW - timedelta(minutes=90), NOW - timedelta(minutes=30)
    store.write_batch(
        [
            exchange(rule=RULE, rule_version="v2"),
            *checks("v1", "no-pii", Arm.PRIMARY, "prod", early, pass_=8, fail=2),
            *checks("v1", "no-pii", Arm.SHADOW, "cand-a", early, pass_=9, error=1),
            *checks("v2", "cites-policy", Arm.PRIMARY, "prod", late, pass_=19, fail=1),
            *checks("v2", "cites-policy", Arm.SHADOW, "cand-a", late, pass_=6, fail=12, error=2),
            *checks("v2", "no-pii", Arm.PRIMARY, "prod", late, pass_=10),
            *checks("v2", "no-pii", Arm.SHADOW, "cand-a", late, pass_=10),
        ]
    )
    return config


def test_pass_rates_per_check_arm_and_version(
    two_versions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = report(two_versions, capsys)
    assert code == 0
    assert "rule checks: 80" in out
    assert "### Checks by rule version: bot" in out
    # Versions in order of first appearance, each with its rule-change event.
    v1, v2, v3 = (out.index(f"#### Rule policy, version v{n}") for n in (1, 2, 3))
    assert v1 < v2 < v3
    assert f"First version of the rule, seen at {format_time(NOW - timedelta(hours=2))}." in out
    assert f"Rule change at {format_time(NOW - timedelta(hours=1))}, from v1." in out
    assert "No rule checks on this version in this window." in out[v3:]

    old = rows_under(out, "#### Rule policy, version v1")
    assert len(old) == 2
    primary = find(old, "no-pii", "primary · prod")
    assert primary["checks"] == "10"
    assert primary["pass rate (95% CI)"] == "80.0% [49.0, 94.3]"  # 8 of 10, Wilson
    assert (primary["fail"], primary["error"], primary["vs primary"]) == ("2", "0", "—")
    shadow = find(old, "no-pii", "shadow · cand-a")
    assert shadow["pass rate (95% CI)"] == "90.0% [59.6, 98.2]"  # an error is not a pass
    assert (shadow["fail"], shadow["error"]) == ("0", "1")
    assert shadow["vs primary"] == "+10.0 pp [-23.6, +42.1]"

    new = rows_under(out, "#### Rule policy, version v2")
    assert [(r["check"], r["arm · target"]) for r in new] == [
        ("cites-policy", "primary · prod"),
        ("cites-policy", "shadow · cand-a"),
        ("no-pii", "primary · prod"),
        ("no-pii", "shadow · cand-a"),
    ]
    assert find(new, "cites-policy", "primary · prod")["pass rate (95% CI)"] == (
        "95.0% [76.4, 99.1]"
    )
    behind = find(new, "cites-policy", "shadow · cand-a")
    assert behind["pass rate (95% CI)"] == "30.0% [14.5, 51.9]"  # 6 of 20
    assert (behind["fail"], behind["error"]) == ("12", "2")
    # 30% - 95%: Newcombe's interval excludes 0, so the candidate is flagged.
    assert behind["vs primary"] == "**-65.0 pp [-81.0, -36.3] below**"
    assert find(new, "no-pii", "shadow · cand-a")["vs primary"] == "+0.0 pp [-27.8, +27.8]"
    assert "Below the primary on this version: shadow · cand-a on cites-policy." in out
    assert "Below the primary" not in out[v1:v2]


def test_since_keeps_the_versions_checked_in_the_window(
    two_versions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = report(two_versions, capsys, "--since", "45m")
    assert "rule checks: 60" in out
    assert "version v1" not in out.replace("from v1", "")  # no v1 verdicts, its event is older
    assert "#### Rule policy, version v2" in out  # checked here; its event is older, still shown
    assert "#### Rule policy, version v3" in out  # changed in the window, nothing checked yet


def test_a_route_without_checks_says_so(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch([exchange()])
    _, out, _ = report(config, capsys)
    assert "### Checks by rule version: bot\n\nNo rule checks in this window.\n" in out
    _, page, _ = report(config, capsys, "--format", "html")
    assert "No rule checks in this window." in page
    assert "chart checks" not in page


def test_html_draws_the_newest_checked_version(
    two_versions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, page, _ = report(two_versions, capsys, "--format", "html")
    assert code == 0
    found = re.search(r'<svg class="chart checks" id="checks-0" data-route="bot".*?</svg>', page)
    assert found is not None
    svg = found.group(0)
    assert "rule policy version v2" in svg  # v3 has no verdicts, so v2 is the newest drawn
    bars = re.findall(r'<rect class="bar[^"]*" data-arm="([^"]+)" data-check="([^"]+)"', svg)
    assert sorted(bars) == sorted(
        [
            ("primary · prod", "cites-policy"),
            ("shadow · cand-a", "cites-policy"),
            ("primary · prod", "no-pii"),
            ("shadow · cand-a", "no-pii"),
        ]
    )
    assert svg.count('class="whisker"') == 3 * 4  # a line and two caps per bar
    assert svg.count("below primary") == 1
    assert page.count('<table class="checks" data-route="bot"') == 2  # v1 and v2
    assert '<tr class="below">' in page
    assert f"Rule change at {format_time(NOW - timedelta(hours=1))}, from v1." in page
