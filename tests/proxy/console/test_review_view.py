"""What a reviewer's page gets of an item: the request's turns of every endpoint's shape, the two
answers as A and B, and nothing else (no model, no other field of the request)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from proxy.console.review_view import MAX_TURNS, UNREADABLE, item_view, request_turns
from proxy.store import ReviewCandidate, ReviewItem, ReviewTexts


def test_chat_and_anthropic_messages_become_turns_and_other_fields_are_never_read() -> None:
    body = json.dumps({
        "model": "secret-route-name", "user": "u-1", "metadata": {"tier": "gold"},
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}},
                                         {"type": "text", "text": "and this?"}]},
            {"role": "weird", "content": 5},
        ],
    })  # fmt: skip
    turns, left_out = request_turns(body)
    assert left_out == 0
    assert turns == [
        {"role": "system", "text": "Be brief."},
        {"role": "user", "text": "Hi"},
        {"role": "assistant", "text": "Hello"},
        {"role": "user", "text": "[image]\nand this?"},
        {"role": "user", "text": ""},
    ]
    assert "secret-route-name" not in json.dumps(turns) and "gold" not in json.dumps(turns)


def test_responses_completions_and_unreadable_bodies() -> None:
    assert request_turns(json.dumps({"instructions": "Sys", "input": "Q"}))[0] == [
        {"role": "system", "text": "Sys"},
        {"role": "user", "text": "Q"},
    ]
    assert request_turns(json.dumps({"prompt": ["a", "b"]}))[0] == [
        {"role": "user", "text": "a"},
        {"role": "user", "text": "b"},
    ]
    for body in ("not json", "[1, 2]", "{}", '{"model": "x"}'):
        assert request_turns(body) == ([{"role": "request", "text": UNREADABLE}], 0)


def test_a_long_conversation_shows_its_newest_turns() -> None:
    messages = [{"role": "user", "content": f"turn {i}"} for i in range(MAX_TURNS + 7)]
    turns, left_out = request_turns(json.dumps({"messages": messages}))
    assert (
        left_out == 7 and len(turns) == MAX_TURNS and turns[-1]["text"] == f"turn {MAX_TURNS + 6}"
    )


def test_the_view_holds_the_opaque_id_turns_and_answers_only() -> None:
    candidate = ReviewCandidate(
        "shadow", "pair-secret", "req-secret", "bot", "rule", "v1", "prod-model", "primary",
        "cand-model", "shadow", "agree", datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    item = ReviewItem("opaque", candidate, "B", 1, 1.0, "plain", datetime(2026, 1, 1, tzinfo=UTC))
    texts = ReviewTexts(json.dumps({"messages": [{"role": "user", "content": "Q"}]}), "one", "two")
    view = item_view(item, texts)
    assert view == {
        "id": "opaque",
        "request": [{"role": "user", "text": "Q"}],
        "turns_left_out": 0,
        "answers": {"A": "one", "B": "two"},
    }
    shown = json.dumps(view)
    for secret in ("pair-secret", "req-secret", "prod-model", "cand-model", "shadow", "primary"):
        assert secret not in shown
