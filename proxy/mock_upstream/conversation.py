"""One exchange with the fake model, in terms every wire format shares.

A wire format reads its request body into a `Prompt`; `answers.compose` turns the prompt into a
`Turn` (the answer text, its stream pieces and the real token counts); the wire format writes the
turn back as a body or as SSE events. Streamed and non-streamed answers come from the same `Turn`,
so their text and usage are identical by construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal


class RequestError(Exception):
    """The request body cannot be answered; sent back as `status` in the caller's format."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True, slots=True)
class Prompt:
    """What a request asks for."""

    model: str
    """The request's `model`, echoed in the response and used to pick the behaviour."""
    stream: bool
    include_usage: bool
    """The caller asked for usage in the stream (always true for Responses and Anthropic)."""
    system: str
    """System prompt: system/developer messages, Responses `instructions`, Anthropic `system`."""
    last_user: str
    """Text of the last user message (the whole prompt for legacy completions)."""
    texts: tuple[str, ...]
    """Every text that counts as prompt tokens."""
    extra_tokens: int = 0
    """Prompt tokens given as token ids rather than text."""
    max_tokens: int | None = None
    """The request's output limit; a longer answer is cut and reported as truncated."""
    request: Mapping[str, Any] | None = None
    """The parsed request body, for formats that echo request fields back."""


@dataclass(frozen=True, slots=True)
class Turn:
    """The fake model's answer to one `Prompt`, with real token counts."""

    prompt: Prompt
    id: str
    """Random hex; each format adds its own prefix (`chatcmpl-`, `resp_`, `msg_`...)."""
    created: int
    """Unix time of the answer."""
    text: str
    pieces: tuple[str, ...]
    """`text` cut into stream deltas; `"".join(pieces) == text`."""
    input_tokens: int
    cached_tokens: int
    """Part of `input_tokens` reported as read from the prompt cache."""
    output_tokens: int
    finish: Literal["stop", "length"]
    """`length` when the answer was cut at the request's `max_tokens`."""
    usage: bool
    """Report usage at all (the behaviour's `usage` switch)."""
    reasoning: str = ""
    """Reasoning sent before the answer (Anthropic `thinking`, OpenAI `reasoning_content`);
    empty: none. Its tokens are part of `output_tokens`."""
    reasoning_tokens: int = 0
