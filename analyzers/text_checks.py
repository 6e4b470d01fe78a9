"""Checks on an answer's text: `regex`, `not_regex`, `contains`, `not_contains`, `max_chars`
and `refusal`. Each fails empty text and text that is not valid UTF-8 (see `TextCheck`).

Regex checks search (not full-match: anchor with `^…$` for that) in the first
`CheckLimits.regex_max_chars` characters. When the answer is longer and what was seen does not
settle the question — no match for `regex`, no match for `not_regex`, or a match that touches
the cut (an anchor such as `$` or `\\b` could be true only there) — the result is `error` with
"truncated" in the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from analyzers.checkbase import Outcome, TextCheck
from analyzers.refusal import find_refusal


def _shown(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else repr(text[: limit - 1] + "…")


@dataclass(frozen=True, slots=True)
class RegexSearch:
    """Where a pattern matched in the searched part of a text, and whether that part was all."""

    start: int | None
    """Start of the first match; None when there was none."""
    truncated: bool
    """The text was longer than the limit, so only its head was searched."""
    decided: bool
    """False when the head alone cannot settle it (see the module docstring)."""


def search_head(pattern: re.Pattern[str], text: str, max_chars: int) -> RegexSearch:
    """Search `pattern` in the first `max_chars` characters of `text`."""
    truncated = len(text) > max_chars
    head = text[:max_chars] if truncated else text
    match = pattern.search(head)
    if match is None:
        return RegexSearch(None, truncated, decided=not truncated)
    return RegexSearch(
        match.start(), truncated, decided=not (truncated and match.end() >= len(head))
    )


def _truncation(text: str, max_chars: int) -> str:
    return (
        f"truncated: the answer has {len(text)} characters and regex checks look at the first "
        f"{max_chars}"
    )


@dataclass(frozen=True, slots=True)
class RegexCheck(TextCheck):
    """`regex`: passes when `pattern` is found in the text."""

    name: str
    pattern: re.Pattern[str]
    max_chars: int
    type: ClassVar[str] = "regex"

    def judge(self, text: str) -> tuple[Outcome, str]:
        found = search_head(self.pattern, text, self.max_chars)
        if not found.decided:
            return (
                "error",
                f"undecided for /{self.pattern.pattern}/: {_truncation(text, self.max_chars)}",
            )
        if found.start is None:
            return "fail", f"no match for /{self.pattern.pattern}/"
        return "pass", f"matches /{self.pattern.pattern}/ at character {found.start}"


@dataclass(frozen=True, slots=True)
class NotRegexCheck(TextCheck):
    """`not_regex`: passes when `pattern` is nowhere in the text."""

    name: str
    pattern: re.Pattern[str]
    max_chars: int
    type: ClassVar[str] = "not_regex"

    def judge(self, text: str) -> tuple[Outcome, str]:
        found = search_head(self.pattern, text, self.max_chars)
        if not found.decided:
            return (
                "error",
                f"undecided for /{self.pattern.pattern}/: {_truncation(text, self.max_chars)}",
            )
        if found.start is not None:
            return "fail", f"forbidden /{self.pattern.pattern}/ matches at character {found.start}"
        return "pass", f"no match for /{self.pattern.pattern}/"


@dataclass(frozen=True, slots=True)
class ContainsCheck(TextCheck):
    """`contains`: passes when `value` occurs in the text (exact, case-sensitive)."""

    name: str
    value: str
    type: ClassVar[str] = "contains"

    def judge(self, text: str) -> tuple[Outcome, str]:
        at = text.find(self.value)
        if at < 0:
            return "fail", f"does not contain {_shown(self.value)}"
        return "pass", f"contains {_shown(self.value)} at character {at}"


@dataclass(frozen=True, slots=True)
class NotContainsCheck(TextCheck):
    """`not_contains`: passes when `value` does not occur in the text (exact, case-sensitive)."""

    name: str
    value: str
    type: ClassVar[str] = "not_contains"

    def judge(self, text: str) -> tuple[Outcome, str]:
        at = text.find(self.value)
        if at >= 0:
            return "fail", f"contains forbidden {_shown(self.value)} at character {at}"
        return "pass", f"does not contain {_shown(self.value)}"


@dataclass(frozen=True, slots=True)
class MaxCharsCheck(TextCheck):
    """`max_chars`: passes when the text has at most `max` characters (code points, not bytes
    or tokens)."""

    name: str
    max: int
    type: ClassVar[str] = "max_chars"

    def judge(self, text: str) -> tuple[Outcome, str]:
        if len(text) > self.max:
            return "fail", f"{len(text)} characters, more than the maximum {self.max}"
        return "pass", f"{len(text)} characters (maximum {self.max})"


@dataclass(frozen=True, slots=True)
class RefusalCheck(TextCheck):
    """`refusal`: passes when the answer is not a refusal, fails when one of `phrases` (folded,
    see `analyzers.refusal`) is in its first `window` characters."""

    name: str
    phrases: tuple[str, ...]
    window: int
    type: ClassVar[str] = "refusal"

    def judge(self, text: str) -> tuple[Outcome, str]:
        phrase = find_refusal(text, self.phrases, self.window)
        if phrase is not None:
            return "fail", f"refusal: {_shown(phrase)} in the first {self.window} characters"
        return "pass", f"no refusal phrase in the first {self.window} characters"
