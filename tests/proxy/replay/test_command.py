"""`mirrorgate replay` against the real mock upstream and a real SQLite store."""

from __future__ import annotations

import json
import re
import signal
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from proxy.cli.main import build_parser, main
from proxy.core.records import Arm, ExchangeRecord, PairRecord, Status, Usage
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.replay.command import run_replay
from proxy.replay.evalset import read_eval_set
from proxy.replay.runner import JobOutcome
from proxy.store.exchanges import Store
from proxy.store.redaction import redact
from proxy.upstream.tokens import count_tokens
from tests.conftest import InProcessGateway, sdk_client, seed_sqlite, wait_until

PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 4.0}
STALE_ANSWER = '{"max_weight": 100}'


# --- fixtures and helpers ---------------------------------------------------------------------


def write_config(
    tmp_path: Path,
    upstream: MockUpstreamServer,
    db_url: str | None = None,
    bodies: str = "full",
    **route: Any,
) -> Path:
    """Models `prod` (echo), `rule-follower`, `stale`, `broken` (always 503) in the OpenAI format
    and `stale-claude` in Anthropic's."""

    def model(name: str, provider: str = "openai") -> dict[str, Any]:
        base = upstream.url if provider == "anthropic" else upstream.url + "/v1"
        return {"provider": provider, "base_url": base, "model": name, "price": PRICE}

    doc = {
        "store": {"url": db_url or f"sqlite:///{tmp_path / 'mg.db'}", "bodies": bodies},
        "models": {
            "prod": model("echo"),
            "rule-follower": model("rule-follower"),
            "stale": model("stale"),
            "broken": model("broken"),
            "stale-claude": model("stale", "anthropic"),
        },
        "routes": {"support-bot": {"primary": "prod", **route}},
    }
    path = tmp_path / "mirrorgate.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def config(tmp_path: Path, upstream: MockUpstreamServer) -> Path:
    return write_config(tmp_path, upstream)


@pytest.fixture
def store(tmp_path: Path, migrated_sqlite: Path) -> Store:
    seed_sqlite(f"sqlite:///{tmp_path / 'mg.db'}", migrated_sqlite)
    db = Store(f"sqlite:///{tmp_path / 'mg.db'}")
    db.migrate()
    return db


def body(marker: str, max_weight: int, *, stream: bool = False) -> dict[str, Any]:
    """A chat request whose user message carries `marker`, so the mock's log can be filtered."""
    payload: dict[str, Any] = {
        "model": "echo",
        "messages": [
            {"role": "system", "content": f"Shipping rules. max_weight = {max_weight}"},
            {"role": "user", "content": f"How heavy can my parcel be? [{marker}]"},
        ],
    }
    if stream:
        payload |= {"stream": True, "stream_options": {"include_usage": True}}
    return payload


def seed(
    store: Store, originals: list[tuple[dict[str, Any], str]], *, route: str = "support-bot"
) -> list[ExchangeRecord]:
    """Store primary exchanges (request body, recorded answer), one minute apart, oldest first."""
    start = datetime.now(UTC) - timedelta(hours=1)
    records = [
        ExchangeRecord(
            request_id=uuid.uuid4().hex,
            route=route,
            target="prod",
            upstream_model="echo",
            arm=Arm.PRIMARY,
            endpoint="chat.completions",
            provider="openai",
            streamed=payload.get("stream") is True,
            started_at=start + timedelta(minutes=i),
            duration_s=0.5,
            ttft_s=0.1 if payload.get("stream") else None,
            overhead_s=0.001,
            status=Status.OK,
            http_status=200,
            usage=Usage(input_tokens=20, output_tokens=8),
            cost_usd=0.0001,
            request_body=json.dumps(payload),
            response_text=answer,
        )
        for i, (payload, answer) in enumerate(originals)
    ]
    store.write_batch(records)
    return records


def sent(upstream: MockUpstreamServer, marker: str) -> list[dict[str, Any]]:
    """Bodies the mock received whose user message carries `marker`."""
    return [
        r["body"]
        for r in upstream.app.recorder.requests()
        if isinstance(r["body"], dict) and marker in json.dumps(r["body"])
    ]


def per_model(upstream: MockUpstreamServer, marker: str) -> Counter[str]:
    return Counter(b["model"] for b in sent(upstream, marker))


def replay(config: Path, *argv: str, on_result: Callable[[JobOutcome], None] | None = None) -> int:
    args = build_parser().parse_args(["replay", "--config", str(config), *argv])
    return run_replay(args, on_result=on_result)


def table(out: str, first_header: str) -> dict[str, dict[str, str]]:
    """The rows of the summary table whose header starts with `first_header`, by first cell."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header + " "))
    header = re.split(r"\s{2,}", lines[start].strip())
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = dict(zip(header, cells, strict=True))
    return rows


AGREEMENT_CASES = [
    # (max_weight in the prompt, recorded answer): rule-follower answers {"max_weight": N},
    # stale always {"max_weight": 100}.
    (150, '{"max_weight": 150}'),  # rule-follower: exact
    (150, '{"max_weight":150}'),  # rule-follower: JSON only
    (100, '{"max_weight": 100}'),  # both: exact
    (120, '{"MAX_WEIGHT": 120}'),  # rule-follower: normalised only
]


# --- replaying the store ------------------------------------------------------------------------


def test_replay_sends_each_request_once_per_candidate_and_stores_linked_pairs(
    config: Path, store: Store, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    originals = seed(
        store, [(body(f"{marker}-{i}", w), a) for i, (w, a) in enumerate(AGREEMENT_CASES)]
    )

    code = replay(config, "--candidate", "rule-follower", "--candidate", "stale")

    out = capsys.readouterr().out
    assert code == 0
    assert per_model(upstream, marker) == {"rule-follower": 4, "stale": 4}
    for i in range(len(originals)):  # each recorded request reached each candidate once
        assert per_model(upstream, f"{marker}-{i}]") == {"rule-follower": 1, "stale": 1}
    pairs = store.query_pairs(kind="replay")
    assert len(pairs) == 8
    by_id = {r.request_id: r for r in originals}
    for pair in pairs:
        (record,) = store.query(pair_id=pair.pair_id)
        assert record.arm is Arm.SHADOW and record.tags == ("replay",)
        assert record.target == pair.candidate_target
        assert record.upstream_model == pair.candidate_target  # the model sent upstream
        assert record.request_id == pair.request_id and pair.request_id in by_id
        assert pair.route == record.route == "support-bot"
        assert pair.primary_target == "prod" and pair.primary_status == "ok"
        assert pair.cost_delta_usd == pytest.approx(record.cost_usd - 0.0001)
        assert pair.latency_delta_s == pytest.approx(record.duration_s - 0.5)
    rows = table(out, "candidate")
    follower, stale = rows["rule-follower"], rows["stale"]
    recorded = rows["(recorded)"]  # the originals, for comparison
    assert (recorded["sent"], recorded["p50 ms"], recorded["cost USD"]) == (
        "4",
        "500.0",
        "0.000400",
    )
    assert (follower["sent"], follower["errors"]) == ("4", "0")
    assert (follower["exact"], follower["normalised"], follower["json"]) == (
        "2/4 50%", "3/4 75%", "3/4 75%",
    )  # fmt: skip
    assert (stale["exact"], stale["normalised"], stale["json"]) == ("1/4 25%",) * 3
    follower_cost = sum(r.cost_usd for r in store.query(target="rule-follower"))
    assert follower["cost USD"] == f"{follower_cost:.6f}"


def test_replay_pairs_carry_the_routes_agreement_verdict(
    tmp_path: Path, store: Store, upstream: MockUpstreamServer
) -> None:
    agreement = {"mode": "json_fields", "fields": ["max_weight"], "tolerance": 25}
    config = write_config(tmp_path, upstream, agreement=agreement)
    marker = uuid.uuid4().hex
    # stale answers {"max_weight": 100}: within 25 of 120, not of 150; "none" is not JSON.
    answers = ['{"max_weight": 120}', '{"max_weight": 150}', "none"]
    seed(store, [(body(f"{marker}-{i}", 150), a) for i, a in enumerate(answers)])
    assert replay(config, "--candidate", "stale") == 0
    verdicts = {
        (store.query(request_id=p.request_id, arm=Arm.PRIMARY)[0].response_text, p.agreement)
        for p in store.query_pairs(kind="replay")
    }
    assert verdicts == {
        ('{"max_weight": 120}', "agree"),
        ('{"max_weight": 150}', "disagree"),
        ("none", "not_applicable"),
    }


def test_a_rerun_sends_nothing_already_replayed(
    config: Path, store: Store, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    seed(store, [(body(f"{marker}-{i}", 150), "x") for i in range(3)])
    assert replay(config, "--candidate", "stale") == 0
    assert replay(config, "--candidate", "stale", "--candidate", "rule-follower") == 0
    assert per_model(upstream, marker) == {"stale": 3, "rule-follower": 3}
    out = capsys.readouterr().out
    assert "already replayed by an earlier run (skipped): stale 3" in out


def test_route_and_limit_select_the_newest_recorded_requests(
    config: Path, store: Store, upstream: MockUpstreamServer
) -> None:
    marker = uuid.uuid4().hex
    seed(store, [(body(f"{marker}-old", 150), "x")])
    seed(store, [(body(f"{marker}-other", 150), "x")], route="other-route")
    newest = seed(store, [(body(f"{marker}-new{i}", 150), "x") for i in range(2)])
    assert replay(config, "--candidate", "stale", "--route", "support-bot", "--limit", "1") == 0
    # seed() starts each batch an hour ago: the last record of the last batch is the newest.
    assert sent(upstream, marker)[0]["messages"][1]["content"].endswith(f"[{marker}-new1]")
    assert len(sent(upstream, marker)) == 1
    assert store.query_pairs(kind="replay")[0].request_id == newest[1].request_id


def test_records_without_a_stored_body_are_skipped_and_counted(
    config: Path, store: Store, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    (kept,) = seed(store, [(body(marker, 150), "x")])
    bodiless = ExchangeRecord(**{**_fields(kept), "request_id": "no-body", "request_body": None})
    failed = ExchangeRecord(**{**_fields(kept), "request_id": "failed", "status": Status.TIMEOUT})
    store.write_batch([bodiless, failed])
    assert replay(config, "--candidate", "stale") == 0
    assert len(sent(upstream, marker)) == 1  # the failed original is not replayed either
    assert "skipped: 1 recorded request(s) without a stored body" in capsys.readouterr().out


def _fields(record: ExchangeRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in ExchangeRecord.__dataclass_fields__}


def test_streamed_originals_are_replayed_as_streams_with_ttft(
    config: Path, store: Store, upstream: MockUpstreamServer
) -> None:
    marker = uuid.uuid4().hex
    (original,) = seed(store, [(body(marker, 150, stream=True), '{"max_weight": 150}')])
    assert replay(config, "--candidate", "rule-follower") == 0
    (request,) = sent(upstream, marker)
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}
    (record,) = store.query(target="rule-follower", request_id=original.request_id)
    assert record.streamed and record.ttft_s is not None and record.status is Status.OK
    assert not record.usage.estimated  # the stream's own usage report
    assert record.response_text == '{"max_weight": 150}'
    (pair,) = store.query_pairs(kind="replay")
    assert pair.exact_equal and pair.ttft_delta_s == pytest.approx(record.ttft_s - 0.1)


def test_requests_recorded_by_a_real_gateway_replay_as_recorded(
    start_gateway: Callable[..., InProcessGateway],
    upstream: MockUpstreamServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db_url = f"sqlite:///{tmp_path / 'gw.db'}"
    gateway = start_gateway(db_url=db_url)
    client = sdk_client(
        openai.OpenAI(
            base_url=gateway.url + "/v1",
            api_key="k",
            max_retries=0,
            http_client=gateway.sdk_http(),
        )
    )
    marker = uuid.uuid4().hex
    for i in range(3):
        messages = body(f"{marker}-{i}", 150)["messages"]
        if i == 2:
            list(
                client.chat.completions.create(
                    model="rule-follower", messages=messages, stream=True
                )
            )
        else:
            client.chat.completions.create(model="rule-follower", messages=messages)
    gateway_store = gateway.gateway.store
    wait_until(lambda: gateway_store.count(route="rule-follower") == 3, what="3 records")
    config = write_config(tmp_path, upstream, db_url=db_url)

    code = replay(config, "--candidate", "rule-follower", "--candidate", "stale")

    assert code == 0
    assert per_model(upstream, marker) == {"rule-follower": 6, "stale": 3}  # 3 live + 3 replayed
    rows = table(capsys.readouterr().out, "candidate")
    assert rows["rule-follower"]["exact"] == "3/3 100%"
    assert rows["stale"]["exact"] == "0/3 0%"
    streamed = [r for r in gateway_store.query(arm=Arm.SHADOW) if r.streamed]
    assert len(streamed) == 2 and all(r.ttft_s is not None for r in streamed)


def test_candidate_failures_are_counted_by_cause_and_stored(
    config: Path, store: Store, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    seed(store, [(body(f"{marker}-{i}", 150), '{"max_weight": 150}') for i in range(2)])
    assert replay(config, "--candidate", "broken") == 0  # a failing candidate is a result
    out = capsys.readouterr().out
    row = table(out, "candidate")["broken"]
    assert (row["sent"], row["errors"], row["exact"], row["p50 ms"]) == ("2", "2", "-", "-")
    assert "errors: broken: http_503 (2)" in out
    pairs = store.query_pairs(kind="replay")
    assert [p.candidate_status for p in pairs] == ["upstream_error", "upstream_error"]


def test_bodies_policy_applies_and_redaction_is_not_a_disagreement(
    tmp_path: Path, store: Store, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    payload = body(marker, 150)
    payload["messages"][1]["content"] += " Write to bob@example.com"
    # What the echo model says, as a gateway with `bodies: redacted` would have stored it.
    answer = sdk_client(
        openai.OpenAI(base_url=upstream.openai_url, api_key="k")
    ).chat.completions.create(model="echo", messages=payload["messages"])
    text = answer.choices[0].message.content or ""
    assert "bob@example.com" in text
    seed(store, [(payload, redact(text))])
    config = write_config(tmp_path, upstream, bodies="redacted")

    assert replay(config, "--candidate", "prod") == 0

    (record,) = store.query(target="prod", arm=Arm.SHADOW)
    assert record.request_body is not None and record.response_text is not None
    assert "bob@example.com" not in record.request_body + record.response_text
    assert "[REDACTED:email]" in record.response_text
    assert sent(upstream, marker)[-1]["messages"] == payload["messages"]  # sent as recorded
    assert table(capsys.readouterr().out, "candidate")["prod"]["exact"] == "1/1 100%"


# --- stopping and resuming ----------------------------------------------------------------------


def test_an_interrupted_run_and_its_rerun_send_each_request_exactly_once(
    config: Path, store: Store, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    count = 10
    seed(store, [(body(f"{marker}-{i}", 150), "x") for i in range(count)])
    done: list[JobOutcome] = []

    def interrupt_after_three(outcome: JobOutcome) -> None:
        done.append(outcome)
        if len(done) == 3:
            signal.raise_signal(signal.SIGINT)  # handled by the replay's own signal handler

    argv = ("--candidate", "rule-follower", "--candidate", "stale", "--concurrency", "2")
    first = replay(config, *argv, on_result=interrupt_after_three)

    captured = capsys.readouterr()
    assert first == 130
    assert "SIGINT: not sending any more" in captured.err
    assert "interrupted (SIGINT)" in captured.out
    first_run = per_model(upstream, marker)
    # Nothing was dispatched after the signal; the one call in flight (2 workers) was let finish.
    assert sum(first_run.values()) in (3, 4)
    assert len(store.query_pairs(kind="replay")) == sum(first_run.values())  # all of them stored

    assert replay(config, *argv) == 0
    assert per_model(upstream, marker) == {"rule-follower": count, "stale": count}
    for i in range(count):
        assert per_model(upstream, f"{marker}-{i}]") == {"rule-follower": 1, "stale": 1}
    assert len(store.query_pairs(kind="replay")) == 2 * count


def test_sigterm_stops_the_run_with_exit_143(
    config: Path, store: Store, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    seed(store, [(body(f"{marker}-{i}", 150), "x") for i in range(5)])

    def terminate(_outcome: JobOutcome) -> None:
        signal.raise_signal(signal.SIGTERM)

    code = replay(config, "--candidate", "stale", "--concurrency", "1", on_result=terminate)

    assert code == 143
    assert per_model(upstream, marker) == {"stale": 1}  # one at a time: nothing else in flight
    assert "interrupted (SIGTERM): 4 request(s) not sent" in capsys.readouterr().out


def test_the_budget_stops_a_candidate_and_a_rerun_sends_the_rest(
    tmp_path: Path,
    store: Store,
    upstream: MockUpstreamServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    marker = uuid.uuid4().hex
    payloads = [body(f"{marker}-{i}", 150) for i in range(6)]
    seed(store, [(p, "x") for p in payloads])
    # What `stale` costs per request, counted as the mock counts: prompt texts and the answer.
    costs = [
        (sum(count_tokens(m["content"]) for m in p["messages"]) * 1.0
         + count_tokens(STALE_ANSWER) * 4.0) / 1e6
        for p in payloads
    ]  # fmt: skip
    limit = sum(costs[:3]) * 0.999  # spent after 2 requests: below; after 3: above
    config = write_config(
        tmp_path, upstream, shadows=[{"model": "stale", "max_usd_per_hour": limit}]
    )

    assert replay(config, "--candidate", "stale", "--concurrency", "1") == 0  # limit from config
    out = capsys.readouterr().out
    assert per_model(upstream, marker) == {"stale": 3}
    assert "3 request(s) not sent (budget)" in out
    assert "routes.support-bot.shadows[0].max_usd_per_hour" in out

    assert replay(config, "--candidate", "stale", "--max-usd", "1") == 0  # --max-usd overrides
    assert per_model(upstream, marker) == {"stale": 6}
    for i in range(6):
        assert per_model(upstream, f"{marker}-{i}]") == {"stale": 1}


# --- from a file --------------------------------------------------------------------------------


def test_from_file_reports_a_broken_line_by_number_and_replays_the_rest(
    config: Path, store: Store, upstream: MockUpstreamServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    marker = uuid.uuid4().hex
    lines = [
        json.dumps({"id": "a", "endpoint": "chat.completions", "request": body(f"{marker}-a", 150),
                    "response": '{"max_weight": 150}', "route": "bot"}),
        '{"id": "broken", "endpoint": ',
        json.dumps({"id": "b", "endpoint": "chat.completions", "request": body(f"{marker}-b", 9)}),
        json.dumps({"id": "c", "endpoint": "teleport", "request": {}}),
        "",
        json.dumps({"id": "a", "endpoint": "chat.completions", "request": body(marker, 1)}),
    ]  # fmt: skip
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(lines) + "\n")

    assert replay(config, "--candidate", "rule-follower", "--from-file", str(path)) == 0

    captured = capsys.readouterr()
    assert f"{path}:2: not valid JSON" in captured.err
    assert f"{path}:4: 'endpoint' must be one of" in captured.err
    assert f"{path}:6: id 'a' was already used on line 1" in captured.err
    assert per_model(upstream, marker) == {"rule-follower": 2}
    (pair,) = store.query_pairs(kind="replay")  # only line 1 has a recorded answer
    assert (pair.request_id, pair.route, pair.primary_target) == ("a", "bot", "recorded")
    assert pair.exact_equal
    (unpaired,) = store.query(request_id="b")
    assert unpaired.route == "file:requests" and unpaired.pair_id is None
    assert unpaired.tags == ("replay",)

    assert replay(config, "--candidate", "rule-follower", "--from-file", str(path)) == 0
    assert per_model(upstream, marker) == {"rule-follower": 2}  # both count as done


# --- refusals -------------------------------------------------------------------------------


def test_a_candidate_not_in_the_config_is_named(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert replay(config, "--candidate", "stale", "--candidate", "gpt-9") == 1
    assert "candidate 'gpt-9' is not a model in" in capsys.readouterr().err


def test_a_candidate_of_another_wire_format_is_refused_before_sending(
    config: Path, store: Store, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = uuid.uuid4().hex
    seed(store, [(body(marker, 150), "x")])
    assert replay(config, "--candidate", "stale", "--candidate", "stale-claude") == 1
    err = capsys.readouterr().err
    assert "candidate 'stale-claude' speaks anthropic" in err
    assert "chat.completions endpoint" in err
    assert sent(upstream, marker) == []


def test_a_bad_config_names_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("models: {}\nroutes: {}\n")
    assert replay(path, "--candidate", "x") == 1
    assert "problem(s)" in capsys.readouterr().err


def test_only_the_candidates_keys_are_needed(
    tmp_path: Path, store: Store, upstream: MockUpstreamServer,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The primary's key (and the admin token) are unset: a replay to `stale`, whose key is set,
    runs; one to `broken`, whose key is not, is refused naming its key before anything is sent."""
    path = write_config(tmp_path, upstream)
    doc = yaml.safe_load(path.read_text())
    doc["server"] = {"host": "0.0.0.0", "admin_token_env": "MG_UNSET_ADMIN"}
    doc["models"]["prod"]["api_key_env"] = "MG_UNSET_PROD_KEY"
    doc["models"]["broken"]["api_key_env"] = "MG_UNSET_BROKEN_KEY"
    doc["models"]["stale"]["api_key_env"] = "MG_STALE_KEY"
    path.write_text(yaml.safe_dump(doc))
    for name in ("MG_UNSET_ADMIN", "MG_UNSET_PROD_KEY", "MG_UNSET_BROKEN_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MG_STALE_KEY", "sk-stale")
    marker = uuid.uuid4().hex
    seed(store, [(body(marker, 150), STALE_ANSWER)])

    assert replay(path, "--candidate", "broken") == 1
    err = capsys.readouterr().err
    assert "models.broken.api_key_env: environment variable MG_UNSET_BROKEN_KEY" in err
    assert "MG_UNSET_PROD_KEY" not in err
    assert sent(upstream, marker) == []

    assert replay(path, "--candidate", "stale") == 0
    assert per_model(upstream, marker) == {"stale": 1}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--since", "last tuesday"], "--since: 'last tuesday' is not a time"),
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--max-usd", "0"], "--max-usd must be more than 0"),
        (["--from-file", "a", "--eval-set", "b"], "do not go together"),
        (["--eval-set", "b", "--route", "r"], "not evaluation items"),
    ],
)
def test_usage_errors_exit_2(
    config: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", "--config", str(config), "--candidate", "stale", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_file_is_named(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay(config, "--candidate", "stale", "--from-file", "/nonexistent/r.jsonl") == 1
    assert "cannot read /nonexistent/r.jsonl" in capsys.readouterr().err


# --- evaluation sets ----------------------------------------------------------------------------


def test_eval_set_scores_candidates_by_task_and_difficulty(
    config: Path, store: Store, upstream: MockUpstreamServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    marker = uuid.uuid4().hex

    def item(item_id: str, task: str, difficulty: str, weight: int, expect: Any) -> str:
        return json.dumps({
            "id": item_id, "task": task, "difficulty": difficulty, "expect": expect,
            "input": f"How heavy? [{marker}]", "system": f"max_weight = {weight}",
        })  # fmt: skip

    lines = [
        item("w1", "weight", "easy", 150, {"max_weight": 150}),  # follower right, stale wrong
        item("w2", "weight", "hard", 120, '{"max_weight": 120}'),  # follower right, stale wrong
        item("w3", "weight", "hard", 100, '{"max_weight": 100}'),  # both right
        item("c1", "casing", "easy", 100, '{"MAX_WEIGHT": 100}'),  # both right once normalised
        "not json at all",
        json.dumps({"id": "x", "input": "no expect"}),
        json.dumps({"id": "s1", "task": "streamed", "difficulty": "hard", "expect": STALE_ANSWER,
                    "input": body(marker, 7, stream=True)}),  # stale right, follower wrong
    ]  # fmt: skip
    path = tmp_path / "shipping.jsonl"
    path.write_text("\n".join(lines) + "\n")

    code = replay(
        config, "--candidate", "rule-follower", "--candidate", "stale", "--eval-set", str(path)
    )

    captured = capsys.readouterr()
    assert code == 0
    assert f"{path}:5: not valid JSON" in captured.err
    assert f"{path}:6: 'expect' (the expected answer) is missing" in captured.err
    assert per_model(upstream, marker) == {"rule-follower": 5, "stale": 5}
    rows = table(captured.out, "group")

    def scores(group: str, name: str) -> tuple[str, str]:
        return rows[group][f"{name} exact"], rows[group][f"{name} normalised"]

    assert scores("all", "rule-follower") == ("3/5 60%", "4/5 80%")
    assert scores("all", "stale") == ("2/5 40%", "3/5 60%")
    assert scores("task=weight", "rule-follower") == ("3/3 100%", "3/3 100%")
    assert scores("task=weight", "stale") == ("1/3 33%", "1/3 33%")
    assert scores("task=casing", "stale") == ("0/1 0%", "1/1 100%")
    assert scores("task=streamed", "stale") == ("1/1 100%", "1/1 100%")
    assert scores("difficulty=easy", "rule-follower") == ("1/2 50%", "2/2 100%")
    assert scores("difficulty=hard", "rule-follower") == ("2/3 67%", "2/3 67%")
    assert scores("difficulty=hard", "stale") == ("2/3 67%", "2/3 67%")
    assert set(table(captured.out, "group")) >= {"all", "task=weight", "difficulty=hard"}

    records = store.query(route="eval:shipping", limit=100)
    assert len(records) == 10
    assert all(r.tags == ("eval", "shipping") and r.arm is Arm.SHADOW for r in records)
    streamed = [r for r in records if r.request_id == "s1"]
    assert all(r.streamed and r.ttft_s is not None for r in streamed)
    pairs: list[PairRecord] = store.query_pairs(kind="eval")
    assert len(pairs) == 10 and {p.primary_target for p in pairs} == {"expect"}
    assert {p.pair_id for p in pairs} == {r.pair_id for r in records}
    stale_w1 = next(p for p in pairs if p.request_id == "w1" and p.candidate_target == "stale")
    assert not stale_w1.exact_equal and stale_w1.json_equal is False


def test_eval_items_score_by_json_equality_and_the_routes_rule_checks(
    tmp_path: Path, store: Store, upstream: MockUpstreamServer,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """`rule-follower` answers `{"max_weight": N}` for the N of its system prompt, `stale`
    always 100: JSON items are right whatever the spacing, checks items by the rule version the
    item's prompt resolves to."""
    path = write_config(tmp_path, upstream)
    doc = yaml.safe_load(path.read_text())
    doc["rules"] = {
        "shipping": {
            "routes": ["support-bot"],
            "checks": [{"name": "valid-json", "type": "json"}],
            "versions": {
                "v2": {
                    "match_prompt": r"max_weight\s*=\s*150",
                    "checks": [{"name": "max-weight", "type": "json_path",
                                "path": "$.max_weight", "equals": 150}],
                }
            },
        }
    }  # fmt: skip
    path.write_text(yaml.safe_dump(doc))
    marker = uuid.uuid4().hex

    def item(item_id: str, weight: int, **fields: Any) -> str:
        return json.dumps({"id": item_id, "input": f"How heavy? [{marker}]",
                           "system": f"max_weight = {weight}", **fields})  # fmt: skip

    lines = [
        item("j1", 150, expect={"json": {"max_weight": 150}}),  # follower right, stale wrong
        item("j2", 100, expect='{ "max_weight" : 100 }', score="json"),  # both right
        item("c1", 150, score="checks", route="support-bot"),  # follower passes v2, stale not
    ]
    evalset = tmp_path / "shipping.jsonl"
    evalset.write_text("\n".join(lines) + "\n")

    code = replay(
        path, "--candidate", "rule-follower", "--candidate", "stale", "--eval-set", str(evalset)
    )

    out = capsys.readouterr().out
    assert code == 0
    rows = table(out, "group")
    assert rows["all"]["rule-follower correct"] == "3/3 100%"
    assert rows["all"]["stale correct"] == "1/3 33%"
    # Exact and normalised compare with the expected value's JSON text (j2 only, for stale);
    # a checks item has no expected text.
    assert rows["all"]["stale exact"] == "1/3 33%"

    bad = tmp_path / "bad.jsonl"
    bad.write_text(item("c2", 150, score="checks", route="plain") + "\n")
    assert replay(path, "--candidate", "stale", "--eval-set", str(bad)) == 1
    err = capsys.readouterr().err
    assert "item 'c2': route 'plain' is not in the config" in err
    assert per_model(upstream, marker) == {"rule-follower": 3, "stale": 3}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"id": "a", "input": "q", "expect": "x", "score": "fuzzy"}, "'score' must be one of"),
        ({"id": "a", "input": "q", "score": "checks"}, "'score: checks' needs 'route'"),
        ({"id": "a", "input": "q", "expect": "x", "route": 7}, "'route' must be a non-empty"),
        ({"id": "a", "input": "q", "expect": "{not", "score": "json"}, "is not JSON text"),
        ({"id": "a", "input": "q", "score": ["checks"], "route": "r"}, "'score' must be one of"),
        ({"id": "a", "input": "q", "score": "checks", "route": 7}, "needs 'route'"),
        ({"id": "a", "input": "q", "score": "judge"}, "'score: judge' needs 'rubric'"),
        ({"id": "a", "input": "q", "score": "judge", "rubric": "x" * 30_000}, "needs 'rubric'"),
    ],
)
def test_bad_scoring_fields_are_named_by_line(
    tmp_path: Path, line: dict[str, Any], message: str
) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps(line) + "\n")
    evalset = read_eval_set(path)
    assert evalset.items == ()
    (problem,) = evalset.problems
    assert problem.startswith(f"{path}:1: ") and message in problem


def test_an_eval_line_nested_too_deeply_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    good = json.dumps({"id": "b", "input": "q", "expect": {"json": [1]}})
    path.write_text('{"id": "a", "input": "q", "expect": {"json": ' + deep + "}}\n" + good + "\n")
    evalset = read_eval_set(path)
    assert [item.item_id for item in evalset.items] == ["b"]
    assert evalset.items[0].method == "json" and evalset.items[0].expect_value == [1]
    (problem,) = evalset.problems
    assert problem.startswith(f"{path}:1: not valid JSON")


def test_eval_string_inputs_suit_anthropic_candidates(
    config: Path, store: Store, upstream: MockUpstreamServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    marker = uuid.uuid4().hex
    path = tmp_path / "claude.jsonl"
    path.write_text(
        json.dumps({"id": "1", "input": f"hi [{marker}]", "system": "be terse",
                    "expect": STALE_ANSWER}) + "\n"
    )  # fmt: skip
    assert replay(config, "--candidate", "stale-claude", "--eval-set", str(path)) == 0
    (request,) = sent(upstream, marker)
    assert request["max_tokens"] == 1024 and request["system"] == "be terse"
    assert request["messages"] == [{"role": "user", "content": f"hi [{marker}]"}]
    assert table(capsys.readouterr().out, "group")["all"]["stale-claude exact"] == "1/1 100%"


def test_with_bodies_none_answers_are_scored_but_not_stored(
    tmp_path: Path, store: Store, upstream: MockUpstreamServer, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tiny.jsonl"
    path.write_text(json.dumps({"id": "1", "input": "hi", "expect": STALE_ANSWER}) + "\n")
    config = write_config(tmp_path, upstream, bodies="none")
    assert replay(config, "--candidate", "stale", "--eval-set", str(path)) == 0
    assert table(capsys.readouterr().out, "group")["all"]["stale exact"] == "1/1 100%"
    (record,) = store.query(route="eval:tiny")
    assert (record.request_body, record.response_body, record.response_text) == (None,) * 3
    (pair,) = store.query_pairs(kind="eval")
    assert pair.exact_equal and pair.pair_id == record.pair_id
