"""The rollouts pages of a gateway's console (in process): a route's state, verdicts and
timeline, a real rollback's evidence, and the buttons — which only an admin's confirmed,
CSRF-carrying post can press."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from proxy.config import RouteSpec
from proxy.core import Action, Arm, CheckRecord, ExchangeRecord, Status, initial_state, transition
from proxy.store import RolloutStore, Store
from tests.conftest import InProcessGateway, wait_until
from tests.proxy.api.test_rollouts import AUTH, ask, rollout, rollout_config
from tests.proxy.console.console_client import (
    ENV,
    FORM,
    REVIEWER_TOKENS,
    csrf_of,
    hidden,
    signed_in,
)

pytestmark = pytest.mark.usefixtures("quick_rollout_ticks")
Start = Callable[..., InProcessGateway]
ENV_ADMIN = {**ENV, "MIRRORGATE_ADMIN_TOKEN": AUTH["authorization"].removeprefix("Bearer ")}
ADMIN = ENV_ADMIN["MIRRORGATE_ADMIN_TOKEN"]


@pytest.fixture
def gateway(start_gateway: Start) -> InProcessGateway:
    return start_gateway(extra=rollout_config(), env=ENV_ADMIN)


def _text(html: str) -> str:
    """The page's text, roughly as a reader sees it (tags dropped, entities kept)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def press(
    client: httpx.Client, action: str, reason: str, route: str = "bot", **extra: str
) -> httpx.Response:
    """Press a button as the page does: open its confirmation page, then submit it."""
    confirm = client.get(f"/ui/rollouts/{route}/confirm", params={"action": action})
    assert confirm.status_code == 200, confirm.text
    data = {"csrf": hidden(confirm.text, "csrf"), "confirm": action, "reason": reason, **extra}
    return client.post(f"/ui/rollouts/{route}/{action}", data=data)


def test_a_running_rollouts_page_says_when_its_step_passes(gateway: InProcessGateway) -> None:
    gateway.http.post("/admin/rollouts/bot/start", headers=AUTH, json={}).raise_for_status()
    for i in range(30):
        ask(gateway.http, f"user-{i}")
    wait_until(lambda: rollout(gateway.http)["verdicts"], what="a look")
    text = _text(signed_in(gateway, ADMIN).get("/ui/rollouts/bot").text)
    assert re.search(r"Forecast this step passes in ~\S+ (s|min|h)", text)
    assert "held by" in text


def test_every_route_is_listed_with_its_phase_step_and_weight(gateway: InProcessGateway) -> None:
    gateway.http.post("/admin/rollouts/bot/start", headers=AUTH, json={}).raise_for_status()
    page = signed_in(gateway, ADMIN).get("/ui/rollouts")
    assert page.status_code == 200
    assert 'href="/ui/rollouts/bot"' in page.text
    text = _text(page.text)
    assert "progressing" in text and "1 of 1" in text and "50%" in text


def test_a_real_rollback_shows_its_evidence_side_by_side(gateway: InProcessGateway) -> None:
    client = gateway.http
    client.post("/admin/rollouts/bot/start", headers=AUTH, json={}).raise_for_status()
    for i in range(80):  # rule v1: both models answer 100, both pass
        ask(client, f"user-{i}")
    for i in range(300):  # rule v2 wants 150; the stale candidate still says 100
        ask(client, f"user-{i}", version="v2", weight=150)
        if i % 10 == 9 and rollout(client)["phase"] == "rolled_back":
            break
    state = wait_until(
        lambda: (body := rollout(client))["phase"] == "rolled_back" and body, what="rollback"
    )
    page = signed_in(gateway, ADMIN).get("/ui/rollouts/bot")
    assert page.status_code == 200
    html = page.text
    text = _text(html)
    evidence = html[html.index('id="evidence"') : html.index('id="timeline"')]
    assert "Rollback at" in evidence and "by judge" in _text(evidence)
    assert "check_pass_rate:max-weight" in evidence
    # Each example: the request, the canary's failing answer beside the baseline's answer to an
    # identical request, and the check that failed.
    examples = evidence.split('<article class="example">')[1:]
    assert examples
    first = examples[0]
    assert "Shipping rule: max_weight = 150" in first
    assert first.index("Failed: stale") < first.index("Baseline, identical request: rule-follower")
    assert "{&quot;max_weight&quot;: 100}" in first and "{&quot;max_weight&quot;: 150}" in first
    assert re.search(r'class="fail">fail</span> shipping@v2 max-weight', first)
    # The verdict table: interval, needs and ETA columns; and the timeline with actor and reason.
    assert '<th scope="col">Interval</th>' in html and '<th scope="col">ETA</th>' in html
    assert "progressing → rolled_back (rollback" in text
    assert state["reason"][:40] in text.replace("&gt;", ">")


def test_an_admin_pauses_resumes_and_rolls_back_with_reasons(gateway: InProcessGateway) -> None:
    gateway.http.post("/admin/rollouts/bot/start", headers=AUTH, json={}).raise_for_status()
    admin = signed_in(gateway, ADMIN)
    paused = press(admin, "pause", "<script>alert('x')</script> hold on")
    assert paused.status_code == 303
    assert paused.headers["location"] == "/ui/rollouts/bot?done=pause"
    state = rollout(gateway.http)
    assert state["phase"] == "paused"
    assert state["actor"].startswith("console:admin-")
    assert ADMIN not in state["actor"]
    page = admin.get(paused.headers["location"]).text
    assert 'role="status">Paused.' in page
    assert "<dt>Forecast</dt><dd>paused: the step moves on only after a resume</dd>" in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; hold on" in page
    assert "<script>alert" not in page
    assert press(admin, "resume", "go on").status_code == 303
    assert rollout(gateway.http)["phase"] == "progressing"
    rolled = press(admin, "rollback", "bad answers", to="fallback")
    assert rolled.status_code == 303
    after = rollout(gateway.http)
    assert (after["phase"], after["rolled_back_to"]) == ("rolled_back", "fallback")
    assert press(admin, "restore", "fixed").status_code == 303
    assert rollout(gateway.http)["override"] is None


def test_the_buttons_are_offered_only_where_the_phase_allows(gateway: InProcessGateway) -> None:
    admin = signed_in(gateway, ADMIN)

    def enabled() -> set[str]:
        html = admin.get("/ui/rollouts/bot").text
        return set(re.findall(r'value="(\w+)"><button type="submit" class="\w+">', html))

    assert enabled() & {"pause", "resume", "promote"} == set()  # no rollout to move yet
    gateway.http.post("/admin/rollouts/bot/start", headers=AUTH, json={}).raise_for_status()
    assert enabled() == {"pause", "promote", "rollback"}
    press(admin, "pause", "hold")
    assert enabled() == {"resume", "promote", "rollback"}


def test_an_action_the_phase_forbids_is_a_clear_409(gateway: InProcessGateway) -> None:
    admin = signed_in(gateway, ADMIN)
    answer = press(admin, "resume", "nothing to resume")
    assert answer.status_code == 409
    assert "cannot resume route &#x27;bot&#x27;" in answer.text
    assert "only a paused rollout can resume" in answer.text
    assert rollout(gateway.http)["phase"] != "progressing"


def test_a_reviewer_token_cannot_pause_a_rollout(gateway: InProcessGateway) -> None:
    gateway.http.post("/admin/rollouts/bot/start", headers=AUTH, json={}).raise_for_status()
    reviewer = signed_in(gateway, REVIEWER_TOKENS[0])
    assert reviewer.get("/ui/rollouts/bot").status_code == 403
    assert reviewer.get("/ui/rollouts/bot/confirm", params={"action": "pause"}).status_code == 403
    csrf = csrf_of(reviewer)  # the reviewer's own, valid CSRF token
    for action in ("pause", "resume", "promote", "rollback", "restore"):
        data = {"csrf": csrf, "confirm": action, "reason": "let me"}
        answer = reviewer.post(f"/ui/rollouts/bot/{action}", data=data)
        assert answer.status_code == 403, action
        assert "reviewers may only review" in answer.text
    assert rollout(gateway.http)["phase"] == "progressing"
    # Nor with the reviewer token on the admin API.
    bearer = {"authorization": f"Bearer {REVIEWER_TOKENS[0]}"}
    assert (
        gateway.http.post("/admin/rollouts/bot/pause", headers=bearer, json={}).status_code == 403
    )
    assert rollout(gateway.http)["phase"] == "progressing"


def _post(client: httpx.Client, data: dict[str, str] | None = None, **kwargs: Any) -> int:
    return client.post("/ui/rollouts/bot/pause", data=data, **kwargs).status_code


def test_every_hostile_post_is_refused_and_changes_nothing(gateway: InProcessGateway) -> None:
    gateway.http.post("/admin/rollouts/bot/start", headers=AUTH, json={}).raise_for_status()
    admin = signed_in(gateway, ADMIN)
    csrf = csrf_of(admin, "/ui/rollouts")
    good = {"csrf": csrf, "confirm": "pause", "reason": "ok"}
    assert _post(gateway.client(), good) == 403  # no session
    assert _post(admin, {**good, "csrf": "forged"}) == 403
    assert _post(admin, {k: v for k, v in good.items() if k != "csrf"}) == 403
    other = signed_in(gateway, ADMIN)  # another session's token is not this one's
    assert _post(admin, {**good, "csrf": csrf_of(other, "/ui/rollouts")}) == 403
    assert _post(admin, {**good, "confirm": "resume"}) == 400  # not confirmed for this action
    assert _post(admin, {k: v for k, v in good.items() if k != "confirm"}) == 400
    assert _post(admin, {**good, "reason": ""}) == 400
    assert _post(admin, {**good, "reason": "x" * 1001}) == 400
    assert _post(admin, {**good, "to": "fallback"}) == 400  # only a rollback has a target
    assert _post(admin, {**good, "extra": "1"}) == 400
    assert _post(admin, good, headers={"origin": "https://evil.example"}) == 403
    assert _post(admin, good, headers={"host": "evil.example"}) == 403
    body = "csrf=" + csrf + "&confirm=pause&reason=" + "x" * 20_000
    assert admin.post("/ui/rollouts/bot/pause", content=body, headers=FORM).status_code == 413
    json_post = admin.post("/ui/rollouts/bot/pause", json=good)
    assert json_post.status_code == 415
    assert admin.post("/ui/rollouts/nope/pause", data=good).status_code == 404
    assert admin.post("/ui/rollouts/bot/abort", data=good).status_code == 404
    assert admin.get("/ui/rollouts/bot/confirm", params={"action": "<x>"}).status_code == 404
    assert admin.get("/ui/rollouts/%3Cscript%3E").status_code == 404
    assert rollout(gateway.http)["phase"] == "progressing"
    assert _post(admin, good) == 303  # and the good one goes through


def _seed_hostile(store: Store, route: RouteSpec) -> None:
    """A rollback whose reason, prompt, answer and check reason all carry markup."""
    now = datetime.now(UTC)
    rollouts = RolloutStore(store)
    started = transition(
        initial_state("bot", route), Action.START, route, now=now, reason="go", actor="alice"
    )
    assert rollouts.commit(started)
    back = transition(
        started.after, Action.ROLLBACK, route, now=now + timedelta(seconds=1),
        reason="<img src=x onerror=alert(1)> failed", actor="judge",
    )  # fmt: skip
    evidence = {"look": 1, "verdicts": [], "example_request_ids": ["req-hostile"]}
    assert rollouts.commit(back, evidence)
    exchange = ExchangeRecord(
        request_id="req-hostile", route="bot", target="stale", upstream_model="stale",
        arm=Arm.CANARY, endpoint="chat.completions", provider="openai", streamed=False,
        started_at=now, duration_s=0.1, ttft_s=None, overhead_s=0.0, status=Status.OK,
        http_status=200, rule="shipping", rule_version="v2",
        request_body='{"messages": [{"role": "user", "content": "<script>evil()</script>"}]}',
        response_text="</pre><script>alert('answer')</script>",
    )  # fmt: skip
    check = CheckRecord(
        request_id="req-hostile", route="bot", target="stale", arm=Arm.CANARY, rule="shipping",
        rule_version="v2", check="max-weight", result="fail", reason="<b>not 150</b>",
        created_at=now,
    )  # fmt: skip
    store.write_batch([exchange, check])


def test_every_stored_text_on_the_page_is_escaped(start_gateway: Start, tmp_path: Any) -> None:
    db = f"sqlite:///{tmp_path / 'hostile.db'}"
    gateway = start_gateway(db, extra=rollout_config(), env=ENV_ADMIN)
    _seed_hostile(gateway.gateway.store, gateway.gateway.config.routes["bot"])
    html = signed_in(gateway, ADMIN).get("/ui/rollouts/bot").text
    assert "<script>evil()" not in html and "<script>alert" not in html
    assert "<img src=x" not in html and "<b>not 150</b>" not in html
    assert "&lt;script&gt;evil()&lt;/script&gt;" in html
    assert "&lt;/pre&gt;&lt;script&gt;alert(&#x27;answer&#x27;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt; failed" in html
    assert "&lt;b&gt;not 150&lt;/b&gt;" in html
    assert "No answer to compare with was recorded" in html
    # The only scripts are the console's own files.
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/ui/static/console.js" defer>']


def test_the_offline_gates_refusal_and_an_override_are_on_the_page(
    start_gateway: Start,
) -> None:
    from proxy.store import EvalStore
    from tests.proxy.api.test_rollouts_offline_gate import PRIMARY, REGRESSING, gate_config, runs

    gateway = start_gateway(extra=gate_config(), env=ENV_ADMIN)
    EvalStore(gateway.gateway.store).add_runs(runs("g1", REGRESSING, PRIMARY))
    refused = gateway.http.post("/admin/rollouts/bot/start", headers=AUTH, json={})
    assert refused.status_code == 409
    client = signed_in(gateway, ADMIN)
    html = client.get("/ui/rollouts/bot").text
    section = html[html.index('id="offline"') : html.index('id="evidence"')]
    text = _text(section)
    assert "Refuses a start" in text and "stale regresses on set support" in text
    assert "Set support" in text and "difficulty=hard 10/20 (50.0%) 18/20 (90.0%)" in text
    assert "+40.0 points blocks" in text and "task=legal 4/4 (100.0%) 4/4" in text
    assert "too few cases" in text and "Started past the gate" not in text
    reason = "hotfix <INC-42> & rerun tomorrow"
    forced = gateway.http.post(
        "/admin/rollouts/bot/start", headers=AUTH, json={"force": True, "reason": reason}
    )
    assert forced.status_code == 200, forced.text
    html = client.get("/ui/rollouts/bot").text
    section = html[html.index('id="offline"') : html.index('id="evidence"')]
    assert "Override reason: hotfix &lt;INC-42&gt; &amp; rerun tomorrow" in section
    assert "The gate had refused:" in section and "difficulty=hard" in _text(section)
