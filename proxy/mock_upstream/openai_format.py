"""OpenAI chat completions (`/v1/chat/completions`) and legacy completions (`/v1/completions`).

Streams follow OpenAI exactly: with `stream_options.include_usage` every chunk carries
`"usage": null` and one last chunk before `data: [DONE]` has `"choices": []` and the usage;
without it no chunk has a `usage` key at all.

An answer with reasoning carries it in the chat message's `reasoning_content` field (streamed as
`delta.reasoning_content` chunks before the content), the way several OpenAI-compatible
providers (DeepSeek, vLLM, Qwen) return it: OpenAI's own chat API does not return reasoning text.
Legacy completions and Responses leave reasoning out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from proxy.mock_upstream.conversation import Prompt, RequestError, Turn
from proxy.mock_upstream.wire import (
    DONE,
    Frame,
    content_text,
    data_frame,
    optional_int,
    require_model,
)

SYSTEM_FINGERPRINT = "fp_" + os.urandom(5).hex()
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_REASONING_PIECE_CHARS = 32
"""Characters of reasoning per streamed `reasoning_content` delta."""
_ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


def openai_error(status: int, message: str) -> bytes:
    """`{"error": {message, type, param, code}}` as OpenAI sends it."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error = {"message": message, "type": kind, "param": None, "code": _ERROR_CODES.get(status)}
    return orjson.dumps({"error": error})


def completion_usage(turn: Turn) -> dict[str, Any]:
    """The `usage` object of chat and text completions."""
    return {
        "prompt_tokens": turn.input_tokens,
        "completion_tokens": turn.output_tokens,
        "total_tokens": turn.input_tokens + turn.output_tokens,
        "prompt_tokens_details": {"cached_tokens": turn.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": turn.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _wants_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _stream_tail(turn: Turn, head: dict[str, Any]) -> Iterator[Frame]:
    """The usage chunk (when asked for and reported) and the `[DONE]` terminator."""
    if turn.prompt.include_usage and turn.usage:
        yield Frame(data_frame({**head, "choices": [], "usage": completion_usage(turn)}), False)
    yield Frame(DONE, False)


def _stream_head(turn: Turn, prefix: str, kind: str) -> dict[str, Any]:
    head: dict[str, Any] = {
        "id": prefix + turn.id,
        "object": kind,
        "created": turn.created,
        "model": turn.prompt.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }
    if turn.prompt.include_usage and turn.usage:
        head["usage"] = None
    return head


class ChatCompletionsFormat:
    """`POST /v1/chat/completions`."""

    def read(self, body: Mapping[str, Any]) -> Prompt:
        model = require_model(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("'messages' must be a non-empty array")
        texts, system, last_user = [], [], ""
        for message in messages:
            if not isinstance(message, dict):
                raise RequestError("each item of 'messages' must be an object")
            text = content_text(message.get("content"))
            texts.append(text)
            role = message.get("role")
            if role in ("system", "developer"):
                system.append(text)
            elif role == "user":
                last_user = text
        return Prompt(
            model=model,
            stream=body.get("stream") is True,
            include_usage=_wants_usage(body),
            system="\n".join(system),
            last_user=last_user,
            texts=tuple(texts),
            max_tokens=optional_int(body, "max_completion_tokens", "max_tokens"),
        )

    def body(self, turn: Turn) -> bytes:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": turn.text,
            "refusal": None,
            "annotations": [],
        }
        if turn.reasoning:
            message["reasoning_content"] = turn.reasoning
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": turn.finish}
        payload: dict[str, Any] = {
            "id": "chatcmpl-" + turn.id,
            "object": "chat.completion",
            "created": turn.created,
            "model": turn.prompt.model,
            "choices": [choice],
            "service_tier": "default",
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
        if turn.usage:
            payload["usage"] = completion_usage(turn)
        return orjson.dumps(payload)

    def frames(self, turn: Turn) -> Iterator[Frame]:
        head = _stream_head(turn, "chatcmpl-", "chat.completion.chunk")
        head["service_tier"] = "default"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return data_frame({**head, "choices": [choice]})

        yield Frame(chunk({"role": "assistant", "content": "", "refusal": None}), False)
        for i in range(0, len(turn.reasoning), _REASONING_PIECE_CHARS):
            piece = turn.reasoning[i : i + _REASONING_PIECE_CHARS]
            yield Frame(chunk({"reasoning_content": piece}), False)
        for piece in turn.pieces:
            yield Frame(chunk({"content": piece}), True)
        yield Frame(chunk({}, turn.finish), False)
        yield from _stream_tail(turn, head)

    def error(self, status: int, message: str) -> bytes:
        return openai_error(status, message)


class CompletionsFormat:
    """`POST /v1/completions` (legacy text completions)."""

    def read(self, body: Mapping[str, Any]) -> Prompt:
        model = require_model(body)
        prompt = body.get("prompt", "")
        items = prompt if isinstance(prompt, list) else [prompt]
        texts, id_tokens = [], 0
        for item in items:
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, int):
                id_tokens += 1
            elif isinstance(item, list) and all(isinstance(i, int) for i in item):
                id_tokens += len(item)
            else:
                raise RequestError("'prompt' must be a string, an array of strings or token ids")
        return Prompt(
            model=model,
            stream=body.get("stream") is True,
            include_usage=_wants_usage(body),
            system="",
            last_user="\n".join(texts),
            texts=tuple(texts),
            extra_tokens=id_tokens,
            max_tokens=optional_int(body, "max_tokens"),
        )

    def body(self, turn: Turn) -> bytes:
        choice = {"text": turn.text, "index": 0, "logprobs": None, "finish_reason": turn.finish}
        payload: dict[str, Any] = {
            "id": "cmpl-" + turn.id,
            "object": "text_completion",
            "created": turn.created,
            "model": turn.prompt.model,
            "choices": [choice],
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
        if turn.usage:
            payload["usage"] = completion_usage(turn)
        return orjson.dumps(payload)

    def frames(self, turn: Turn) -> Iterator[Frame]:
        head = _stream_head(turn, "cmpl-", "text_completion")

        def chunk(text: str, finish: str | None = None) -> bytes:
            choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}
            return data_frame({**head, "choices": [choice]})

        for piece in turn.pieces:
            yield Frame(chunk(piece), True)
        yield Frame(chunk("", turn.finish), False)
        yield from _stream_tail(turn, head)

    def error(self, status: int, message: str) -> bytes:
        return openai_error(status, message)
