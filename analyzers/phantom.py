"""`phantom_rule`: an answer that still states the value of a rule's earlier version.

A model that memorised `max_weight = 100` keeps answering 100 after the system prompt says 150.
The check knows the value the current version's system prompt carries and the values the rule's
earlier versions carried (the gateway extracts each version's value with the rule's `parameter`
regex, `rule_value`, and binds them with `PhantomRuleCheck.bind`). An answer **fails** when it
states an earlier value (different from the current one) and not the current one; it passes
otherwise, and with "no earlier version" when the rule has had none.

"States a value" means the value stands in the text as a token of its own:

- a number (`100`, `1.5`) not inside a longer number or decimal: `100` is stated by `100 kg`,
  `"max_weight": 100` and `max 100.` but not by `1000`, `100.5`, `2.100` or `1,100`;
- anything else case-insensitively, not inside a longer word: `standard` is stated by
  `Standard shipping` but not by `nonstandard`.

The answer's text, its tool calls' arguments and its reasoning (where the provider returned
reasoning and the gateway captured it) are each looked at; the reason says which stated the
earlier value, which value, and the version it belonged to. Tokens are literals, so the whole
text is scanned in linear time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import ClassVar

from analyzers.answer import Answer
from analyzers.checkbase import BaseCheck, Outcome
from analyzers.errors import CheckConfigError
from analyzers.patterns import compile_pattern
from analyzers.rule_version import MATCH_MAX_CHARS

VALUE_MAX_CHARS = 100
"""A rule value longer than this is cut to it (values are short: a weight, a tier, a date)."""
VALUE_GROUP = "value"
"""The named group of a `parameter` regex that holds the rule's value."""

_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")


def compile_parameter(source: object, field: str = "parameter") -> re.Pattern[str]:
    """A `parameter` regex: it compiles safely, has the named group `value` and does not match
    the empty string; raises `CheckConfigError(field, ...)` otherwise."""
    pattern = compile_pattern(source, field)
    if VALUE_GROUP not in pattern.groupindex:
        raise CheckConfigError(
            field, "needs a named group 'value', e.g. 'max_weight\\s*=\\s*(?P<value>\\d+)'"
        )
    if pattern.search(""):
        raise CheckConfigError(field, "matches the empty string (it would find a value anywhere)")
    return pattern


def rule_value(parameter: re.Pattern[str], system_prompt: str) -> str | None:
    """The rule's value in `system_prompt`: group `value` of the parameter's first match in the
    prompt's first `MATCH_MAX_CHARS` characters, stripped and cut to `VALUE_MAX_CHARS`; None
    when it does not match or the value is empty."""
    match = parameter.search(system_prompt[:MATCH_MAX_CHARS])
    if match is None:
        return None
    value = (match.group(VALUE_GROUP) or "").strip()
    return value[:VALUE_MAX_CHARS] or None


def states_value(text: str, value: str) -> bool:
    """Whether `value` stands in `text` as a token of its own (see the module docstring)."""
    return _Text(text).states(value)


class _Text:
    """A text searched for several values; its lowercase form is made once, when needed."""

    __slots__ = ("_lower", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._lower: str | None = None

    def states(self, value: str) -> bool:
        if not value:
            return False
        if _NUMBER.fullmatch(value):
            return _token(value, number=True).search(self.text) is not None
        if self._lower is None:
            self._lower = self.text.lower()
        return _token(value.lower(), number=False).search(self._lower) is not None


@lru_cache(maxsize=1024)
def _token(value: str, number: bool) -> re.Pattern[str]:
    """The value as a token: a number with no digit or decimal part after it (a full stop ending
    a sentence is fine) and no digit, decimal point or thousands comma before it; anything else
    with no word character on either side (matched against lowercase text).

    The pattern begins with the value itself, so the engine's fast literal search finds the
    candidates, and looks behind only from the end of a hit (a fixed-width lookbehind over the
    value): a pattern that began with a lookbehind was tried at every position of the text, more
    than a second for a megabyte answer.
    """
    literal, width = re.escape(value), len(value)
    if number:
        return re.compile(rf"(?s){literal}(?!\d|[.,]\d)(?<![\d.].{{{width}}})(?<!\d,.{{{width}}})")
    return re.compile(rf"(?s){literal}(?!\w)(?<!\w.{{{width}}})")


@dataclass(frozen=True, slots=True)
class PhantomRuleCheck(BaseCheck):
    """`phantom_rule`: fails an answer that states an earlier version's value and not the
    current one (see the module docstring). Compiled unbound (no earlier version: every answer
    passes); `bind` gives it the values of the version it judges."""

    name: str
    parameter: re.Pattern[str] | None = None
    """The check's own `parameter`, if it has one (else the rule's `probes.parameter`)."""
    version: str = ""
    """The version whose answers this check judges."""
    current: str | None = None
    """That version's value (None: its system prompt carries none)."""
    earlier: tuple[tuple[str, str], ...] = ()
    """(version, value) of earlier versions whose value differs from `current`, newest first,
    one per value."""
    known: bool = True
    """False when the version's value is not known (no request of it seen by the gateway):
    the answer cannot be judged, the result is `error`."""
    quote_values: bool = True
    """Whether the reason may quote the values (off under `store.bodies: none`)."""
    quote_max_chars: int = 40
    type: ClassVar[str] = "phantom_rule"

    def bind(
        self,
        version: str,
        current: str | None,
        earlier: Iterable[tuple[str, str | None]],
        known: bool = True,
    ) -> PhantomRuleCheck:
        """This check for answers of `version`, whose value is `current`, after the versions
        `earlier` ((version, value), oldest first); `known` False when `current` is unknown."""
        kept: dict[str, str] = {}
        for old_version, value in earlier:
            if value is not None and value != current and old_version != version:
                kept.pop(value, None)
                kept[value] = old_version  # the newest version carrying the value names it
        pairs = tuple((v, value) for value, v in reversed(kept.items()))
        return replace(self, version=version, current=current, earlier=pairs, known=known)

    def evaluate(self, answer: Answer) -> tuple[Outcome, str]:
        if not self.earlier:
            return "pass", "no earlier version"
        if not self.known:
            return "error", f"the value of version {_cut(self.version, 64)} is not known yet"
        texts = [("answer", answer.text)]
        texts += [(f"tool call {c.name or '?'}", c.arguments) for c in answer.tool_calls]
        texts.append(("reasoning", answer.reasoning))
        stated_current = False
        for where, raw in texts:
            if not raw:
                continue
            text = _Text(raw)
            if self.current is not None and text.states(self.current):
                stated_current = True
                continue
            for version, value in self.earlier:
                if text.states(value):
                    return "fail", self._phantom(where, version, value)
        if stated_current:
            return "pass", f"states the current{self._quoted(self.current)}"
        return "pass", "states no earlier version's value"

    def _phantom(self, where: str, version: str, value: str) -> str:
        current = (
            f"the current{self._quoted(self.current)}"
            if self.current is not None
            else "the current version has none"
        )
        return (
            f"the {where} states{self._quoted(value)} of version {_cut(version, 64)}, not {current}"
        )

    def _quoted(self, value: str | None) -> str:
        if value is None or not self.quote_values:
            return " value" if value is not None else ""
        return f" value {_cut(value, self.quote_max_chars)!r}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
