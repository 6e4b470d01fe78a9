"""Scripted answers: what the fake model says to a prompt.

- `echo`: `You said: <last user message>` followed by filler, cut to `answer_tokens` tokens.
- `fixed`: the same text every time.
- `regex_from_system`: a template filled from a regular expression matched against the system
  prompt — a model that follows the rule it is given (`max_weight = 150` -> `{"max_weight": 150}`).
  With `memorised`, a counted share of the answers fill one group with a memorised value instead
  (`{"max_weight": 100}` whatever the prompt says); an optional `reasoning` template is filled
  from the same groups, so reasoning and answer always state the same value.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
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


Recall = Callable[[float], bool]
"""Asked once per answer that could be memorised, with the memorised rate: answer from memory?"""


def answer_text(
    answer: AnswerSpec, prompt: Prompt, tokens: TokenCounter, recall: Recall | None = None
) -> str:
    """The full answer to `prompt`, before any `max_tokens` limit."""
    return _answer_and_reasoning(answer, prompt, tokens, recall)[0]


def compose(
    prompt: Prompt, spec: ModelBehaviorSpec, tokens: TokenCounter, recall: Recall | None = None
) -> Turn:
    """Answer `prompt` as `spec` says, with real token counts and the stream pieces.

    `recall` decides, for an answer with a memorised value, whether this one is memorised (the
    app passes its per-model counter); without it no answer is.
    """
    text, reasoning = _answer_and_reasoning(spec.answer, prompt, tokens, recall)
    output_tokens = tokens.count(text)
    finish: Literal["stop", "length"] = "stop"
    if prompt.max_tokens is not None and output_tokens > prompt.max_tokens:
        text = tokens.truncate(text, prompt.max_tokens)
        output_tokens = tokens.count(text)
        finish = "length"
    reasoning_tokens = tokens.count(reasoning) if reasoning else 0
    input_tokens = prompt.extra_tokens + sum(tokens.count(t) for t in prompt.texts)
    return Turn(
        prompt=prompt,
        id=os.urandom(12).hex(),
        created=int(time.time()),
        text=text,
        pieces=tokens.split(text, spec.stream_chunk_tokens),
        input_tokens=input_tokens,
        cached_tokens=min(spec.cached_tokens, input_tokens),
        output_tokens=output_tokens + reasoning_tokens,
        finish=finish,
        usage=spec.usage,
        reasoning=reasoning,
        reasoning_tokens=reasoning_tokens,
    )


def _answer_and_reasoning(
    answer: AnswerSpec, prompt: Prompt, tokens: TokenCounter, recall: Recall | None
) -> tuple[str, str]:
    """The answer text and its reasoning text ("" when the answer has none)."""
    if isinstance(answer, FixedAnswer):
        return answer.text * answer.repeat, ""
    if isinstance(answer, RegexFromSystemAnswer):
        match = re.search(answer.pattern, prompt.system)
        if match is None:
            return answer.default, ""
        groups = [match.group(0), *(g or "" for g in match.groups())]
        memory = answer.memorised
        if memory is not None and recall is not None and recall(memory.rate):
            groups[memory.group] = memory.value
        reasoning = _fill(answer.reasoning, groups) if answer.reasoning is not None else ""
        return _fill(answer.template, groups), reasoning
    return _echo(answer, prompt, tokens), ""


def _fill(template: str, groups: list[str]) -> str:
    """`template` with each `{n}` replaced by group n (a reference to no group stays as it is)."""
    return _GROUP_REF.sub(
        lambda ref: groups[i] if (i := int(ref.group(1))) < len(groups) else ref.group(0),
        template,
    )


def _echo(answer: EchoAnswer, prompt: Prompt, tokens: TokenCounter) -> str:
    size = answer.answer_tokens
    said = prompt.last_user[: size * _CHARS_PER_TOKEN_BOUND]
    filler = _FILLER * (size // 30 + 1)
    return tokens.truncate(f"You said: {said} {filler}", size).rstrip()
