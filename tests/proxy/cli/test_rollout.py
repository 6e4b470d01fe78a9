"""`mirrorgate rollout` against a gateway: what it prints, and its exit codes. The gateway runs in
process and the command reaches it through an in-process transport, except where the test is
about the network (an unreachable port, other servers' answers). The command run as its own
process against a real server: tests/e2e/test_rollout_cli.py."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from proxy.cli.main import build_parser, cmd_rollout, main
from tests.asgi_driver import sync_transport
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.api.test_rollouts import AUTH, ENV, TOKEN, ask, rollout, rollout_config

StartGateway = Callable[..., InProcessGateway]

pytestmark = pytest.mark.usefixtures("quick_rollout_ticks")


@pytest.fixture
def gw(start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch) -> InProcessGateway:
    """A gateway whose route `bot` has a canary (`stale`, steps 30 % then 60 %), and the admin
    token in the CLI's environment."""
    monkeypatch.setenv("MIRRORGATE_ADMIN_TOKEN", TOKEN)
    monkeypatch.delenv("MIRRORGATE_URL", raising=False)
    return start_gateway(extra=rollout_config(steps=[30, 60]), env=ENV)


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest) -> Run:
    """Run `mirrorgate rollout ARGS...` in-process: (exit code, stdout, stderr). In a test with
    the `gw` fixture its requests go to that gateway, otherwise over the network."""
    transport = None
    if "gw" in request.fixturenames:
        transport = sync_transport(request.getfixturevalue("gw").app_thread)

    def run_cli(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cmd_rollout(build_parser().parse_args(["rollout", *args]), transport)
        out, err = capsys.readouterr()
        return code, out, err

    return run_cli


def api_state(gw: InProcessGateway) -> dict[str, Any]:
    return rollout(gw.http)


def test_status_of_a_route_before_its_rollout(gw: InProcessGateway, run: Run) -> None:
    code, out, err = run("status", "bot", "--url", gw.url)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "route bot: pending"
    assert "candidate  stale (not started)" in out
    assert "serving    rule-follower (primary arm)" in out
    assert "transitions: none" in lines
    assert "verdicts: none for this rollout yet" in lines


def test_start_changes_the_route_and_a_repeat_changes_nothing(
    gw: InProcessGateway, run: Run
) -> None:
    code, out, err = run("start", "bot", "--url", gw.url, "--reason", "ship cand stale")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == (
        "route bot: changed by start — now progressing, step 1/2 at 30% of traffic"
    )
    assert "candidate    stale, judged against baseline rule-follower" in out
    assert "serving      rule-follower (primary arm); canary stale at 30%" in out
    assert "by operator: ship cand stale" in out
    state = api_state(gw)
    assert (state["phase"], state["weight_percent"]) == ("progressing", 30.0)
    assert state["transitions"][0]["reason"] == "ship cand stale"

    code, out, err = run("start", "bot", "--url", gw.url)
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == (
        "route bot: unchanged — already progressing, step 1/2 at 30% of traffic"
    )
    assert len(api_state(gw)["transitions"]) == 1  # the repeat wrote nothing

    code, out, _ = run("status", "bot", "--url", gw.url)
    assert code == 0
    assert out.splitlines()[0] == "route bot: progressing, step 1/2 at 30% of traffic"
    history = out.split("transitions (newest first):\n", 1)[1].splitlines()[0]
    assert history.split()[2:] == [
        "operator", "start", "pending", "→", "progressing", "30%", "ship", "cand", "stale"
    ]  # fmt: skip


def test_every_action_prints_the_new_state(gw: InProcessGateway, run: Run) -> None:
    assert run("start", "bot", "--url", gw.url)[0] == 0
    code, out, _ = run("pause", "bot", "--url", gw.url)
    assert code == 0 and out.startswith("route bot: changed by pause — now paused, step 1/2")
    code, out, _ = run("resume", "bot", "--url", gw.url)
    assert code == 0 and out.startswith("route bot: changed by resume — now progressing")
    code, out, _ = run("promote", "bot", "--url", gw.url)
    assert code == 0 and out.startswith("route bot: changed by promote — now promoted")
    assert "serving      stale (primary arm)" in out
    assert "override     stale as primary, instead of config primary rule-follower" in out
    code, out, _ = run("rollback", "bot", "--url", gw.url, "--reason", "pager")
    assert code == 0
    assert out.startswith("route bot: changed by rollback — now rolled_back to primary")
    assert "serving      rule-follower (primary arm)" in out
    assert "candidate    stale (its rollout's baseline: rule-follower)" in out
    code, out, _ = run("rollback", "bot", "--url", gw.url)
    assert code == 0 and out.startswith("route bot: unchanged — already rolled_back to primary")
    code, out, _ = run("rollback", "bot", "--to", "fallback", "--url", gw.url)
    assert code == 0
    assert out.startswith("route bot: changed by rollback — now rolled_back to fallback")
    assert "serving      echo (fallback arm)" in out
    code, out, _ = run("status", "bot", "--url", gw.url)
    assert code == 0 and out.startswith("route bot: rolled_back to fallback")
    assert [t["action"] for t in api_state(gw)["transitions"]] == [
        "rollback", "rollback", "promote", "resume", "pause", "start"
    ]  # fmt: skip


def test_an_illegal_transition_exits_1_naming_the_phase(gw: InProcessGateway, run: Run) -> None:
    code, out, err = run("pause", "bot", "--url", gw.url)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1
    assert err.startswith("mirrorgate: cannot pause route 'bot' while pending")
    assert "current phase: pending" in err
    code, _, err = run("start", "echo", "--url", gw.url)  # a route without a canary
    assert code == 1
    assert "the route has no canary in its config" in err and "current phase: idle" in err
    assert api_state(gw)["phase"] == "pending"


def test_a_missing_or_wrong_token_exits_1(
    gw: InProcessGateway, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRRORGATE_ADMIN_TOKEN", "not-the-token")
    code, out, err = run("start", "bot", "--url", gw.url)
    assert (code, out) == (1, "")
    assert err.startswith("mirrorgate: the gateway refused the token in MIRRORGATE_ADMIN_TOKEN")
    assert "(403: " in err
    monkeypatch.delenv("MIRRORGATE_ADMIN_TOKEN")
    code, out, err = run("status", "--url", gw.url)
    assert (code, out) == (1, "")
    assert "needs a token: set MIRRORGATE_ADMIN_TOKEN (401: " in err
    assert api_state(gw)["phase"] == "pending"


def test_an_unknown_route_exits_1(gw: InProcessGateway, run: Run) -> None:
    for action in ("status", "start"):
        code, out, err = run(action, "nope", "--url", gw.url)
        assert (code, out) == (1, "")
        assert err == f"mirrorgate: no route 'nope' on {gw.url} (404)\n"


def test_an_unreachable_gateway_exits_1(
    run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as sock:  # a port nobody listens on once this closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MIRRORGATE_URL", f"http://127.0.0.1:{port}")
    code, out, err = run("status")
    assert (code, out) == (1, "")
    assert err == (
        f"mirrorgate: cannot reach the gateway at http://127.0.0.1:{port}: connection refused "
        "(set --url or $MIRRORGATE_URL)\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["explode", "bot"],
        ["advance", "bot"],  # the judge's action, not an operator's
        ["start"],
        ["status", "bot", "--reason", "why"],
        ["status", "--url", "ftp://127.0.0.1"],
        ["status", "--timeout", "0"],
        ["status", "bot", "extra"],
        ["pause", "bot", "--to", "fallback"],  # only a rollback has a target
        ["rollback", "bot", "--to", "elsewhere"],
    ],
)
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["rollout", *args])
    assert info.value.code == 2
    assert "usage: mirrorgate" in capsys.readouterr().err


def test_a_bad_url_in_the_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MIRRORGATE_URL", "localhost:8080")
    with pytest.raises(SystemExit) as info:
        main(["rollout", "status"])
    assert info.value.code == 2
    assert "$MIRRORGATE_URL must be an http:// or https:// URL" in capsys.readouterr().err


def test_json_prints_the_api_answer(
    gw: InProcessGateway, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRRORGATE_URL", gw.url + "/")  # the default, with a trailing slash
    code, out, _ = run("start", "bot", "--json", "--reason", "r")
    assert code == 0
    answer = json.loads(out)
    assert answer["changed"] is True
    assert (answer["rollout"]["phase"], answer["rollout"]["reason"]) == ("progressing", "r")
    code, out, _ = run("status", "bot", "--json")
    one = json.loads(out)
    assert code == 0 and one["rollout_id"] == answer["rollout"]["rollout_id"]
    assert [t["action"] for t in one["transitions"]] == ["start"]
    code, out, _ = run("status", "--json")
    every = json.loads(out)
    assert code == 0 and every["store_reachable"] is True
    assert {r["route"]: r["phase"] for r in every["rollouts"]}["bot"] == "progressing"


def test_status_without_a_route_lists_every_route(gw: InProcessGateway, run: Run) -> None:
    run("start", "bot", "--url", gw.url)
    code, out, _ = run("status", "--url", gw.url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "ROUTE", "PHASE", "STEP", "CANARY", "CANDIDATE", "SERVING", "LAST", "CHANGE"
    ]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["bot"][:6] == ["bot", "progressing", "1/2", "30%", "stale", "rule-follower"]
    assert rows["bot"][-1] == "operator"
    assert rows["echo"] == ["echo", "-", "-", "-", "-", "echo", "-"]
    assert len(rows) == len(api_routes(gw))


def api_routes(gw: InProcessGateway) -> list[str]:
    body = gw.http.get("/admin/rollouts", headers=AUTH).json()
    return [r["route"] for r in body["rollouts"]]


def test_status_shows_the_latest_verdict_of_each_metric(gw: InProcessGateway, run: Run) -> None:
    run("start", "bot", "--url", gw.url)
    for i in range(150):  # about 45 on the canary: above min_samples (20) for certain
        ask(gw.http, f"user-{i}")
    wait_until(
        lambda: any(
            v["metric"] == "error_rate" and v["n_candidate"] + v["n_primary"] == 150
            for v in rollout(gw.http)["verdicts"]
        ),
        what="a look at all 150 requests",
    )
    code, out, _ = run("status", "bot", "--url", gw.url)
    assert code == 0
    block = out.split("verdicts (latest per metric; look ", 1)[1].splitlines()
    names = [line.split()[1] for line in block[1:]]
    assert len(names) == len(set(names))  # one line per metric
    rows = {line.split()[1]: line.split() for line in block[1:]}
    error_rate = rows["error_rate"]
    # No errors on either arm, but ~45 canary answers cannot show the 2-point margin yet: the
    # line says how many more it needs.
    assert error_rate[0] == "inconclusive"
    assert error_rate[2] == "+0.00" and "limit" in error_rate and "+2" in error_rate
    assert "needs" in error_rate and error_rate[error_rate.index("needs") + 1].isdigit()
    latency = rows["latency_p50"]
    # A ratio against a ratio limit (here the 50 ms floor of a ~1 ms fake model, far above x1.2).
    assert latency[2].startswith("x") and latency[latency.index("limit") + 1].startswith("x")
    check = rows["check_pass_rate:max-weight"]
    assert check[2] == "(shipping@v1)"  # the rule epoch the check was judged on
    (forecast,) = [line for line in out.splitlines() if line.startswith("  forecast ")]
    assert "this step passes in ~" in forecast and "held by" in forecast


def test_plan_sizes_the_steps_on_the_routes_recent_traffic(gw: InProcessGateway, run: Run) -> None:
    for i in range(60):
        ask(gw.http, f"user-{i}")
    wait_until(
        lambda: gw.http.get("/admin/rollouts/bot/plan", headers=AUTH).json()["traffic"]["requests"]
        == 60,
        what="the 60 requests recorded",
    )
    body = gw.http.get("/admin/rollouts/bot/plan?since=2h", headers=AUTH).json()
    assert [s["weight_percent"] for s in body["steps"]] == [30, 60]
    assert body["since"] == "2h" and body["traffic"]["error_rate"] == 0.0
    code, out, _ = run("plan", "bot", "--url", gw.url, "--since", "2h")
    assert code == 0
    # Seconds of data, not 2 h: the plan says over what span it measured the rate.
    assert out.startswith("route bot: plan on the ")
    assert "of traffic there is (of the last 2h" in out
    assert body["span_s"] < 600
    rows = [line.split() for line in out.splitlines()[2:4]]
    assert [r[0] for r in rows] == ["30%", "60%"]
    (overall,) = [line for line in out.splitlines() if line.startswith("the first step passes")]
    assert ", promotion in ~" in overall and "9 in 10 rollouts by" in overall
    code, _, err = run("plan", "bot", "--url", gw.url, "--since", "last tuesday")
    assert code == 1 and "since" in err
    code, _, err = run("plan", "nope", "--url", gw.url)
    assert code == 1 and "nope" in err


class StubGateway:
    """An HTTP server on 127.0.0.1 answering every request with one canned response."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                self.rfile.read(length)
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # `close` waits for the loop's next poll: every 10 ms rather than the default 0.5 s.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[Callable[[int, Any], StubGateway]]:
    started: list[StubGateway] = []

    def start(status: int, body: Any) -> StubGateway:
        raw = json.dumps(body).encode() if not isinstance(body, bytes) else body
        kind = "text/html" if isinstance(body, bytes) else "application/json"
        started.append(StubGateway(status, raw, kind))
        return started[-1]

    yield start
    for server in started:
        server.close()


STORE_DOWN = {
    "error": {
        "message": "nothing changed: writing rollout state: (OperationalError) ...",
        "type": "server_error",
        "param": None,
        "code": None,
    }
}


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (
            503,
            STORE_DOWN,
            "the gateway cannot reach its store, nothing changed; retry later (503: nothing "
            "changed: writing rollout state",
        ),
        (404, b"<h1>Not Found</h1>", "has no /admin/rollouts/bot/start (404): is it a mirrorgate"),
        (200, b"<html>ok</html>", "with something other than a JSON object"),
        (500, b"<h1>Internal Server Error</h1>", "answered 500: <h1>Internal Server Error</h1>"),
    ],
)
def test_other_answers_exit_1_with_one_line(
    stub: Callable[[int, Any], StubGateway], run: Run, status: int, body: Any, expected: str
) -> None:
    server = stub(status, body)
    code, out, err = run("start", "bot", "--url", server.url)
    assert (code, out) == (1, "")
    assert err.startswith("mirrorgate: ") and err.count("\n") == 1
    assert expected in err
