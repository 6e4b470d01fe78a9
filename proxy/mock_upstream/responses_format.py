"""OpenAI Responses API (`/v1/responses`).

The answer is one `message` output item holding one `output_text` part. Streams are named SSE
events with a `sequence_number` from 0, in the order OpenAI sends them: `response.created`,
`response.in_progress`, `response.output_item.added`, `response.content_part.added`,
`response.output_text.delta`..., `response.output_text.done`, `response.content_part.done`,
`response.output_item.done`, then `response.completed` (or `response.incomplete` when the answer
was cut at `max_output_tokens`). There is no `[DONE]` terminator.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from proxy.mock_upstream.conversation import Prompt, RequestError, Turn
from proxy.mock_upstream.openai_format import openai_error
from proxy.mock_upstream.wire import Frame, content_text, event_frame, optional_int, require_model


def response_usage(turn: Turn) -> dict[str, Any]:
    """The Responses `usage` object."""
    return {
        "input_tokens": turn.input_tokens,
        "input_tokens_details": {"cached_tokens": turn.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": turn.output_tokens,
        "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        "total_tokens": turn.input_tokens + turn.output_tokens,
    }


class ResponsesFormat:
    """`POST /v1/responses`."""

    def read(self, body: Mapping[str, Any]) -> Prompt:
        model = require_model(body)
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        if not isinstance(items, list) or not items:
            raise RequestError("'input' must be a string or a non-empty array")
        instructions = body.get("instructions")
        system = [instructions] if isinstance(instructions, str) else []
        texts, last_user = list(system), ""
        for item in items:
            if not isinstance(item, dict):
                raise RequestError("each item of 'input' must be an object")
            text = content_text(item.get("content", item.get("output")))
            texts.append(text)
            role = item.get("role")
            if role in ("system", "developer"):
                system.append(text)
            elif role == "user":
                last_user = text
        return Prompt(
            model=model,
            stream=body.get("stream") is True,
            include_usage=True,
            system="\n".join(system),
            last_user=last_user,
            texts=tuple(texts),
            max_tokens=optional_int(body, "max_output_tokens"),
            request=body,
        )

    def body(self, turn: Turn) -> bytes:
        return orjson.dumps(_response(turn, _status(turn), [_message(turn, done=True)]))

    def frames(self, turn: Turn) -> Iterator[Frame]:
        item_id = "msg_" + turn.id
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        sequence = 0

        def event(kind: str, payload: dict[str, Any], text: bool = False) -> Frame:
            nonlocal sequence
            frame = Frame(
                event_frame(kind, {"type": kind, **payload, "sequence_number": sequence}), text
            )
            sequence += 1
            return frame

        started = _response(turn, "in_progress", [])
        yield event("response.created", {"response": started})
        yield event("response.in_progress", {"response": started})
        yield event(
            "response.output_item.added",
            {"output_index": 0, "item": _message(turn, done=False)},
        )
        yield event("response.content_part.added", {**where, "part": _text_part("")})
        for piece in turn.pieces:
            yield event(
                "response.output_text.delta", {**where, "delta": piece, "logprobs": []}, True
            )
        yield event("response.output_text.done", {**where, "text": turn.text, "logprobs": []})
        yield event("response.content_part.done", {**where, "part": _text_part(turn.text)})
        done = _message(turn, done=True)
        yield event("response.output_item.done", {"output_index": 0, "item": done})
        status = _status(turn)
        yield event(f"response.{status}", {"response": _response(turn, status, [done])})

    def error(self, status: int, message: str) -> bytes:
        return openai_error(status, message)


def _status(turn: Turn) -> str:
    return "incomplete" if turn.finish == "length" else "completed"


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message(turn: Turn, done: bool) -> dict[str, Any]:
    """The output message item; while streaming it starts empty and `in_progress`."""
    return {
        "id": "msg_" + turn.id,
        "type": "message",
        "status": _status(turn) if done else "in_progress",
        "role": "assistant",
        "content": [_text_part(turn.text)] if done else [],
    }


def _response(turn: Turn, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    """The response object; request parameters are echoed back as OpenAI does."""
    request = turn.prompt.request or {}
    finished = status in ("completed", "incomplete")
    return {
        "id": "resp_" + turn.id,
        "object": "response",
        "created_at": turn.created,
        "status": status,
        "background": False,
        "completed_at": turn.created if status == "completed" else None,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": turn.prompt.max_tokens,
        "metadata": request.get("metadata") or {},
        "model": turn.prompt.model,
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": request.get("store", True),
        "temperature": request.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools", []),
        "top_p": request.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": response_usage(turn) if finished and turn.usage else None,
        "user": None,
    }
