"""The shape every wire format has, and Server-Sent Events framing.

A `WireFormat` is one provider endpoint: it reads a request body into a `Prompt` and writes a
`Turn` back as a JSON body or as a sequence of SSE frames, and it knows its own error body.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, Protocol

import orjson

from proxy.mock_upstream.conversation import Prompt, RequestError, Turn


class Frame(NamedTuple):
    """One encoded SSE event."""

    data: bytes
    text: bool
    """The event carries answer text, so stream pacing (ttft, tokens per second) applies to it."""


class WireFormat(Protocol):
    """One provider endpoint (chat completions, responses, anthropic messages...)."""

    def read(self, body: Mapping[str, Any]) -> Prompt:
        """The prompt in `body`; raises `RequestError` when the body cannot be answered."""
        ...

    def body(self, turn: Turn) -> bytes:
        """The non-streamed JSON response."""
        ...

    def frames(self, turn: Turn) -> Iterator[Frame]:
        """The streamed response, event by event, terminator included."""
        ...

    def error(self, status: int, message: str) -> bytes:
        """An error body in this format's shape."""
        ...


def data_frame(payload: Any) -> bytes:
    """`data: <json>` (OpenAI chat and completions streams)."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def event_frame(event: str, payload: Any) -> bytes:
    """`event: <name>` + `data: <json>` (Responses and Anthropic streams)."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def require_model(body: Mapping[str, Any]) -> str:
    """The body's `model`, which every endpoint requires."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("'model' is required and must be a non-empty string")
    return model


def content_text(content: Any) -> str:
    """Text of a message `content`: a string, or a list of parts/blocks with a `text` field."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
                elif part.get("type") == "tool_result":
                    texts.append(content_text(part.get("content")))
        return "\n".join(texts)
    return ""


def optional_int(body: Mapping[str, Any], *keys: str) -> int | None:
    """The first of `keys` present in `body` as a positive integer (an output token limit)."""
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RequestError(f"'{key}' must be a positive integer")
        return value
    return None
