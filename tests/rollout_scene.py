"""The request the rollout tests send: a chat completion on route `bot` as one user, under one
version of the shipping rule (the `rule-follower` model answers the prompt's max_weight; the
`stale` one always answers 100)."""

from __future__ import annotations

from typing import Any


def rule_request(user: str, version: str = "v1", weight: int = 100) -> dict[str, Any]:
    """Keyword arguments for `httpx.Client.post(url, **rule_request(...))`."""
    return {
        "headers": {"x-user-id": user, "x-rule-version": version},
        "json": {
            "model": "bot",
            "messages": [
                {"role": "system", "content": f"Shipping rule: max_weight = {weight}"},
                {"role": "user", "content": "What is the heaviest parcel?"},
            ],
        },
    }
