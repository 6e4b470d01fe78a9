"""Scripted answers: what the fake model says to a prompt.

- `echo`: `You said: <last user message>` followed by filler, cut to `answer_tokens` tokens.
- `fixed`: the same text every time.
- `regex_from_system`: a template filled from a regular expression matched against the system
  prompt — a model that follows the rule it is given (`max_weight = 150` -> `{"max_weight": 150}`).
"""

from __future__ import annotations

import os
import re
import time
from typing import Literal

from proxy.mock_upstream.behavior import (
    AnswerSpec,
    EchoAnswer,
    FixedAnswer,
    ModelBehaviorSpec,
    RegexFromSystemAnswer,
)
from proxy.mock_upstream.conversation import Prompt, Turn
from proxy.mock_upstream.tokens import TokenCounter

_FILLER = (
    "This answer comes from the mirrorgate mock upstream, which pads it with plain sentences so "
    "that it has the size of a real one. The words carry no meaning, but every token is counted. "
)
_GROUP_REF = re.compile(r"\{(\d+)\}")
# Longest user text kept before cutting an echo to size: no token is anywhere near this long.
_CHARS_PER_TOKEN_BOUND = 32


def answer_text(answer: AnswerSpec, prompt: Prompt, tokens: TokenCounter) -> str:
    """The full answer to `prompt`, before any `max_tokens` limit."""
    if isinstance(answer, FixedAnswer):
        return answer.text * answer.repeat
    if isinstance(answer, RegexFromSystemAnswer):
        match = re.search(answer.pattern, prompt.system)
        if match is None:
            return answer.default
        return _GROUP_REF.sub(lambda ref: _group(match, int(ref.group(1))), answer.template)
    return _echo(answer, prompt, tokens)


def compose(prompt: Prompt, spec: ModelBehaviorSpec, tokens: TokenCounter) -> Turn:
    """Answer `prompt` as `spec` says, with real token counts and the stream pieces."""
    text = answer_text(spec.answer, prompt, tokens)
    output_tokens = tokens.count(text)
    finish: Literal["stop", "length"] = "stop"
    if prompt.max_tokens is not None and output_tokens > prompt.max_tokens:
        text = tokens.truncate(text, prompt.max_tokens)
        output_tokens = tokens.count(text)
        finish = "length"
    input_tokens = prompt.extra_tokens + sum(tokens.count(t) for t in prompt.texts)
    return Turn(
        prompt=prompt,
        id=os.urandom(12).hex(),
        created=int(time.time()),
        text=text,
        pieces=tokens.split(text, spec.stream_chunk_tokens),
        input_tokens=input_tokens,
        cached_tokens=min(spec.cached_tokens, input_tokens),
        output_tokens=output_tokens,
        finish=finish,
        usage=spec.usage,
    )


def _echo(answer: EchoAnswer, prompt: Prompt, tokens: TokenCounter) -> str:
    size = answer.answer_tokens
    said = prompt.last_user[: size * _CHARS_PER_TOKEN_BOUND]
    filler = _FILLER * (size // 30 + 1)
    return tokens.truncate(f"You said: {said} {filler}", size).rstrip()


def _group(match: re.Match[str], index: int) -> str:
    if index > (match.re.groups or 0):
        return f"{{{index}}}"
    return match.group(index) or ""
