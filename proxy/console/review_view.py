"""What a reviewer's page receives of an item: the request's turns and the two answers as text,
labelled A and B and nothing else.

Blinding is built here, by construction rather than by filtering: the view is made of the
item's opaque id, the role and text of each turn of the request, and the two answer texts. The
request's other fields (`model` — the route name a client sent, or anything else: `metadata`,
`user`, tools) are never read, and nothing of the item's pair (targets, arms, request and pair
ids) is reachable from here.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.store import ReviewItem, ReviewTexts

MAX_TURNS = 50
"""The newest turns of a long conversation shown (the page says how many were left out)."""
UNREADABLE = "(the request could not be read)"
_ROLES = ("system", "developer", "user", "assistant", "tool")


def _text(content: Any) -> str:
    """A message's content as plain text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
                elif part.get("type") in ("image_url", "image", "input_image"):
                    texts.append("[image]")
        return "\n".join(texts)
    return ""


def request_turns(body: str) -> tuple[list[dict[str, str]], int]:
    """(turns as {role, text}, turns left out) of a stored request body of any endpoint:
    chat completions and Anthropic messages (`system`, `messages`), responses (`instructions`,
    `input`), completions (`prompt`)."""
    try:
        payload = json.loads(body)
    except ValueError:
        return [{"role": "request", "text": UNREADABLE}], 0
    if not isinstance(payload, dict):
        return [{"role": "request", "text": UNREADABLE}], 0
    turns: list[dict[str, str]] = []
    for key in ("system", "instructions"):
        system = _text(payload.get(key))
        if system:
            turns.append({"role": "system", "text": system})
    messages = payload.get("messages")
    if not isinstance(messages, list):
        messages = payload.get("input")
    if isinstance(messages, str):
        turns.append({"role": "user", "text": messages})
    elif isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                role = message.get("role")
                shown = (
                    role if role in ("system", "developer", "user", "assistant", "tool") else "user"
                )
                turns.append({"role": shown, "text": _text(message.get("content"))})
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        turns.append({"role": "user", "text": prompt})
    elif isinstance(prompt, list):
        turns.extend({"role": "user", "text": p} for p in prompt if isinstance(p, str))
    if not turns:
        return [{"role": "request", "text": UNREADABLE}], 0
    left_out = max(0, len(turns) - MAX_TURNS)
    return turns[left_out:], left_out


def item_view(item: ReviewItem, texts: ReviewTexts) -> dict[str, Any]:
    """The JSON a reviewer's page gets for one item."""
    turns, left_out = request_turns(texts.request_body)
    return {
        "id": item.item_id,
        "request": turns,
        "turns_left_out": left_out,
        "answers": {"A": texts.answer_a, "B": texts.answer_b},
    }
