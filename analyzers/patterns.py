"""Operator regexes, compiled once at start and refused when they can backtrack exponentially.

Python's `re` is a backtracking engine with no step limit, and it holds the GIL while matching.
Two guards keep a check from stalling the gateway on a hostile or merely unlucky answer:

1. **Exponential shapes are refused at compile time.** A repeated group whose body can split the
   same text in many ways — an inner variable repeat with nothing else that must match beside it,
   as in `(a+)+`, `(\\w+\\s?)*`, `(\\d+,?)+`, `(x*y*)*` — takes 2^n steps on n characters that
   almost match, so no input limit can save it. `compile_pattern` raises `SpecError` for these
   shapes and suggests an atomic group `(?>…)` or a possessive quantifier `a++`, which Python
   3.11 supports and which cannot backtrack. The detector is a best effort on the parsed pattern:
   overlapping alternatives such as `(a|aa)*` are not detected.
2. **Matching looks at the first `max_chars` characters only** (the checks' `regex_max_chars`,
   16,384 by default): polynomial patterns such as `\\s+$` (quadratic) or `.*x.*y` (cubic) then
   cost at most what they cost on that many characters. When the answer was longer and the
   result depends on the rest, the check says `error` with "truncated" in its reason, never
   `pass`.

Residual risk, measured with CPython 3.11 on the development machine: the quadratic `\\s+$` takes
about 1 s on 10,000 spaces followed by `x`, and 2 s at the 16,384 default; the cubic `.*x.*y` took
6 minutes on 10,000 `x`s (by extrapolation, about 25 minutes at the default). Keep patterns
anchored and specific, and run checks where a stalled one cannot hold up the client path.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from analyzers.errors import SpecError

_REPEATS = {"MAX_REPEAT", "MIN_REPEAT"}
_ZERO_WIDTH = {"AT", "ASSERT", "ASSERT_NOT"}
_MANY = 10
"""An outer repeat allowing more than this many iterations counts as unbounded."""


def compile_pattern(source: Any, field: str) -> re.Pattern[str]:
    """Compile an operator regex; raise `SpecError(field, …)` when it does not compile or has an
    exponential backtracking shape (see the module docstring)."""
    if not isinstance(source, str):
        raise SpecError(
            field, f"a regular expression must be a string, not {type(source).__name__}"
        )
    try:
        compiled = re.compile(source)
    except (re.error, OverflowError, RecursionError) as exc:
        raise SpecError(field, f"not a valid regular expression: {exc}") from exc
    if backtracks_exponentially(source):
        raise SpecError(
            field,
            f"{source!r} can backtrack exponentially: a repeated group in it can split the same "
            "text in many ways; make the inner repeat atomic — (?>…) or a possessive quantifier "
            "such as a++ — or put a required separator inside the group",
        )
    return compiled


def backtracks_exponentially(source: str) -> bool:
    """True when `source` has an exponential-backtracking shape (see the module docstring).
    Uses CPython's own regex parser (`re._parser`); should that change shape, the guard is
    skipped rather than refusing valid patterns."""
    try:
        parser = importlib.import_module("re._parser")
        tree = parser.parse(source)
        return _find(list(tree))
    except Exception:  # the private parser moved: skip the guard, the pattern compiled fine
        return False


def _find(items: list[Any]) -> bool:
    for op, av in items:
        name = str(op)
        if name in _REPEATS:
            _low, high, body = av
            if high > _MANY and _ambiguous(list(body)):
                return True
            inner = [list(body)]
        elif name == "SUBPATTERN":
            inner = [list(av[3])]
        elif name == "ATOMIC_GROUP":
            inner = [list(av)]
        elif name == "POSSESSIVE_REPEAT":
            inner = [list(av[2])]
        elif name == "BRANCH":
            inner = [list(alt) for alt in av[1]]
        elif name in ("ASSERT", "ASSERT_NOT"):
            inner = [list(av[1])]
        else:
            inner = []
        if any(_find(part) for part in inner):
            return True
    return False


def _ambiguous(items: list[Any]) -> bool:
    """True when the sequence can match the same text in many ways: it holds a variable repeat
    (one that can backtrack over a varying number of characters) and everything else is
    optional, so successive iterations of an outer repeat can trade characters freely."""
    for index, (op, av) in enumerate(items):
        if _variable(op, av) and all(
            _nullable(o, a) for j, (o, a) in enumerate(items) if j != index
        ):
            return True
    return False


def _variable(op: Any, av: Any) -> bool:
    name = str(op)
    if name in _REPEATS:
        low, high, _body = av
        return bool(high >= 2 and high > low)
    if name == "SUBPATTERN":
        return _ambiguous(list(av[3]))
    if name == "BRANCH":
        return any(_ambiguous(list(alt)) for alt in av[1])
    return False  # atomic groups and possessive repeats never give characters back


def _nullable(op: Any, av: Any) -> bool:
    name = str(op)
    if name in _ZERO_WIDTH:
        return True
    if name in _REPEATS or name == "POSSESSIVE_REPEAT":
        return bool(av[0] == 0 or all(_nullable(o, a) for o, a in av[2]))
    if name == "SUBPATTERN":
        return all(_nullable(o, a) for o, a in av[3])
    if name == "ATOMIC_GROUP":
        return all(_nullable(o, a) for o, a in av)
    if name == "BRANCH":
        return any(all(_nullable(o, a) for o, a in alt) for alt in av[1])
    return False
