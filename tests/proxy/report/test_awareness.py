"""`mirrorgate report`: context awareness per probed rule, from rule-flip probes in a real SQLite
store, in Markdown and HTML."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from proxy.core.records import ProbeRecord
from proxy.report.awareness import build_context_awareness
from proxy.store.exchanges import Store
from tests.conftest import seed_sqlite
from tests.proxy.report.test_command import exchange, report, table_row

NOW = datetime.now(UTC)
HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture
def setup(tmp_path: Path, migrated_sqlite: Path) -> Iterator[tuple[Path, Store]]:
    """A config whose rule `shipping` (route bot) has probes; yields (config path, store)."""
    db = tmp_path / "mirrorgate.db"
    config = tmp_path / "mirrorgate.yaml"
    config.write_text(
        f'store: {{url: "sqlite:///{db}"}}\n'
        "models:\n"
        '  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m}\n'
        '  cand: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m}\n'
        "routes: {bot: {primary: prod}, other: {primary: prod}}\n"
        "rules:\n"
        "  shipping:\n"
        "    routes: [bot]\n"
        "    probes:\n"
        "      parameter: 'max_weight\\s*=\\s*(?P<value>\\d+)'\n"
        "      values: [150]\n"
        "      expect: [{name: follows, type: regex, pattern: '{value}'}]\n"
    )
    seed_sqlite(f"sqlite:///{db}", migrated_sqlite)
    with Store(f"sqlite:///{db}") as store:
        store.migrate()
        yield config, store


def probes(target: str, at: datetime, **results: int) -> list[ProbeRecord]:
    return [
        ProbeRecord(
            probe_id=f"p-{target}-{result}-{i}-{at.timestamp()}",
            request_id=f"r-{target}-{result}-{i}",
            route="bot",
            target=target,
            rule="shipping",
            rule_version="v1",
            created_at=at,
            original_value="100",
            asked_value="150",
            result=result,
            answered_value=None,
            cost_usd=0.0,
        )
        for result, count in results.items()
        for i in range(count)
    ]


@pytest.fixture
def probed(setup: tuple[Path, Store]) -> Path:
    config, store = setup
    recent, old = NOW - timedelta(minutes=10), NOW - timedelta(hours=3)
    store.write_batch(
        [
            exchange(),
            *probes("prod", recent, followed=58, other=2),
            *probes("cand", recent, followed=6, stuck=54),
            *probes("cand", old, followed=40),
            *probes(HOSTILE, recent, stuck=1),
        ]
    )
    return config


def test_markdown_lists_each_targets_rates_with_intervals(
    probed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, page, _ = report(probed, capsys, "--since", "1h")
    assert code == 0
    assert "### Context awareness: bot" in page and "#### Rule shipping: rule-flip probes" in page
    cand = table_row(page, "cand")
    assert (cand["probes"], cand["followed"], cand["stuck"], cand["other"]) == (
        "60",
        "6",
        "54",
        "0",
    )
    assert cand["adaptation (95% CI)"] == "10.0% [4.7, 20.1]"
    assert cand["stuck rate (95% CI)"].startswith("90.0% [")
    prod = table_row(page, "prod")
    assert prod["adaptation (95% CI)"].startswith("96.7% [")
    assert "Stuck on the old rule (most probes answered the original value): cand" in page
    # over everything stored, the 3-hour-old followed probes count too
    _, everything, _ = report(probed, capsys)
    assert table_row(everything, "cand")["probes"] == "100"


def test_html_draws_a_bar_per_target_with_its_interval_and_escapes_names(
    probed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, page, _ = report(probed, capsys, "--since", "1h", "--format", "html")
    assert code == 0
    found = re.search(
        r'<svg class="chart adaptation" id="adaptation-0" data-route="bot".*?</svg>', page
    )
    assert found is not None
    svg = found.group(0)
    bars = re.findall(r'<rect class="bar[^"]*" data-target="([^"]+)" data-rule="shipping"', svg)
    assert sorted(bars) == sorted(
        ["cand", "prod", "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"]
    )
    assert svg.count('class="whisker"') == 3 * 3
    assert svg.count("▲ stuck") == 1  # cand; the hostile target's one probe proves nothing
    assert '<table class="awareness" data-route="bot" data-rule="shipping">' in page
    assert HOSTILE not in page


def test_a_route_without_probes_has_no_section(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch([exchange()])
    _, page, _ = report(config, capsys)
    assert "Context awareness" not in page
    _, html, _ = report(config, capsys, "--format", "html")
    assert "Context awareness" not in html


def test_build_leaves_out_targets_and_rules_without_probes() -> None:
    built = build_context_awareness({"a": {"x": (0, 0, 0)}, "b": {"z": (1, 0, 0), "y": (0, 2, 1)}})
    assert [(r.rule, [t.target for t in r.targets]) for r in built] == [("b", ["y", "z"])]
    assert built[0].targets[0].score.stuck_rate.rate == pytest.approx(2 / 3)
