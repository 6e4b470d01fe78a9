"""Anthropic Messages API (`/v1/messages`).

Streams send, in order: `message_start` (the message with empty content and usage so far:
all input tokens, 1 output token), `content_block_start`, `ping`, one `content_block_delta` with a
`text_delta` per piece, `content_block_stop`, `message_delta` (`stop_reason` and the final
`usage.output_tokens`), `message_stop`. `input_tokens` excludes prompt-cache reads, which are
reported apart in `cache_read_input_tokens`, as Anthropic does. With usage switched off the
`usage` objects are left out entirely (the SDK's `messages.stream()` helper then cannot
accumulate; raw `create(stream=True)` events still parse).

An answer with reasoning starts with a `thinking` content block, as Anthropic's extended
thinking sends it: in a body `{"type": "thinking", "thinking": ..., "signature": ...}` before the
text block; in a stream a block of index 0 with `thinking_delta` events and one
`signature_delta`, the text block being index 1.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from proxy.mock_upstream.conversation import Prompt, RequestError, Turn
from proxy.mock_upstream.wire import Frame, content_text, event_frame, optional_int, require_model

_THINKING_PIECE_CHARS = 32
"""Characters of reasoning per `thinking_delta` event."""
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error(status: int, message: str) -> bytes:
    """`{"type": "error", "error": {type, message}}` as Anthropic sends it."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


def _usage(turn: Turn, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": turn.input_tokens - turn.cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": turn.cached_tokens,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _stop_reason(turn: Turn) -> str:
    return "max_tokens" if turn.finish == "length" else "end_turn"


class MessagesFormat:
    """`POST /v1/messages`."""

    def read(self, body: Mapping[str, Any]) -> Prompt:
        model = require_model(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages: must be a non-empty array")
        system = content_text(body.get("system"))
        texts, last_user = [system], ""
        for message in messages:
            if not isinstance(message, dict):
                raise RequestError("messages: each item must be an object")
            text = content_text(message.get("content"))
            texts.append(text)
            if message.get("role") == "user":
                last_user = text
        return Prompt(
            model=model,
            stream=body.get("stream") is True,
            include_usage=True,
            system=system,
            last_user=last_user,
            texts=tuple(texts),
            max_tokens=optional_int(body, "max_tokens"),
        )

    def body(self, turn: Turn) -> bytes:
        content: list[dict[str, Any]] = [{"type": "text", "text": turn.text}]
        if turn.reasoning:
            thinking = {"type": "thinking", "thinking": turn.reasoning}
            content.insert(0, {**thinking, "signature": _signature(turn.reasoning)})
        message = self._message(turn, content, _stop_reason(turn))
        if turn.usage:
            message["usage"] = _usage(turn, turn.output_tokens)
        return orjson.dumps(message)

    def frames(self, turn: Turn) -> Iterator[Frame]:
        start = self._message(turn, [], None)
        if turn.usage:
            start["usage"] = _usage(turn, 1)
        yield Frame(
            event_frame("message_start", {"type": "message_start", "message": start}), False
        )
        ping = Frame(event_frame("ping", {"type": "ping"}), False)
        index = 0
        if turn.reasoning:
            thinking = list(_thinking_frames(turn.reasoning))
            yield from (thinking[0], ping, *thinking[1:])
            index = 1
        block = {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        }
        yield Frame(event_frame("content_block_start", block), False)
        if not turn.reasoning:
            yield ping
        for piece in turn.pieces:
            delta = {"type": "text_delta", "text": piece}
            payload = {"type": "content_block_delta", "index": index, "delta": delta}
            yield Frame(event_frame("content_block_delta", payload), True)
        stop = {"type": "content_block_stop", "index": index}
        yield Frame(event_frame("content_block_stop", stop), False)
        ending: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(turn), "stop_sequence": None},
        }
        if turn.usage:
            ending["usage"] = {"output_tokens": turn.output_tokens}
        yield Frame(event_frame("message_delta", ending), False)
        yield Frame(event_frame("message_stop", {"type": "message_stop"}), False)

    def error(self, status: int, message: str) -> bytes:
        return anthropic_error(status, message)

    @staticmethod
    def _message(turn: Turn, content: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
        return {
            "id": "msg_" + turn.id,
            "type": "message",
            "role": "assistant",
            "model": turn.prompt.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
        }


def _signature(reasoning: str) -> str:
    """An opaque signature for a thinking block (a digest of its text, so it is stable)."""
    return base64.b64encode(hashlib.sha256(reasoning.encode()).digest()).decode()


def _thinking_frames(reasoning: str) -> Iterator[Frame]:
    """The thinking block of index 0: start, the text in `thinking_delta`s, the signature, stop."""
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
    }
    yield Frame(event_frame("content_block_start", start), False)
    for i in range(0, len(reasoning), _THINKING_PIECE_CHARS):
        delta = {"type": "thinking_delta", "thinking": reasoning[i : i + _THINKING_PIECE_CHARS]}
        payload = {"type": "content_block_delta", "index": 0, "delta": delta}
        yield Frame(event_frame("content_block_delta", payload), False)
    signed = {"type": "signature_delta", "signature": _signature(reasoning)}
    payload = {"type": "content_block_delta", "index": 0, "delta": signed}
    yield Frame(event_frame("content_block_delta", payload), False)
    stop = {"type": "content_block_stop", "index": 0}
    yield Frame(event_frame("content_block_stop", stop), False)
