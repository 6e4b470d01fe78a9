"""`mirrorgate report` against a real SQLite store: the numbers, the filters and the errors."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from proxy.cli.main import main
from proxy.core.records import (
    Arm,
    CheckRecord,
    ExchangeRecord,
    FeedbackRecord,
    FindingRecord,
    PairRecord,
    Status,
    Usage,
)
from proxy.store.exchanges import Store
from proxy.store.feedback import FeedbackStore
from tests.conftest import seed_sqlite

NOW = datetime.now(UTC)


def exchange(route: str = "bot", target: str = "prod", **fields: Any) -> ExchangeRecord:
    values: dict[str, Any] = {
        "request_id": f"req-{uuid.uuid4().hex[:12]}",
        "route": route,
        "target": target,
        "upstream_model": "gpt-4o-mini",
        "arm": Arm.PRIMARY,
        "endpoint": "chat.completions",
        "provider": "openai",
        "streamed": False,
        "started_at": NOW - timedelta(minutes=5),
        "duration_s": 0.25,
        "ttft_s": None,
        "overhead_s": 0.0004,
        "status": Status.OK,
        "http_status": 200,
        "cost_usd": 0.0,
    }
    values.update(fields)
    return ExchangeRecord(**values)


def pair(kind: str, candidate: str, normalized: bool, **fields: Any) -> PairRecord:
    values: dict[str, Any] = {
        "pair_id": uuid.uuid4().hex,
        "kind": kind,
        "request_id": f"req-{uuid.uuid4().hex[:12]}",
        "route": "bot",
        "primary_target": "prod",
        "candidate_target": candidate,
        "created_at": NOW - timedelta(minutes=5),
        "primary_status": "ok",
        "candidate_status": "ok",
        "exact_equal": normalized,
        "normalized_equal": normalized,
        "json_equal": None,
        "latency_delta_s": 0.1,
        "cost_delta_usd": -0.001,
    }
    values.update(fields)
    return PairRecord(**values)


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


def report(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["report", "--config", str(config), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table_row(markdown: str, label: str) -> dict[str, str]:
    """The cells of the Markdown table row whose first cell is `label`, keyed by header."""
    lines = markdown.splitlines()
    for index, line in enumerate(lines):
        if line.startswith(f"| {label} |"):
            header = next(lines[i] for i in range(index, -1, -1) if lines[i + 1].startswith("|---"))
            names = [cell.strip() for cell in header.strip("|").split("|")]
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            return dict(zip(names, cells, strict=True))
    raise AssertionError(f"no row {label!r} in:\n{markdown}")


def test_markdown_has_the_numbers_of_each_arm(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    usage = Usage(input_tokens=100, output_tokens=20, cached_input_tokens=10)
    store.write_batch(
        [
            *(
                exchange(duration_s=d, cost_usd=0.002, usage=usage)
                for d in (0.4, 0.1, 0.3)  # p50 of 0.1, 0.2, 0.3, 0.4 is 0.25 s
            ),
            exchange(duration_s=0.2, cost_usd=0.002, status=Status.TIMEOUT, http_status=504),
            exchange(target="cand", arm=Arm.SHADOW, duration_s=1.0, cost_usd=0.01),
            exchange(target="cand", arm=Arm.SHADOW, duration_s=3.0, cost_usd=0.03),
            exchange(target="cand-b", arm=Arm.CANARY, streamed=True, ttft_s=0.05, duration_s=0.5),
            exchange(target="cand-b", arm=Arm.CANARY, streamed=True, ttft_s=0.15, duration_s=0.7),
        ]
    )
    code, out, _ = report(config, capsys)
    assert code == 0
    assert "Exchanges: 8 · pairs: 0" in out
    assert "## Route bot" in out

    primary = table_row(out, "primary · prod")
    assert primary["requests"] == "4"
    assert primary["errors"] == "1"
    assert primary["error rate (95% CI)"] == "25.0% [4.6, 69.9]"  # Wilson, 1 of 4
    assert primary["p50"] == "250 ms"
    assert primary["p95"] == "385 ms"  # 0.3 + 0.85 * 0.1
    assert primary["cost"] == "$0.00800"
    assert primary["cost / req"] == "$0.00200"
    assert primary["cost / 1k req"] == "$2.00"
    assert primary["tokens in"] == "330"  # 3 * (100 + 10 cached): cached input counts
    assert primary["tokens out"] == "60"
    assert primary["ttft p50"] == "—"

    shadow = table_row(out, "shadow · cand")
    assert shadow["p50"] == "2.00 s"
    assert shadow["cost / 1k req"] == "$20.00"

    canary = table_row(out, "canary · cand-b")
    assert canary["ttft p50"] == "100 ms"

    # Arms in a fixed order: primary, canary, fallback, shadow.
    assert out.index("primary · prod") < out.index("canary · cand-b") < out.index("shadow · cand")
    assert "Failures: primary · prod: 1 timeout." in out


def test_pairs_section_shows_agreement_and_the_noise_floor(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch(
        [
            exchange(),
            # cand-a: agrees on 6 of 10; one more pair where the candidate failed is left out.
            *(pair("shadow", "cand-a", i < 6) for i in range(10)),
            pair("shadow", "cand-a", False, candidate_status="timeout"),
            *(pair("replay", "cand-c", True, latency_delta_s=-0.2) for _ in range(3)),
            # the primary with itself: 1 of 10 differs.
            *(pair("noise", "prod", i > 0) for i in range(10)),
        ]
    )
    code, out, _ = report(config, capsys)
    assert code == 0
    assert "### Agreement with the primary: bot" in out
    shadow = table_row(out, "shadow · cand-a")
    assert shadow["pairs (both ok / all)"] == "10 / 11"
    assert shadow["normalized"] == "60.0% [31.3, 83.2]"
    assert shadow["Δ latency p50"] == "+100 ms"
    assert shadow["Δ cost p50"] == "-$0.00100"
    # 40% - 10% = +30 pp, Newcombe interval.
    assert shadow["beyond noise"].startswith("+30.0 pp [")
    replay = table_row(out, "replay · cand-c")
    assert replay["Δ latency p50"] == "-200 ms"
    assert "Noise floor (the primary asked twice): 10 pairs, disagreement 10.0%" in out


def test_agreement_is_the_routes_verdict_and_beyond_noise_reads_it(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    text = config.read_text().replace(
        "bot: {primary: prod}",
        "bot: {primary: prod, agreement: {mode: json_fields, fields: [max_weight], tolerance: 5}}",
    )
    config.write_text(text)
    store.write_batch(
        [
            exchange(),
            # Unequal texts that agree in the compared field: 8 of 8 agree under the route.
            *(pair("shadow", "cand-a", False, agreement="agree") for _ in range(8)),
            pair("shadow", "cand-a", False, agreement="not_applicable"),  # left out
            # Stored without a verdict: no equality knows the route's fields, left out too.
            pair("shadow", "cand-a", True),
            *(pair("noise", "prod", False, agreement="agree") for _ in range(8)),
        ]
    )
    _, out, _ = report(config, capsys)
    shadow = table_row(out, "shadow · cand-a")
    assert shadow["agreement (n)"] == "100.0% [67.6, 100.0] (8)"
    assert shadow["normalized"].startswith("10.0%")  # 1 of 10 texts equal: not the verdict
    assert shadow["beyond noise"].startswith("+0.0 pp [")
    assert "the route's `json_fields` comparison (with its fields and tolerance)" in out
    _, page, _ = report(config, capsys, "--format", "html")
    assert "<code>json_fields</code> comparison" in page


def judge_scores(pair: PairRecord, candidate: float, primary: float) -> list[FindingRecord]:
    """The LLM judge's four findings on `pair`, as `proxy.mirror.llm_judge` stores them."""
    values = {"candidate_score": candidate, "primary_score": primary,
              "score_delta": candidate - primary, "position_bias": 1.0}  # fmt: skip
    return [
        FindingRecord(
            request_id=pair.request_id,
            route=pair.route,
            target=pair.candidate_target,
            arm=Arm.SHADOW,
            analyzer="judge",
            name=name,
            created_at=pair.created_at,
            value=value,
            pair_id=pair.pair_id,
        )
        for name, value in values.items()
    ]


def test_the_llm_judges_scores_are_shown_per_candidate(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config, store = setup
    worse = [pair("shadow", "cand-a", True) for _ in range(4)]
    alone = pair("shadow", "cand-b", True)
    store.write_batch([exchange(), *worse, alone])
    findings = [f for p, c in zip(worse, (5.0, 6.0, 4.0, 5.0), strict=True)
                for f in judge_scores(p, c, 8.0)]  # fmt: skip
    other = FindingRecord(
        request_id=alone.request_id, route="bot", target="cand-b", arm=Arm.SHADOW,
        analyzer="length", name="ratio", created_at=alone.created_at, value=99.0,
        pair_id=alone.pair_id,
    )  # fmt: skip
    store.write_batch([*findings, *judge_scores(alone, 7.0, 6.5), other])
    code, out, _ = report(config, capsys)
    assert code == 0
    assert "### LLM judge: bot" in out
    a = table_row(out, "shadow · cand-a")  # the first row of that label is the agreement table
    judge = table_row(out[out.index("### LLM judge: bot") :], "shadow · cand-a")
    assert a["pairs (both ok / all)"] == "4 / 4"
    assert judge["pairs judged"] == "4"
    assert (judge["candidate score"], judge["primary score"]) == ("5.00", "8.00")
    # Deltas -3, -2, -4, -3: mean -3, sd 0.816, 95% half-width 1.96 * 0.816 / 2 = 0.80.
    assert judge["Δ score (95% CI)"] == "-3.00 [-3.80, -2.20]"
    assert judge["position bias"] == "1.00"
    b = table_row(out[out.index("### LLM judge: bot") :], "shadow · cand-b")
    assert (b["pairs judged"], b["Δ score (95% CI)"]) == ("1", "+0.50")  # no interval from 1

    html_path = tmp_path / "r.html"
    assert report(config, capsys, "--format", "html", "--output", str(html_path))[0] == 0
    page = html_path.read_text()
    table = page[page.index('<table class="judge" data-route="bot">') :]
    table = table[: table.index("</table>")]
    assert '<tr class="below">' in table  # cand-a: the judge prefers the primary
    assert "-3.00 [-3.80, -2.20]" in table and "+0.50" in table


def test_without_a_judge_the_report_has_no_judge_section(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch([exchange(), pair("shadow", "cand-a", True)])
    _, out, _ = report(config, capsys)
    assert "LLM judge" not in out


def test_without_noise_pairs_the_report_says_so(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch([exchange(), pair("shadow", "cand-a", True)])
    _, out, _ = report(config, capsys)
    assert table_row(out, "shadow · cand-a")["beyond noise"] == "—"
    assert "no noise pairs" in out


def test_agreement_is_per_candidate_arm(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch(
        [
            exchange(),
            exchange(target="cand-b", arm=Arm.CANARY),
            exchange(target="cand-a", arm=Arm.SHADOW),
            exchange(target="cand-c", arm=Arm.SHADOW),
            *(pair("shadow", "cand-a", i < 3) for i in range(4)),
        ]
    )
    _, out, _ = report(config, capsys)
    agreement = out[out.index("### Agreement with the primary: bot") :]
    assert table_row(agreement, "shadow · cand-a")["normalized"] == "75.0% [30.1, 95.4]"  # 3/4
    # Every candidate arm is accounted for, the ones without pairs by name.
    assert "No pairs in this window for canary · cand-b, shadow · cand-c." in out
    assert "Noise floor: no noise pairs" in out

    store.write_batch([pair("canary", "cand-b", True)])
    _, out, _ = report(config, capsys)
    agreement = out[out.index("### Agreement with the primary: bot") :]
    assert table_row(agreement, "canary · cand-b")["pairs (both ok / all)"] == "1 / 1"
    assert out.index("| canary · cand-b | 1 / 1") < out.index("| shadow · cand-a | 4 / 4")
    assert "No pairs in this window for shadow · cand-c." in out


def test_a_route_without_candidates_or_pairs_says_so(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch([exchange()])
    _, out, _ = report(config, capsys)
    assert "### Agreement with the primary: bot\n\nNo pairs in this window.\n" in out


def test_route_filters(setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]) -> None:
    config, store = setup
    store.write_batch(
        [
            exchange(route="bot"),
            exchange(route="other", duration_s=2.0),
            pair("shadow", "cand-a", True, route="bot"),
        ]
    )
    code, out, _ = report(config, capsys, "--route", "other")
    assert code == 0
    assert "## Route other" in out
    assert "## Route bot" not in out
    assert "Exchanges: 1 · pairs: 0" in out
    assert table_row(out, "primary · prod")["p50"] == "2.00 s"


def test_since_filters_relative_and_iso(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch(
        [
            exchange(started_at=NOW - timedelta(days=3), duration_s=9.0),
            exchange(started_at=NOW - timedelta(minutes=10), duration_s=0.1),
            pair("shadow", "cand-a", True, created_at=NOW - timedelta(days=3)),
        ]
    )
    _, out, _ = report(config, capsys, "--since", "1d")
    assert table_row(out, "primary · prod")["requests"] == "1"
    assert table_row(out, "primary · prod")["p50"] == "100 ms"
    assert "pairs: 0" in out

    since = (NOW - timedelta(days=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _, out, _ = report(config, capsys, "--since", since)
    assert table_row(out, "primary · prod")["requests"] == "2"
    assert "pairs: 1" in out

    _, out, _ = report(config, capsys, "--since", "30m")
    assert table_row(out, "primary · prod")["requests"] == "1"


def test_an_empty_window_is_a_clear_note_and_exit_0(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch([exchange(started_at=NOW - timedelta(days=30))])
    code, out, err = report(config, capsys, "--since", "7d")
    assert code == 0
    assert "No exchanges in this window." in out
    assert "no exchanges in this window" in err

    code, _, err = report(config, capsys, "--route", "nope")
    assert code == 0
    assert "route 'nope' is not in the config" in err


def test_a_bad_since_is_exit_1_with_a_clear_message(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = setup
    code, out, err = report(config, capsys, "--since", "yesterday")
    assert code == 1
    assert out == ""
    assert "--since 'yesterday'" in err
    assert "30m, 6h, 7d" in err


def test_an_unwritable_output_is_exit_1(
    setup: tuple[Path, Store], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch([exchange()])
    missing = tmp_path / "no-such-dir" / "report.md"
    code, _, err = report(config, capsys, "--output", str(missing))
    assert code == 1
    assert "does not exist" in err
    assert not missing.parent.exists()

    a_directory = tmp_path / "taken"
    a_directory.mkdir()
    code, _, err = report(config, capsys, "--output", str(a_directory))
    assert code == 1
    assert f"--output {a_directory}" in err


def test_output_file_gets_the_report(
    setup: tuple[Path, Store], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    store.write_batch([exchange()])
    target = tmp_path / "report.md"
    code, out, err = report(config, capsys, "--output", str(target))
    assert code == 0
    assert out == ""
    assert "report written to" in err
    assert "## Route bot" in target.read_text()


def test_a_missing_database_or_config_is_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "mirrorgate.yaml"
    config.write_text(
        f'store: {{url: "sqlite:///{tmp_path / "absent.db"}"}}\n'
        'models: {prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m}}\n'
        "routes: {bot: {primary: prod}}\n"
    )
    code, _, err = report(config, capsys)
    assert code == 1
    assert "no database at" in err
    assert not (tmp_path / "absent.db").exists()  # the report never creates a store

    code, _, err = report(tmp_path / "missing.yaml", capsys)
    assert code == 1
    assert "no such file" in err


def test_html_escapes_every_name_from_the_store(
    setup: tuple[Path, Store], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, store = setup
    route = "<script>alert('route')</script>"
    target = '"><img src=x onerror=alert(1)>'
    served = exchange(route=route, target=target, rule="<rule>", rule_version="<version>")
    check = CheckRecord(
        request_id=served.request_id,
        route=route,
        target=target,
        arm=Arm.PRIMARY,
        rule="<rule>",
        rule_version="<version>",
        check="<iframe src=x>",
        result="pass",
        reason="",
        created_at=NOW,
    )
    store.write_batch(
        [
            served,
            exchange(route=route, target="ok", arm=Arm.SHADOW, streamed=True, ttft_s=0.1),
            pair("shadow", target, True, route=route),
            check,
        ]
    )
    FeedbackStore(store).add(
        FeedbackRecord(
            request_id=served.request_id,
            kind="label",
            route=route,
            target=target,
            arm=Arm.PRIMARY,
            created_at=NOW,
            label="<svg onload=alert(1)>",
        )
    )
    code, out, _ = report(config, capsys, "--format", "html")
    assert code == 0
    assert out.startswith("<!doctype html>")
    assert "<script" not in out
    assert "<img" not in out
    assert "<iframe" not in out
    assert "<rule>" not in out
    assert "<version>" not in out
    assert "<svg onload" not in out
    assert '<svg class="chart checks" id="checks-0"' in out
    assert "&lt;script&gt;alert(&#x27;route&#x27;)&lt;/script&gt;" in out
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in out
    # The charts are there, labelled, and carry the (escaped) route.
    assert '<svg class="chart latency" id="latency-0" data-route="&lt;script&gt;' in out
    assert '<svg class="chart cost" id="cost-0"' in out
    assert '<svg class="chart ttft" id="ttft-0"' in out
    assert '<title id="latency-0-title">Latency distribution, route &lt;script&gt;' in out


def test_html_of_an_empty_window(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = setup
    code, out, _ = report(config, capsys, "--format", "html")
    assert code == 0
    assert "No exchanges in this window" in out
    assert "<svg" not in out


def test_the_report_needs_only_the_stores_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No provider key, admin token or other variable of the config is set: the report still
    reads the store; serving the same config is refused."""
    db = tmp_path / "mirrorgate.db"
    with Store(f"sqlite:///{db}") as store:
        store.migrate()
        store.write_batch([exchange()])
    config = tmp_path / "mirrorgate.yaml"
    config.write_text(
        'store: {url: "${MG_REPORT_STORE}"}\n'
        "server: {host: 0.0.0.0, admin_token_env: MG_UNSET_ADMIN_TOKEN}\n"
        "models:\n"
        '  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m,'
        " api_key_env: MG_UNSET_PROD_KEY}\n"
        '  cand: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m,'
        " api_key_env: MG_UNSET_CAND_KEY}\n"
        "routes: {bot: {primary: prod, shadows: [{model: cand}]}}\n"
    )
    for name in ("MG_UNSET_ADMIN_TOKEN", "MG_UNSET_PROD_KEY", "MG_UNSET_CAND_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MG_REPORT_STORE", f"sqlite:///{db}")
    code, out, err = report(config, capsys)
    assert code == 0, err
    assert table_row(out, "primary · prod")["requests"] == "1"
    assert main(["serve", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "models.prod.api_key_env" in err
    assert "MG_UNSET_CAND_KEY" in err


def test_live_routes_come_first_and_offline_answers_are_labelled_by_their_run(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str]
) -> None:
    """An evaluation set's pseudo-route sorts before `bot` by name, yet is reported after it;
    replay and eval answers (stored as shadows tagged by their run) are not shadow arms."""
    config, store = setup
    store.write_batch(
        [
            exchange(route="eval:aaa", target="cand", arm=Arm.SHADOW, tags=("eval", "aaa")),
            exchange(),
            exchange(target="cand", arm=Arm.SHADOW),
            exchange(target="cand", arm=Arm.SHADOW, tags=("replay",)),
            exchange(target="cand", arm=Arm.SHADOW, tags=("replay",)),
        ]
    )
    store.write_batch([pair("replay", "cand", True), pair("eval", "cand", False, route="eval:aaa")])
    code, out, err = report(config, capsys)
    assert code == 0, err
    headings = [line for line in out.splitlines() if line.startswith("## Route ")]
    assert headings == ["## Route bot", "## Route eval:aaa"]
    assert "### Rollouts: bot" in out and "### Rollouts: eval:aaa" not in out
    assert table_row(out, "shadow · cand")["requests"] == "1"  # only the live shadow
    assert table_row(out, "replay · cand")["requests"] == "2"
    assert table_row(out, "eval · cand")["requests"] == "1"
    labels = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")]
    assert labels.index("primary · prod") < labels.index("shadow · cand")
    assert labels.index("shadow · cand") < labels.index("replay · cand")
    page = main(["report", "--config", str(config), "--format", "html"])
    assert page == 0
    html = capsys.readouterr().out
    assert html.index('data-route="bot"') < html.index('data-route="eval:aaa"')
    assert 'data-arm="replay · cand"' in html


def test_offline_evaluations_show_each_model_across_set_versions(
    setup: tuple[Path, Store], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from proxy.store import EvalRun, EvalStore, StratumScore

    config, store = setup
    store.write_batch([exchange()])
    now = datetime.now(UTC)

    def run(version: int, model: str, passed: int, hard: int, minutes: int) -> EvalRun:
        return EvalRun(
            run_group=f"g{version}", set_name="support", set_version=version, set_hash="h",
            route="bot", model=model, role="primary" if model == "prod" else "candidate",
            config_fingerprint=f"{model}-fingerprint", started_at=now - timedelta(minutes=minutes),
            strata={"all": StratumScore(100, passed, passed / 100),
                    "difficulty=hard": StratumScore(20, hard)},
        )  # fmt: skip

    EvalStore(store).add_runs([run(1, "prod", 90, 16, 60), run(1, "cand", 92, 12, 60)])
    EvalStore(store).add_runs([run(2, "prod", 91, 17, 5), run(2, "cand", 95, 18, 5)])
    code, out, _ = report(config, capsys)
    assert code == 0
    section = out[out.index("## Offline evaluations") :]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "support" in line]
    assert [(r.split("|")[2].strip(), r.split("|")[3].strip()) for r in rows] == [
        ("support v1", "prod"), ("support v1", "cand"), ("support v2", "prod"),
        ("support v2", "cand"),
    ]  # fmt: skip
    assert "92% (92/100)" in rows[1] and "60% (12/20)" in rows[1]  # better overall, worse hard
    html = tmp_path / "r.html"
    assert report(config, capsys, "--format", "html", "--output", str(html))[0] == 0
    assert "Offline evaluations" in html.read_text() and "95% (95/100)" in html.read_text()
