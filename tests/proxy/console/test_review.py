"""The blind review page and its JSON calls, in process: a reviewer gets a pair, scores it once
(201, then 409), the review is in the store and counted; nothing the page or its calls carry
names a model, target, upstream model, arm, request or pair; agreement and position bias show
once two reviewers scored the same pair; an answer's markup is escaped; every hostile input is a
clear 4xx in JSON and stores nothing; the page's form works without JavaScript."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from proxy.store import ANY_VERSION, ReviewStore
from tests.conftest import InProcessGateway
from tests.proxy.console.console_client import (
    ADMIN_TOKEN,
    ENV,
    FORM,
    REVIEWER_TOKENS,
    hidden,
    signed_in,
)
from tests.proxy.store.test_reviews import experiment_pair, shadow_pair

ROUTE = "reviewed"
NOW = datetime.now(UTC) - timedelta(minutes=5)
EXTRA: dict[str, Any] = {
    "models": {
        "model-alpha": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                        "model": "upstream-alpha-7b"},
        "model-beta": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                       "model": "upstream-beta-9b"},
    },
    "routes": {
        ROUTE: {"primary": "model-alpha", "shadows": [{"model": "model-beta", "sample": 0.0}]}
    },
}  # fmt: skip
SECRETS = ("model-alpha", "model-beta", "upstream-alpha-7b", "upstream-beta-9b", "req-", "pair-",
           "primary", "shadow", "canary", "fallback")  # fmt: skip
"""No answer or page may carry these: targets, upstream models, arms, request and pair ids."""


@pytest.fixture
def gateway(start_gateway: Callable[..., InProcessGateway]) -> Iterator[InProcessGateway]:
    gw = start_gateway(env=ENV, extra=EXTRA)
    records: list[Any] = []
    for n in range(6):
        answers = (f"first answer {n}", f"second answer {n}")
        if n == 0:
            answers = ("<script>window.ran = 1</script><b>bold</b>", "plain text")
        records.extend(
            shadow_pair(n, route=ROUTE, primary="model-alpha", candidate="model-beta",
                        version=None, answers=answers, start=NOW)
        )  # fmt: skip
    gw.gateway.store.write_batch(records)
    yield gw


def csrf(client: httpx.Client) -> str:
    return hidden(client.get("/ui/review", params={"route": ROUTE}).text, "csrf")


def post_review(
    client: httpx.Client, token: str, item: str, body: object, **headers: str
) -> httpx.Response:
    return client.post(
        f"/ui/api/review/items/{item}",
        content=body if isinstance(body, bytes) else json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-csrf-token": token, **headers},
    )


def next_item(client: httpx.Client) -> dict[str, Any]:
    answer = client.get("/ui/api/review/next", params={"route": ROUTE})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


GOOD = {"score_a": 4, "score_b": 2, "preference": "A", "reason": "A answers the question"}


def test_a_reviewer_scores_a_pair_once_and_it_is_stored_and_counted(
    gateway: InProcessGateway,
) -> None:
    client = signed_in(gateway, REVIEWER_TOKENS[0])
    token = csrf(client)
    item = next_item(client)["item"]
    assert set(item) == {"id", "request", "turns_left_out", "answers"}
    assert set(item["answers"]) == {"A", "B"}
    assert item["request"][0]["role"] == "user" and item["request"][0]["text"].startswith(
        "question"
    )

    stored = post_review(client, token, item["id"], GOOD)
    assert stored.status_code == 201, stored.text
    again = post_review(client, token, item["id"], {**GOOD, "preference": "B"})
    assert again.status_code == 409
    assert again.json()["error"]["type"] == "conflict"

    reviews = ReviewStore(gateway.gateway.store).reviewed(include_skips=True)
    (one,) = reviews
    assert one.review.preference == "A" and one.review.score_a == 4
    assert one.review.reason == "A answers the question"
    assert one.item.candidate.primary_target == "model-alpha"  # joined to both exchanges
    labels = {"route": ROUTE, "target": "model-beta", "arm": "shadow"}
    assert gateway.gateway.registry.get_sample_value("mirrorgate_reviews_total", labels) == 1
    # the next item is another one
    assert next_item(client)["item"]["id"] != item["id"]


def test_nothing_the_page_fetches_names_a_model_target_arm_or_request(
    gateway: InProcessGateway,
) -> None:
    client = signed_in(gateway, REVIEWER_TOKENS[0])
    token = csrf(client)
    seen: list[str] = [client.get("/ui/review", params={"route": ROUTE}).text]
    seen.append(client.get("/ui/api/review/queues").text)
    for _ in range(10):
        body = client.get("/ui/api/review/next", params={"route": ROUTE})
        seen.append(body.text)
        item = body.json()["item"]
        if item is None:
            break
        seen.append(post_review(client, token, item["id"], GOOD).text)
        seen.append(client.get("/ui/api/review/progress", params={"route": ROUTE}).text)
    seen.append(client.get("/ui/review", params={"route": ROUTE}).text)  # the empty queue
    assert body.json() == {"item": None, "empty": body.json()["empty"]} and body.json()["empty"]
    assert len(ReviewStore(gateway.gateway.store).reviewed()) == 6
    for text in seen:
        for secret in SECRETS:
            assert secret not in text, (secret, text[:300])


def test_agreement_and_position_bias_show_once_two_reviewers_scored_the_same_pair(
    gateway: InProcessGateway,
) -> None:
    reviews = ReviewStore(gateway.gateway.store)
    alice, bob = (signed_in(gateway, t) for t in REVIEWER_TOKENS)
    first = next_item(alice)["item"]  # fills the queue
    assert reviews.reviewed() == []
    # every queued item asks for a second reviewer, so bob is offered alice's pair first
    with gateway.gateway.store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE review_items SET wanted_reviews = 2")
    assert post_review(alice, csrf(alice), first["id"], GOOD).status_code == 201
    progress = alice.get("/ui/api/review/progress", params={"route": ROUTE}).json()
    assert progress["agreement"]["items"] == 0 and progress["agreement"]["kappa"] is None
    second = next_item(bob)["item"]
    assert second["id"] == first["id"] and second["answers"] == first["answers"]
    agreeing = {**GOOD, "score_a": 5}
    assert post_review(bob, csrf(bob), second["id"], agreeing).status_code == 201
    progress = bob.get("/ui/api/review/progress", params={"route": ROUTE}).json()
    assert progress["agreement"]["items"] == 1
    assert progress["agreement"]["same_preference"] == 1.0
    assert progress["agreement"]["mean_score_difference"] == 0.5
    assert progress["position"] == {"reviews": 2, "a": 2, "b": 0, "ties": 0, "a_share": 1.0}
    assert progress["yours"] == 1 and progress["reviews"] == 2
    page = bob.get("/ui/review", params={"route": ROUTE}).text
    assert "over 1 pairs two reviewers scored" in page and "A was preferred in 100%" in page


def test_an_answer_is_shown_as_text_on_the_page(gateway: InProcessGateway) -> None:
    client = signed_in(gateway, REVIEWER_TOKENS[0])
    for _ in range(6):
        page = client.get("/ui/review", params={"route": ROUTE}).text
        if "window.ran" in page:
            break
        item = next_item(client)["item"]
        client.post(
            f"/ui/api/review/items/{item['id']}/skip",
            headers={"x-csrf-token": hidden(page, "csrf")},
        )
    assert "&lt;script&gt;window.ran = 1&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in page
    assert "<script>window" not in page and "<b>bold" not in page


def test_hostile_input_is_a_clear_json_4xx_and_stores_nothing(gateway: InProcessGateway) -> None:
    client = signed_in(gateway, REVIEWER_TOKENS[0])
    token = csrf(client)
    item = next_item(client)["item"]["id"]
    anonymous = gateway.client()
    cases: list[tuple[int, httpx.Response]] = [
        (401, anonymous.get("/ui/api/review/next", params={"route": ROUTE})),
        (401, post_review(anonymous, token, item, GOOD)),
        (403, post_review(client, "", item, GOOD)),
        (403, post_review(client, token + "x", item, GOOD)),
        (403, post_review(client, token, item, GOOD, origin="https://evil.example")),
        (
            415,
            client.post(f"/ui/api/review/items/{item}", data=GOOD, headers={"x-csrf-token": token}),
        ),
        (413, post_review(client, token, item, b'{"reason": "' + b"x" * 20_000 + b'"}')),
        (400, post_review(client, token, item, b"{not json")),
        (400, post_review(client, token, item, b"\xff\xfe")),
        (400, post_review(client, token, item, [1, 2])),
        (
            400,
            post_review(
                client,
                token,
                item,
                b'{"score_a": 4, "score_a": 1, "score_b": 2, "preference": "A"}',
            ),
        ),
        (400, post_review(client, token, item, {**GOOD, "model": "x"})),
        (400, post_review(client, token, item, {**GOOD, "reason": "r" * 2001})),
        (400, post_review(client, token, item, {**GOOD, "reason": 5})),
        (400, post_review(client, token, item, {**GOOD, "preference": "C"})),
        (400, post_review(client, token, item, {"score_b": 2, "preference": "A"})),
        (404, post_review(client, token, "../../etc", GOOD)),
        (404, post_review(client, token, "x" * 65, GOOD)),
        (404, post_review(client, token, "unknown-item", GOOD)),
        (404, client.get("/ui/api/review/next", params={"route": "no-such-route"})),
        (400, client.get("/ui/api/review/next", params={"route": ROUTE, "version": "v" * 201})),
        (
            400,
            client.post(
                f"/ui/api/review/items/{item}/skip",
                content=b"junk",
                headers={"x-csrf-token": token},
            ),
        ),
    ]
    for bad in (0, 6, -1, 3.0, "3", True, None, "", [3]):
        if bad == "3":
            continue  # a form posts digits as text: "3" is a 3 (see the form test)
        cases.append((400, post_review(client, token, item, {**GOOD, "score_a": bad})))
    for status, answer in cases:
        assert answer.status_code == status, (status, answer.request.url, answer.text)
        assert answer.json()["error"]["message"], answer.text
    assert ReviewStore(gateway.gateway.store).reviewed(include_skips=True) == []
    # and the item is still there to be reviewed properly
    assert post_review(client, token, item, GOOD).status_code == 201


def test_the_page_form_works_without_javascript(gateway: InProcessGateway) -> None:
    client = signed_in(gateway, REVIEWER_TOKENS[1])
    page = client.get("/ui/review", params={"route": ROUTE}).text
    item = hidden(page, "item")
    form = {"csrf": hidden(page, "csrf"), "item": item, "route": ROUTE, "version": ANY_VERSION,
            "score_a": "2", "score_b": "5", "preference": "B", "reason": ""}  # fmt: skip
    done = client.post("/ui/review", data=form, headers=FORM)
    assert done.status_code == 303 and "done=stored" in done.headers["location"]
    (stored,) = ReviewStore(gateway.gateway.store).reviewed()
    assert (stored.review.score_a, stored.review.score_b, stored.review.preference) == (2, 5, "B")
    assert stored.review.reason is None
    after = client.get(done.headers["location"]).text
    assert "Review stored." in after and hidden(after, "item") != item
    refused = client.post("/ui/review", data={**form, "csrf": "wrong"}, headers=FORM)
    assert refused.status_code == 403


def test_admins_review_too_and_without_bodies_the_queue_says_why(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(env=ENV, extra={**EXTRA, "store": {"bodies": "none"}})
    client = signed_in(gw, ADMIN_TOKEN)
    body = next_item(client)
    assert body["item"] is None and "store.bodies is none" in body["empty"]
    assert "store.bodies is none" in client.get("/ui/review").text


def test_experiment_pairs_are_reviewed_blind_and_counted_under_their_arm(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    extra = json.loads(json.dumps(EXTRA))
    extra["routes"][ROUTE]["experiment"] = {
        "arms": {"control": {"model": "model-alpha"}, "arm-beta": {"model": "model-beta"}},
        "unit": "header:x-user",
        "primary_metric": "human_preference",
        "minimum_detectable_effect": 0.05,
    }
    gw = start_gateway(env=ENV, extra=extra)
    gw.gateway.store.write_batch(
        experiment_pair(0, "control", route=ROUTE, primary="model-alpha",
                        candidate="model-beta", version=None, start=NOW,
                        answers=("one answer", "another answer"))
    )  # fmt: skip
    client = signed_in(gw, REVIEWER_TOKENS[0])
    token = csrf(client)
    answer = client.get("/ui/api/review/next", params={"route": ROUTE})
    assert answer.status_code == 200, answer.text
    for secret in (*SECRETS, "experiment", "control", "arm-beta"):
        assert secret not in answer.text
    item = answer.json()["item"]
    assert post_review(client, token, item["id"], GOOD).status_code == 201
    (one,) = ReviewStore(gw.gateway.store).reviewed()
    assert one.item.candidate.source == "experiment"
    assert (one.item.candidate.primary_arm, one.item.candidate.candidate_arm) == (
        "experiment:control",
        "experiment:arm-beta",
    )
    labels = {"route": ROUTE, "target": "model-beta", "arm": "experiment"}
    assert gw.gateway.registry.get_sample_value("mirrorgate_reviews_total", labels) == 1
