"""The first comparison of a candidate's answer with the primary's (pure: text in, numbers out).

Every shadow, noise and replay pair gets one: exact and normalised text equality, JSON equality
(whole and per top-level field) when both answers parse as JSON objects, and the length ratio.
Latency, time-to-first-token and cost deltas are plain subtractions done by the caller.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field
from typing import Any

MAX_COMPARED_CHARS = 1_000_000
"""Answers longer than this are compared on their first million characters (and flagged)."""


@dataclass(frozen=True, slots=True)
class TextComparison:
    """How two answers differ, as far as text and JSON can tell."""

    exact: bool
    """Byte-for-byte the same text."""
    normalized: bool
    """The same after Unicode NFKC, case folding, whitespace collapsing and trimming punctuation
    at both ends."""
    json_equal: bool | None
    """Both parse as JSON and are equal; None when either is not JSON."""
    json_fields: dict[str, bool] = field(default_factory=dict)
    """For two JSON objects: per top-level key of either, whether both have it with equal values."""
    length_ratio: float | None = None
    """len(candidate) / len(primary); None when the primary answer is empty."""
    truncated: bool = False
    """True when an answer was longer than MAX_COMPARED_CHARS."""


def normalize(text: str) -> str:
    """The normal form used for `normalized` equality."""
    folded = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    # Trim punctuation and spaces at both ends by walking inwards: a regex anchored at the end
    # would be tried at every position of a long answer.
    start, end = 0, len(folded)
    while start < end and not folded[start].isalnum():
        start += 1
    while end > start and not folded[end - 1].isalnum():
        end -= 1
    return folded[start:end]


def _json(text: str) -> tuple[bool, Any]:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return False, None
    try:
        return True, json.loads(stripped)
    except (ValueError, RecursionError):
        return False, None


def compare_text(primary: str, candidate: str) -> TextComparison:
    """Compare a candidate answer with the primary's."""
    truncated = len(primary) > MAX_COMPARED_CHARS or len(candidate) > MAX_COMPARED_CHARS
    a, b = primary[:MAX_COMPARED_CHARS], candidate[:MAX_COMPARED_CHARS]
    ok_a, json_a = _json(a)
    ok_b, json_b = _json(b)
    json_equal: bool | None = None
    fields: dict[str, bool] = {}
    if ok_a and ok_b:
        json_equal = json_a == json_b
        if isinstance(json_a, dict) and isinstance(json_b, dict):
            for key in sorted(set(json_a) | set(json_b)):
                fields[key] = key in json_a and key in json_b and json_a[key] == json_b[key]
    return TextComparison(
        exact=primary == candidate,
        normalized=a == b or normalize(a) == normalize(b),  # equal texts need no normalising
        json_equal=json_equal,
        json_fields=fields,
        length_ratio=(len(candidate) / len(primary)) if primary else None,
        truncated=truncated,
    )
