"""Reading usage and answer text out of the providers' response bodies.

The functions here take already-parsed JSON (dicts) and never raise on odd shapes: a field that is
missing or of the wrong type counts as absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core import Usage

SAMPLE_MAX_NODES = 4096
"""JSON values `prompt_sample` visits at most: a few milliseconds, however many messages."""
SAMPLE_MAX_DEPTH = 32
"""Nesting `prompt_sample` follows; text nested deeper is not counted."""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def openai_usage(usage: Any) -> Usage | None:
    """Usage from an OpenAI `usage` object: chat/completions/embeddings or Responses shape.

    OpenAI counts cached tokens inside the prompt tokens; `Usage.input_tokens` excludes them so that
    each token is priced once.
    """
    if not isinstance(usage, dict):
        return None
    if "input_tokens" in usage:  # Responses API
        prompt = _int(usage.get("input_tokens"))
        output = _int(usage.get("output_tokens"))
        cached = _int(_dict(usage.get("input_tokens_details")).get("cached_tokens"))
        reasoning = _int(_dict(usage.get("output_tokens_details")).get("reasoning_tokens"))
    else:
        prompt = _int(usage.get("prompt_tokens"))
        output = _int(usage.get("completion_tokens"))
        cached = _int(_dict(usage.get("prompt_tokens_details")).get("cached_tokens"))
        reasoning = _int(_dict(usage.get("completion_tokens_details")).get("reasoning_tokens"))
    cached = min(cached, prompt)
    return Usage(
        input_tokens=prompt - cached,
        output_tokens=output,
        cached_input_tokens=cached,
        reasoning_tokens=min(reasoning, output),
    )


def anthropic_usage(usage: Any) -> Usage | None:
    """Usage from an Anthropic `usage` object (input tokens already exclude cache reads)."""
    if not isinstance(usage, dict):
        return None
    return Usage(
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cached_input_tokens=_int(usage.get("cache_read_input_tokens")),
        cache_write_tokens=_int(usage.get("cache_creation_input_tokens")),
    )


def response_usage(endpoint: str, body: dict[str, Any]) -> Usage | None:
    """Usage reported in a non-streamed response body, or None if the upstream sent none."""
    if endpoint == "messages":
        return anthropic_usage(body.get("usage"))
    return openai_usage(body.get("usage"))


def response_text(endpoint: str, body: dict[str, Any]) -> str:
    """The answer text of a non-streamed response body ('' for embeddings or odd shapes)."""
    parts: list[str] = []
    if endpoint == "chat.completions":
        for choice in body.get("choices") or ():
            content = _dict(_dict(choice).get("message")).get("content")
            if isinstance(content, str):
                parts.append(content)
            break
    elif endpoint == "completions":
        for choice in body.get("choices") or ():
            text = _dict(choice).get("text")
            if isinstance(text, str):
                parts.append(text)
            break
    elif endpoint == "responses":
        for item in body.get("output") or ():
            for raw in _dict(item).get("content") or ():
                content = _dict(raw)
                if content.get("type") == "output_text" and isinstance(content.get("text"), str):
                    parts.append(content["text"])
    elif endpoint == "messages":
        for raw in body.get("content") or ():
            block = _dict(raw)
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
    return "".join(parts)


_PROMPT_KEYS = ("system", "instructions", "messages", "prompt", "input")
_CONTENT_KEYS = ("content", "text", "input", "system", "instructions")


def prompt_text(endpoint: str, body: dict[str, Any]) -> str:
    """All the text a request sends (unbounded: the client path uses `prompt_sample`)."""
    out: list[str] = []

    def collect(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, list):
            for item in value:
                collect(item)
        elif isinstance(value, dict):
            for key in _CONTENT_KEYS:
                if key in value:
                    collect(value[key])

    for key in _PROMPT_KEYS:
        if key in body:
            collect(body[key])
    return "\n".join(out)


@dataclass(frozen=True, slots=True)
class PromptSample:
    """The text of a request, or of its first `SAMPLE_MAX_NODES` values when it has more."""

    text: str
    """What was read, joined as `prompt_text` joins it (equal to it when `complete`, unless the
    body nests text deeper than `SAMPLE_MAX_DEPTH`)."""
    chars: int
    """The characters of the whole prompt text: exact when `complete`, else extrapolated from
    the share of each list that was read."""
    complete: bool
    """True when every value was read."""


def prompt_sample(endpoint: str, body: dict[str, Any]) -> PromptSample:
    """The prompt text of `body` read with bounded work, for estimating input tokens on the
    event loop: the walk of `prompt_text`, stopped after `SAMPLE_MAX_NODES` values. A list left
    part-read counts as its read items' characters times its length over the items read."""
    out: list[str] = []
    budget = SAMPLE_MAX_NODES
    cut = False

    def walk(value: Any, depth: int) -> float:
        nonlocal budget, cut
        if depth > SAMPLE_MAX_DEPTH:
            return 0.0
        if budget <= 0:
            cut = True
            return 0.0
        budget -= 1
        if isinstance(value, str):
            out.append(value)
            return len(value) + 1.0  # and the newline that joins it to the next
        total = 0.0
        if isinstance(value, list):
            for index, item in enumerate(value):
                if budget <= 0:
                    cut = True
                    return total * len(value) / index if index else total
                total += walk(item, depth + 1)
        elif isinstance(value, dict):
            for key in _CONTENT_KEYS:
                if key in value:
                    total += walk(value[key], depth + 1)
        return total

    chars = 0.0
    for key in _PROMPT_KEYS:
        if key in body:
            chars += walk(body[key], 0)
    text = "\n".join(out)
    if not cut:
        return PromptSample(text, len(text), True)
    return PromptSample(text, max(len(text), round(chars) - 1), False)
