"""The HTML report in a real browser: headless Chromium (Debian's) driven by Playwright.

Needs `apt-get install chromium` and `pip install playwright` (no `playwright install`: the system
browser is used). Skipped when either is missing, unless MIRRORGATE_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import importlib.util
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from proxy.cli.main import main
from proxy.core.records import (
    Arm,
    CheckRecord,
    ExchangeRecord,
    PairRecord,
    ProbeRecord,
    Status,
    Usage,
)
from proxy.store.exchanges import Store
from tests.conftest import require_service
from tests.e2e.console_browser import CHROMIUM, CHROMIUM_ARGS
from tests.proxy.report.test_rollouts import seed_rollout

pytestmark = pytest.mark.e2e

ROUTE = "support-bot"
ARMS = {
    # label: (arm, target, count, median latency s, cost per request, streamed)
    "primary · prod": (Arm.PRIMARY, "prod", 400, 0.65, 0.00042, True),
    "canary · cand-b": (Arm.CANARY, "cand-b", 60, 0.85, 0.00025, True),
    "shadow · cand-a": (Arm.SHADOW, "cand-a", 120, 0.45, 0.00011, False),
}


CHECKS = {
    # check: pass probability per arm label
    "no-pii": {"primary · prod": 0.97, "canary · cand-b": 0.95, "shadow · cand-a": 0.96},
    "cites-policy": {"primary · prod": 0.95, "canary · cand-b": 0.9, "shadow · cand-a": 0.5},
}


PROBES = {
    # target: (followed, stuck, other) rule-flip probes of rule support-policy
    "prod": (58, 1, 1),
    "cand-b": (3, 55, 2),
}


def probes(now: datetime) -> list[ProbeRecord]:
    records = []
    for target, counts in PROBES.items():
        for result, count in zip(("followed", "stuck", "other"), counts, strict=True):
            records.extend(
                ProbeRecord(
                    probe_id=uuid.uuid4().hex,
                    request_id=uuid.uuid4().hex,
                    route=ROUTE,
                    target=target,
                    rule="support-policy",
                    rule_version="v2",
                    created_at=now - timedelta(minutes=5),
                    original_value="100",
                    asked_value="150",
                    result=result,
                    answered_value=None,
                    cost_usd=0.0,
                )
                for _ in range(count)
            )
    return records


def traffic(now: datetime) -> list[ExchangeRecord | PairRecord | CheckRecord]:
    """A few hundred plausible exchanges, pairs and rule checks (seeded, so every run draws the
    same)."""
    rng = random.Random(20250301)
    records: list[ExchangeRecord | PairRecord | CheckRecord] = []
    for arm, target, count, latency, cost, streamed in ARMS.values():
        for _ in range(count):
            failed = rng.random() < 0.03
            records.append(
                ExchangeRecord(
                    request_id=uuid.uuid4().hex,
                    route=ROUTE,
                    target=target,
                    upstream_model=target,
                    arm=arm,
                    endpoint="chat.completions",
                    provider="openai",
                    streamed=streamed,
                    started_at=now - timedelta(minutes=rng.uniform(1, 120)),
                    duration_s=latency * rng.lognormvariate(0, 0.45),
                    ttft_s=latency / 4 * rng.lognormvariate(0, 0.3) if streamed else None,
                    overhead_s=0.0004,
                    status=Status.UPSTREAM_ERROR if failed else Status.OK,
                    http_status=502 if failed else 200,
                    usage=Usage(input_tokens=rng.randint(200, 900), output_tokens=120),
                    cost_usd=cost * rng.uniform(0.8, 1.2),
                )
            )
    for kind, candidate, n, agree in (("shadow", "cand-a", 100, 0.8), ("noise", "prod", 40, 0.95)):
        for _ in range(n):
            equal = rng.random() < agree
            records.append(
                PairRecord(
                    pair_id=uuid.uuid4().hex,
                    kind=kind,
                    request_id=uuid.uuid4().hex,
                    route=ROUTE,
                    primary_target="prod",
                    candidate_target=candidate,
                    created_at=now - timedelta(minutes=rng.uniform(1, 120)),
                    primary_status="ok",
                    candidate_status="ok",
                    exact_equal=equal,
                    normalized_equal=equal,
                    json_equal=None,
                    latency_delta_s=rng.gauss(-0.2, 0.1),
                    cost_delta_usd=-0.0003,
                )
            )
    for check, pass_rates in CHECKS.items():
        for label, rate in pass_rates.items():
            arm, target, count, *_ = ARMS[label]
            records.extend(
                CheckRecord(
                    request_id=uuid.uuid4().hex,
                    route=ROUTE,
                    target=target,
                    arm=arm,
                    rule="support-policy",
                    rule_version="v2",
                    check=check,
                    result="pass" if rng.random() < rate else "fail",
                    reason="",
                    created_at=now - timedelta(minutes=rng.uniform(1, 120)),
                )
                for _ in range(count)
            )
    return records


@pytest.fixture
def html_report(tmp_path: Path) -> Path:
    """`mirrorgate report --format html --output FILE` over a real SQLite store."""
    db = tmp_path / "mirrorgate.db"
    with Store(f"sqlite:///{db}") as store:
        store.migrate()
        store.write_batch(traffic(datetime.now(UTC)))
        store.write_batch(probes(datetime.now(UTC)))
        seed_rollout(store, ROUTE)  # start, advance, rollback; three looks' verdicts
    config = tmp_path / "mirrorgate.yaml"
    config.write_text(
        f'store: {{url: "sqlite:///{db}"}}\n'
        'models: {prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m}}\n'
        f"routes: {{{ROUTE}: {{primary: prod}}}}\n"
        "rules:\n"
        "  support-policy:\n"
        f"    routes: [{ROUTE}]\n"
        "    probes:\n"
        "      parameter: 'max_weight\\s*=\\s*(?P<value>\\d+)'\n"
        "      values: [150]\n"
        "      expect: [{name: follows, type: regex, pattern: '{value}'}]\n"
    )
    output = tmp_path / "report.html"
    assert (
        main(["report", "--config", str(config), "--format", "html", "--output", str(output)]) == 0
    )
    return output


def test_the_html_report_renders_offline_in_chromium(html_report: Path, tmp_path: Path) -> None:
    has_playwright = importlib.util.find_spec("playwright") is not None
    require_service("Playwright", has_playwright, "pip install playwright")
    from playwright.sync_api import sync_playwright

    require_service(f"Chromium at {CHROMIUM}", CHROMIUM.exists(), "apt-get install chromium")

    url = html_report.as_uri()
    requests: list[str] = []
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda request: requests.append(request.url))
            page.on(
                "console",
                lambda message: problems.append(message.text) if message.type == "error" else None,
            )
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.goto(url, wait_until="load")

            assert page.title() == f"mirrorgate report: {ROUTE}"
            charts = _charts(page)
            adaptation = _adaptation(page)
            rollout = _rollout_chart(page)
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()

    assert requests == [url], "the report must load nothing but itself"
    assert problems == []
    assert (tmp_path / "report.png").stat().st_size > 10_000

    latency, cost, ttft, checks = (charts[k] for k in ("latency", "cost", "ttft", "checks"))
    assert latency["lines"] == len(ARMS)
    assert latency["markers"] == 2 * len(ARMS)  # p50 and p95 per arm
    assert cost["bars"] == len(ARMS)
    assert ttft["lines"] == 2  # only the streamed arms
    for name, chart in charts.items():
        assert chart["width"] > 300 and chart["height"] > 100, name
        assert chart["shapes"] > 0, name
        assert chart["title"], name
    assert "Latency distribution" in latency["title"]
    # Bars are drawn to scale: the primary costs about 4x the shadow per request.
    widths = cost["bar_widths"]
    assert widths["primary · prod"] > 2.5 * widths["shadow · cand-a"] > 0
    # One bar per check and arm, each with ink and a whisker; the shadow is flagged on the check
    # it fails half the time (its bar about half the primary's), and every flagged bar has a mark.
    assert checks["bars"] == len(CHECKS) * len(ARMS)
    assert checks["whiskers"] == 3 * checks["bars"]
    assert ("cites-policy", "shadow · cand-a") in checks["below"]
    assert checks["flags"] == len(checks["below"])
    assert "Pass rate by check" in checks["title"]
    cites = checks["check_widths"]["cites-policy"]
    assert 0 < cites["shadow · cand-a"] < 0.7 * cites["primary · prod"]
    assert all(
        width > 0 for per_arm in checks["check_widths"].values() for width in per_arm.values()
    )
    # Context awareness: a bar per probed target drawn to scale, each with its whisker; the
    # candidate stuck on the old rule is flagged.
    assert set(adaptation["widths"]) == set(PROBES)
    assert 0 < adaptation["widths"]["cand-b"] < 0.15 * adaptation["widths"]["prod"]
    assert adaptation["whiskers"] == 3 * len(PROBES)
    assert adaptation["flags"] == 1 and adaptation["stuck"] == ["cand-b"]
    assert "rule support-policy" in adaptation["title"]
    # The rollout on its time axis: three phases drawn in order (the first two as long as the
    # 11 and 9 minutes they lasted), three transitions with the rollback marked, every verdict.
    assert rollout["width"] > 300 and rollout["height"] > 80
    first, second, last = rollout["phase_widths"]
    assert first > 0 and second > 0 and last > 0
    assert first / second == pytest.approx(11 / 9, rel=0.05)
    assert (rollout["transitions"], rollout["rollbacks"]) == (3, 1)
    assert rollout["verdicts"] == {"pass": 1, "fail": 1, "inconclusive": 1}
    assert rollout["rows"] == 6


def _adaptation(page: Any) -> dict[str, Any]:
    """The context-awareness chart as the browser laid it out."""
    svg = page.locator(f'svg.chart.adaptation[data-route="{ROUTE}"]')
    assert svg.count() == 1
    box = svg.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 50
    assert svg.get_attribute("role") == "img"
    bars = svg.locator("rect.bar")
    title_id = svg.get_attribute("aria-labelledby").split()[0]
    return {
        "widths": {
            bars.nth(i).get_attribute("data-target"): bars.nth(i).bounding_box()["width"]
            for i in range(bars.count())
        },
        "whiskers": svg.locator("line.whisker").count(),
        "flags": svg.locator("tspan.flag").count(),
        "stuck": [bar.get_attribute("data-target") for bar in svg.locator("rect.bar.stuck").all()],
        "title": page.locator(f"#{title_id}").text_content(),
    }


def _rollout_chart(page: Any) -> dict[str, Any]:
    """The rollout timeline as laid out: phase bands, transition marks, verdict dots."""
    svg = page.locator(f'svg.chart.rollout[data-route="{ROUTE}"]')
    assert svg.count() == 1
    box = svg.bounding_box()
    phases = svg.locator("rect.phase")
    return {
        "width": box["width"],
        "height": box["height"],
        "phase_widths": [phases.nth(i).bounding_box()["width"] for i in range(phases.count())],
        "transitions": svg.locator("line.transition").count(),
        "rollbacks": svg.locator("line.transition.rollback").count(),
        "verdicts": {
            outcome: svg.locator(f"circle.verdict.{outcome}").count()
            for outcome in ("pass", "fail", "inconclusive")
        },
        "rows": page.locator(f'table.rollout-events[data-route="{ROUTE}"] tbody tr').count(),
    }


def _charts(page: Any) -> dict[str, dict[str, Any]]:
    """Measure each chart of the route as the browser laid it out."""
    found: dict[str, dict[str, Any]] = {}
    for kind in ("latency", "cost", "ttft", "checks"):
        svg = page.locator(f'svg.chart.{kind}[data-route="{ROUTE}"]')
        assert svg.count() == 1, kind
        box = svg.bounding_box()
        assert box is not None, kind
        title_id = svg.get_attribute("aria-labelledby").split()[0]
        bars = svg.locator("rect.bar")
        found[kind] = {
            "width": box["width"],
            "height": box["height"],
            "shapes": svg.locator("path, rect").count(),
            "lines": svg.locator("path.ecdf").count(),
            "markers": svg.locator("circle.marker").count(),
            "bars": bars.count(),
            "bar_widths": {
                bars.nth(i).get_attribute("data-arm"): bars.nth(i).bounding_box()["width"]
                for i in range(bars.count())
            },
            "check_widths": _bar_widths_by_check(bars),
            "whiskers": svg.locator("line.whisker").count(),
            "flags": svg.locator("tspan.flag").count(),
            "below": [
                (bar.get_attribute("data-check"), bar.get_attribute("data-arm"))
                for bar in svg.locator("rect.bar.below").all()
            ],
            "title": page.locator(f"#{title_id}").text_content(),
            "role": svg.get_attribute("role"),
        }
        assert found[kind]["role"] == "img", kind
        # A line or bar really has ink: its own bounding box is not empty.
        first = svg.locator("path.ecdf, rect.bar").first
        shape = first.bounding_box()
        assert shape is not None and shape["width"] > 0 and shape["height"] > 0, kind
    return found


def _bar_widths_by_check(bars: Any) -> dict[str, dict[str, float]]:
    """check → arm · target → drawn width, for the bars that carry a `data-check`."""
    widths: dict[str, dict[str, float]] = {}
    for i in range(bars.count()):
        bar = bars.nth(i)
        check = bar.get_attribute("data-check")
        if check is not None:
            widths.setdefault(check, {})[bar.get_attribute("data-arm")] = bar.bounding_box()[
                "width"
            ]
    return widths
