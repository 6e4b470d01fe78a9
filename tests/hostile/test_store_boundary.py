"""The store's boundary under attack (issue 12): planted secrets found in no table, no log line and
no admin answer; NUL and lone surrogates through every endpoint on PostgreSQL; nesting that breaks
parsers; readiness that tells the truth (SQLite file deleted, its folder gone, PostgreSQL cut off);
integers beyond 64 bits forwarded exactly; a store that cannot be opened at start; client-chosen
rule versions bounded.

Real parts only: a gateway in process or as `mirrorgate serve`, the mock upstream on 127.0.0.1,
SQLite files and the machine's PostgreSQL.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from proxy.gateway.rules import PENDING_MAX, RuleMatch, RuleTracker, VersionPolicy
from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.observability import GatewayMetrics
from proxy.store import RuleEventStore, Store
from tests.alerts.alert_factory import ALERTMANAGER_PAYLOAD as ALERT
from tests.conftest import InProcessGateway, seed_sqlite, wait_until
from tests.e2e.tcp_forwarder import TcpForwarder

TOKEN = "adm1n-t0ken-Zq9Wx7Vb5Nm3"
AUTH = {"authorization": f"Bearer {TOKEN}"}
PROVIDER_KEY = "sk-provider-Pk1Pk2Pk3Pk4Pk5Pk6Pk7Pk8"
CLIENT_KEY = "sk-client-Ck1Ck2Ck3Ck4Ck5Ck6Ck7Ck8Ck9"
ENV = {"MIRRORGATE_ADMIN_TOKEN": TOKEN, "LEAKY_PROVIDER_KEY": PROVIDER_KEY}
CREDENTIALS = {"admin token": TOKEN, "provider key": PROVIDER_KEY, "client key": CLIENT_KEY}
"""Never stored nor logged, whatever `store.bodies` says."""

SECRETS = {
    "openai key": "sk-proj-Zq7Xw2Lm9Nb4Vc1Kd8Fh3Jg6Ts5Ry0Pa",
    "anthropic key": "sk-ant-api03-Hh7Gg6Ff5Ee4Dd3Cc2Bb1Aa0Zz9Yy8Xx",
    "aws key id": "AKIAQ7WXYZ2ABCDEF3GH",
    "aws secret": "wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLEKEY9",
    "google key": "AIzaSyD3f9Gh2Jk5Lm8Np1Qr4St7Vw0Xy3Za6Bc",
    "github token": "ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8",
    "github pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123",
    "slack token": "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp",
    "slack webhook": "T0ABCDEFG/B0HIJKLMN/q1w2e3r4t5y6u7i8o9p0",
    "stripe key": "sk_live_51HqLyjK9z8X7w6V5u4T3s2R1q",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlX2hlcmVfb2s",
    "bearer token": "tok3nVa1ueBear3rXYZ123456",
    "password": "hunter2-Secr3t!",
    "secret field": "plainfieldvalue-9876",
    "json in a string": "innerjsonsecret-4242",
    "private key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
    "e-mail": "jane.doe@example.com",
    "non-ascii e-mail": "jörg.müller@example.de",
    "idn e-mail": "info@bücher-café.de",
}
PLANTED = (
    f"keys {SECRETS['openai key']} {SECRETS['anthropic key']} {SECRETS['aws key id']} "
    f"aws_secret_access_key={SECRETS['aws secret']} {SECRETS['google key']} "
    f"{SECRETS['github token']} {SECRETS['github pat']} {SECRETS['slack token']} "
    f"https://hooks.slack.com/services/{SECRETS['slack webhook']} {SECRETS['stripe key']} "
    f"{SECRETS['jwt']} Authorization: Bearer {SECRETS['bearer token']} "
    f"password={SECRETS['password']} "
    f'{{"api_key": "{SECRETS["secret field"]}", '
    f'"n": {{"password": "{SECRETS["json in a string"]}"}}}} '
    f"-----BEGIN PRIVATE KEY-----\n{SECRETS['private key']}\n-----END PRIVATE KEY----- "
    f"mail {SECRETS['e-mail']}, {SECRETS['non-ascii e-mail']} or {SECRETS['idn e-mail']}"
)
"""Every planted secret, in the context a real text would carry it."""

LEAKY_ANSWER = json.dumps({"note": SECRETS["openai key"] + " " + SECRETS["e-mail"]})


def _forms(value: str) -> set[str]:
    """`value` as text and as a JSON string's content (non-ASCII escaped, as clients send it)."""
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}


def _found(texts: list[str], secrets: dict[str, str]) -> list[str]:
    return sorted(
        name
        for name, value in secrets.items()
        if any(form in text for text in texts for form in _forms(value))
    )


def _every_stored_text(engine: sa.Engine) -> list[str]:
    """Every text value of every table of the store."""
    texts: list[str] = []
    meta = sa.MetaData()
    meta.reflect(engine)
    with engine.connect() as conn:
        for table in meta.sorted_tables:
            for row in conn.execute(sa.select(table)):
                texts.extend(v for v in row if isinstance(v, str))
    return texts


@pytest.fixture(scope="module")
def leaky_upstream() -> Iterator[MockUpstreamServer]:
    """`echo` says back what it was asked; `leaky` answers JSON quoting secrets."""
    behavior = {
        "default": {"answer": {"type": "echo", "answer_tokens": 400}},
        "models": {"leaky": {"answer": {"type": "fixed", "text": LEAKY_ANSWER}}},
    }
    with MockUpstreamServer(parse_behavior(behavior)) as server:
        yield server


def _leaky_config(upstream_url: str) -> dict[str, Any]:
    def model(name: str) -> dict[str, Any]:
        return {"provider": "openai", "base_url": upstream_url + "/v1", "model": name,
                "timeout_s": 5, "api_key_env": "LEAKY_PROVIDER_KEY"}  # fmt: skip

    note = {"name": "note", "type": "json_path", "path": "$.note", "equals": "nothing"}
    return {
        "models": {"echo-k": model("echo"), "leaky": model("leaky")},
        "routes": {
            "bot": {
                "primary": "echo-k",
                "canary": {"model": "leaky", "steps": [50], "step_interval_s": 3600},
            },
            "leak": {"primary": "leaky"},
        },
        "rules": {
            "support": {
                "routes": ["leak", "bot"],
                "version": "header:x-rule-version",
                "versions": {"v1": {"checks": [note]}, "v2": {"checks": [note]}},
            }
        },
    }


def _ask(client: httpx.Client, route: str, version: str, system: str) -> httpx.Response:
    response = client.post(
        "/v1/chat/completions",
        headers={"x-rule-version": version, "authorization": f"Bearer {CLIENT_KEY}"},
        json={
            "model": route,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": PLANTED},
            ],
            "metadata": {"api_key": SECRETS["secret field"]},
        },
    )
    assert response.status_code == 200, response.text
    return response


@pytest.mark.parametrize("bodies", ["redacted", "none", "full"])
def test_planted_secrets_are_in_no_table_no_log_and_no_admin_answer(
    bodies: str,
    leaky_upstream: MockUpstreamServer,
    start_gateway: Callable[..., InProcessGateway],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    extra = _leaky_config(leaky_upstream.url) | {"store": {"bodies": bodies}}
    gw = start_gateway(extra=extra, env=ENV)
    with gw.client() as client:
        # A rule change whose system prompts carry every secret (the event stores their diff).
        _ask(client, "leak", "v1", f"Rules, first edition. {PLANTED}")
        answered = _ask(client, "leak", "v2", f"Rules, second edition. {PLANTED}")
        request_id = answered.headers["x-mirrorgate-request-id"]
        wait_until(lambda: len(gw.gateway.store.query_checks()) >= 2, what="check results")
        feedback = client.post(
            "/v1/feedback",
            json={
                "request_id": request_id,
                "correction": PLANTED,
                "label": f"password={SECRETS['password']}",
            },
        )
        assert feedback.status_code == 201, feedback.text
        started = client.post("/admin/rollouts/bot/start", headers=AUTH, json={"reason": PLANTED})
        assert started.status_code == 200, started.text
        alert = copy.deepcopy(ALERT)
        alert["alerts"][0]["annotations"]["summary"] = PLANTED[:1000]
        rolled = client.post("/hooks/alertmanager", headers=AUTH, json=alert)
        assert rolled.status_code == 200 and rolled.json()["rollbacks"][0]["done"] == "rolled_back"
        wait_until(lambda: len(gw.gateway.rule_events.events()) == 2, what="the rule events")
        rules = client.get("/admin/rules", headers=AUTH)
        history = client.get("/admin/rollouts/bot", headers=AUTH)
    wait_until(lambda: gw.gateway.recorder.pending() == 0, what="the recorder to drain")
    stored = _every_stored_text(gw.gateway.store.engine)
    logged = [record.getMessage() for record in caplog.records]
    served = [rules.text, history.text]

    assert _found(stored + logged + served, CREDENTIALS) == []
    if bodies == "full":  # bodies as received: the operator asked for them
        assert _found(stored, {"body": SECRETS["openai key"]}) == ["body"]
        assert _found(logged, SECRETS) == []
        return
    assert _found(stored, SECRETS) == []
    assert _found(logged, SECRETS) == []
    assert _found(served, SECRETS) == []
    # What the tables hold instead: the marks, or (none) nothing of the answer at all.
    reasons = [c.reason for c in gw.gateway.store.query_checks()]
    if bodies == "none":
        assert set(reasons) == {"(not kept: store.bodies is none)"}
        assert all(e.prompt_diff is None for e in gw.gateway.rule_events.events())
        said = [f for f in gw.gateway.feedback.feedback.query() if f.kind == "correction"]
        assert [(f.correction, f.corrected) for f in said] == [(None, True)]
    else:
        assert all("[REDACTED:openai_key]" in r for r in reasons)
        diff = gw.gateway.rule_events.events()[-1].prompt_diff or ""
        assert "[REDACTED:jwt]" in diff and "[REDACTED:email]" in diff


REFUSED = "nul \u0000 and a lone surrogate \ud800 in one text"


def test_nul_and_lone_surrogates_reach_every_table_on_postgresql(
    pg_schema: tuple[str, str],
    leaky_upstream: MockUpstreamServer,
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    db_url, _schema = pg_schema
    gw = start_gateway(db_url=db_url, extra=_leaky_config(leaky_upstream.url), env=ENV)
    with gw.client() as client:
        _ask(client, "leak", "v1", "Rules, first edition.")
        # orjson refuses a lone surrogate in a request body; NUL it takes (as `\u0000`).
        answered = _ask(client, "leak", "v2", "Rules, second edition with a \u0000 in it.")
        request_id = answered.headers["x-mirrorgate-request-id"]
        feedback = client.post(
            "/v1/feedback",
            json={"request_id": request_id, "correction": "x\u0000y", "label": "a\u0000"},
        )
        assert feedback.status_code == 201, feedback.text
        started = client.post(
            "/admin/rollouts/bot/start", headers=AUTH, json={"reason": "go\u0000"}
        )
        assert started.status_code == 200, started.text
        alert = copy.deepcopy(ALERT)
        alert["alerts"][0]["annotations"]["summary"] = REFUSED  # the stdlib parser lets \ud800 in
        body = json.dumps(alert).encode()  # ASCII: the surrogate travels as its \ud800 escape
        rolled = client.post(
            "/hooks/alertmanager",
            headers={**AUTH, "content-type": "application/json"},
            content=body,
        )
        assert rolled.status_code == 200, rolled.text
        assert rolled.json()["rollbacks"][0]["done"] == "rolled_back"
        history = client.get("/admin/rollouts/bot", headers=AUTH).json()["transitions"]
        # Rule-change events are stored in the background: wait for both.
        wait_until(lambda: len(gw.gateway.rule_events.events()) == 2, what="the rule events")
        rules = client.get("/admin/rules", headers=AUTH).json()["rule_versions"]
    assert [t["action"] for t in history][:2] == ["rollback", "start"]
    assert history[0]["reason"].endswith("nul \ufffd and a lone surrogate \ufffd in one text")
    assert history[1]["reason"] == "go\ufffd"
    assert [v["version"] for v in rules] == ["v1", "v2"]  # the rule-change event is not lost
    assert "\ufffd" in (rules[1]["prompt_diff"] or "")
    stored = gw.gateway.feedback.feedback.query(request_id=request_id)
    assert {(f.kind, f.correction, f.label) for f in stored} == {
        ("correction", "x\ufffdy", None), ("label", None, "a\ufffd"),
    }  # fmt: skip
    wait_until(lambda: gw.gateway.recorder.pending() == 0, what="the recorder to drain")
    assert gw.gateway.recorder.write_problem is None


DEEP = b"[" * 5_000 + b"]" * 5_000
DEEP_OBJECT = b'{"a":' * 2_000 + b"1" + b"}" * 2_000
"""Both under every endpoint's size limit (the admin actions take 16 KiB)."""


@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["arrays", "objects"])
def test_deeply_nested_json_is_a_400_on_every_endpoint_that_parses_json(
    body: bytes,
    start_gateway: Callable[..., InProcessGateway],
    leaky_upstream: MockUpstreamServer,
) -> None:
    gw = start_gateway(extra=_leaky_config(leaky_upstream.url), env=ENV)
    json_headers = {**AUTH, "content-type": "application/json"}
    with gw.client() as client:
        before = client.get("/admin/rollouts/bot", headers=AUTH).json()
        for path in (
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/feedback",
            "/admin/rollouts/bot/start",
            "/hooks/alertmanager",
        ):
            response = client.post(path, headers=json_headers, content=body)
            assert response.status_code == 400, (path, response.status_code, response.text[:300])
            message = response.json()["error"]["message"]
            assert "nest" in message or "depth" in message, (path, message)
        assert client.get("/admin/rollouts/bot", headers=AUTH).json() == before  # unchanged


def test_integers_beyond_64_bits_reach_the_upstream_exactly(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer
) -> None:
    gw = start_gateway()
    big, small = 2**70, -(2**63) - 1  # orjson alone would make floats of both
    body = (
        f'{{"model": "echo", "seed": {big}, "messages": [{{"role": "user", "content": "hi"}}],'
        f' "metadata": {{"low": {small}, "list": [{big}, 1.5, 3]}}}}'
    )
    with gw.client() as client:
        response = client.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 200, response.text
        request_id = response.headers["x-mirrorgate-request-id"]
    forwarded = [
        r
        for r in httpx.get(upstream.url + "/_mock/requests").json()
        if r["headers"].get("x-mirrorgate-request-id") == request_id
    ] or httpx.get(upstream.url + "/_mock/requests").json()[-1:]
    raw = forwarded[-1]["raw"]
    assert str(big) in raw and str(small) in raw and "e+21" not in raw
    sent = json.loads(raw)
    assert sent["seed"] == big and sent["metadata"] == {"low": small, "list": [big, 1.5, 3]}


def test_readyz_fails_while_the_sqlite_file_is_gone_and_recovers_with_a_new_one(
    tmp_path: Path, start_gateway: Callable[..., InProcessGateway]
) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "gw.db"
    gw = start_gateway(db_url=f"sqlite:///{db}")
    registry = gw.gateway.registry

    def ask(client: httpx.Client) -> str:
        response = client.post(
            "/v1/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert response.status_code == 200
        return str(response.headers["x-mirrorgate-request-id"])

    def stored(request_ids: list[str]) -> set[str]:
        # Read-only: a reader must not create the file it looks for.
        engine = sa.create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text("SELECT request_id FROM exchanges")).scalars().all()
        except sa.exc.OperationalError:  # no file yet, or no schema in it yet
            return set()
        finally:
            engine.dispose()
        return set(rows) & set(request_ids)

    with gw.client() as client:
        before = [ask(client) for _ in range(5)]
        wait_until(lambda: stored(before) == set(before), what="the first records")
        assert client.get("/readyz").status_code == 200

        # The file deleted: the writer opens a new one at the path; nothing written after the
        # deletion goes into the unlinked inode.
        db.unlink()
        after = [ask(client) for _ in range(5)]
        wait_until(lambda: db.exists() and stored(after) == set(after), what="a new file")
        assert registry.get_sample_value("mirrorgate_store_file_reopened_total") == 1
        assert client.get("/readyz").status_code == 200

        # The folder gone too: nothing can be written, readiness says why until it is back.
        # Moved away in one step, then removed: a writer that reopens the file at its path
        # between rmtree's unlinks and its rmdir made "Directory not empty" (seen once).
        gone = tmp_path / "gone"
        folder.rename(gone)
        shutil.rmtree(gone)
        during = [ask(client) for _ in range(3)]
        not_ready = wait_until(
            lambda: (r := client.get("/readyz")).status_code == 503 and r, what="readyz 503"
        )
        assert not_ready.json()["writes"] is False
        assert "was deleted" in not_ready.json()["reason"]
        folder.mkdir()
        wait_until(lambda: client.get("/readyz").status_code == 200, what="readyz recovering")
        wait_until(lambda: stored(during) == set(during), what="the held records written")
    assert registry.get_sample_value("mirrorgate_store_file_reopened_total") == 2


@pytest.mark.e2e  # PostgreSQL behind a real TCP forwarder that cuts its connections
def test_readyz_fails_while_postgresql_is_cut_off_and_recovers(
    pg_schema: tuple[str, str], start_gateway: Callable[..., InProcessGateway]
) -> None:
    db_url, _schema = pg_schema
    with TcpForwarder("127.0.0.1", 5432) as forwarder:
        via = db_url.replace("127.0.0.1:5432", f"127.0.0.1:{forwarder.port}")
        gw = start_gateway(db_url=via)
        with gw.client() as client:
            assert client.get("/readyz").status_code == 200
            forwarder.cut()
            answer = client.post(
                "/v1/chat/completions",
                json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert answer.status_code == 200  # the client path never waits for the store
            down = wait_until(
                lambda: (r := client.get("/readyz")).status_code == 503 and r, what="readyz 503"
            )
            assert down.json()["store"] is False and down.json()["reason"]
            forwarder.restore()
            wait_until(lambda: client.get("/readyz").status_code == 200, what="readyz 200")
            wait_until(lambda: gw.gateway.recorder.pending() == 0, what="the held record")
            assert gw.gateway.recorder.write_problem is None


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("url", "shown", "cause"),
    [
        (
            "postgresql+psycopg://mg:s3cretpw@127.0.0.1:1/test",
            "postgresql+psycopg://mg:***@127.0.0.1:1/test",
            "Connection refused",
        ),
        ("sqlite:////nonexistent-mirrorgate/dir/x.db", "sqlite:////nonexistent-mirrorgate/dir/x.db",
         "does not exist"),
    ],
    ids=["postgresql-down", "sqlite-folder-missing"],
)  # fmt: skip
def test_a_store_that_cannot_be_opened_at_start_is_one_line_and_exit_1(
    tmp_path: Path, url: str, shown: str, cause: str
) -> None:
    config = tmp_path / "mirrorgate.yaml"
    config.write_text(
        json.dumps({
            "store": {"url": url},
            "models": {"m": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                             "model": "m"}},
            "routes": {"r": {"primary": "m"}},
        })
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    # One line says why; the config's warnings (logged before the store is reached) may precede.
    lines = [
        ln for ln in done.stderr.strip().splitlines() if " WARNING mirrorgate: config: " not in ln
    ]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"mirrorgate: cannot use the store at {shown}: ")
    assert cause in lines[0] and "s3cretpw" not in done.stderr + done.stdout


def test_client_chosen_rule_versions_far_past_the_caps_leave_rows_logs_and_memory_bounded(
    tmp_path: Path, migrated_sqlite: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What bounds the rows, the log lines and the memory are the rule's max_versions (64) and
    # PENDING_MAX: the flood is sized from them, four times PENDING_MAX distinct versions (64
    # times max_versions). Past the cap a version is carried as overflow and remembered nowhere,
    # so a longer flood does the same again.
    caplog.set_level(logging.INFO, logger="mirrorgate.rules")
    url = f"sqlite:///{tmp_path / 'rules.db'}"
    seed_sqlite(url, migrated_sqlite)
    store = Store(url)
    store.migrate()
    events = RuleEventStore(store)
    registry = CollectorRegistry()
    tracker = RuleTracker(
        events,
        keep_prompts=True,
        metrics=GatewayMetrics(registry),
        policies={"support": VersionPolicy(min_requests=3, max_versions=64)},
    )
    flood_size = 4 * PENDING_MAX

    async def flood() -> set[str]:
        carried: set[str] = set()
        for i in range(flood_size):
            version = f"client-{i:06d}"
            for repeat in range(3):  # each recurs enough to open, if there were room
                match = RuleMatch("support", version, f"prompt {i}")
                carried.add(tracker.observe(match, "bot", f"req-{i}-{repeat}").version)
        await tracker.tasks.wait(30)
        return carried

    carried = asyncio.run(flood())
    opened = [e.version for e in events.events()]
    assert len(opened) == 64 and len(carried) == 65  # 64 versions, then `overflow`
    open_versions, pending = tracker.versions("support")
    assert open_versions == 64 and pending <= PENDING_MAX
    lines = [r for r in caplog.records if r.getMessage().startswith("rule change:")]
    assert len(lines) == 64
    overflowed = registry.get_sample_value(
        "mirrorgate_rule_versions_overflow_total", {"rule": "support"}
    )
    assert overflowed == 3 * (flood_size - 64)
    store.close()
