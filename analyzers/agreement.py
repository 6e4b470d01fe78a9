"""Agreement between two answers to the same request, and the disagreement a candidate adds
beyond the primary's own noise.

`agree(primary, candidate, spec)` compares two answer texts the way `AgreementSpec.mode` says:

- `exact` — the same characters;
- `normalized` — equal after `analyzers.comparison.normalize` (NFKC, case folding, whitespace
  collapsed, punctuation trimmed at both ends);
- `json_fields` — both answers are JSON and every field in `fields` selects JSON-equal values
  in both (a field is a JSONPath such as `$.order.weight`, or a bare top-level key); with no
  `fields`, the whole documents are compared. Numbers are equal within `tolerance`;
- `numeric` — with `fields`: both answers are JSON and each field selects numbers within
  `tolerance` of each other. Without: the numbers in each text (`-12`, `3.5`, `1e3`, read left
  to right from the first `NUMBERS_MAX_CHARS` characters) are as many and pairwise within
  `tolerance`.

`tolerance` is absolute (|a - b| ≤ tolerance). `agree` returns None when the comparison does not
apply — an answer is not JSON in a JSON mode, a field selects nothing in either answer, or
neither text has a number — so the caller can count it apart instead of as a disagreement.

`attributable_disagreement` is the candidate-primary disagreement rate minus the primary-primary
rate (the noise floor: the primary asked the same question twice), with Newcombe's hybrid score
95% interval for a difference of two independent proportions (Newcombe 1998, "Interval
estimation for the difference between independent proportions", method 10). With p₁ = x₁/n₁,
p₂ = x₂/n₂ and the Wilson score intervals (l₁, u₁), (l₂, u₂) of each:

    d = p₁ - p₂,   low = d - √((p₁ - l₁)² + (u₂ - p₂)²),   high = d + √((u₁ - p₁)² + (p₂ - l₂)²)

The arithmetic is `analyzers.summary.newcombe_difference`, shared with the report.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from analyzers.comparison import normalize
from analyzers.errors import SpecError
from analyzers.jsonpath import JSONPath, compile_path
from analyzers.jsonvalue import is_number, json_equal, parse_json
from analyzers.summary import Rate, newcombe_difference

AgreementMode = Literal["exact", "normalized", "json_fields", "numeric"]
_MODES = ("exact", "normalized", "json_fields", "numeric")

NUMBERS_MAX_CHARS = 100_000
"""`numeric` mode without fields reads numbers from this many leading characters of each text."""

# Not inside a word or a dotted run ("v2", "1.2.3" → 1.2 only); units may follow ("150kg").
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True, slots=True)
class AgreementSpec:
    """How two answers are compared (see the module docstring). Raises `SpecError` naming the
    field when it cannot be used."""

    mode: AgreementMode = "normalized"
    """exact, normalized, json_fields or numeric."""
    fields: tuple[str, ...] = ()
    """JSONPaths (or bare top-level keys) compared in json_fields and numeric modes."""
    tolerance: float = 0.0
    """Largest absolute difference between two numbers that still agree."""
    paths: tuple[JSONPath, ...] = field(init=False, repr=False, compare=False)
    """`fields`, compiled."""

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise SpecError(
                "mode", f"unknown agreement mode {self.mode!r}; one of: {', '.join(_MODES)}"
            )
        if isinstance(self.tolerance, bool) or not isinstance(self.tolerance, int | float):
            raise SpecError("tolerance", "must be a number")
        if not math.isfinite(self.tolerance) or self.tolerance < 0:
            raise SpecError("tolerance", "must be a finite number >= 0")
        if isinstance(self.fields, str) or not isinstance(self.fields, tuple | list):
            raise SpecError("fields", "must be a list of JSONPaths or top-level keys")
        object.__setattr__(self, "fields", tuple(self.fields))
        if self.fields and self.mode not in ("json_fields", "numeric"):
            raise SpecError(
                "fields", f"only json_fields and numeric modes compare fields, not {self.mode}"
            )
        paths = tuple(_path(name, f"fields[{i}]") for i, name in enumerate(self.fields))
        object.__setattr__(self, "paths", paths)  # derived once; the spec stays frozen


def _path(name: Any, where: str) -> JSONPath:
    if not isinstance(name, str) or not name:
        raise SpecError(where, "must be a non-empty string")
    if name.startswith("$"):
        return compile_path(name, where)
    return JSONPath(f"$[{name!r}]", (name,))


def agree(primary_text: str, candidate_text: str, spec: AgreementSpec) -> bool | None:
    """Whether two answers agree under `spec`; None when the comparison does not apply."""
    if spec.mode == "exact":
        return primary_text == candidate_text
    if spec.mode == "normalized":  # equal texts need no normalising (it costs ~0.1 µs/char)
        return primary_text == candidate_text or normalize(primary_text) == normalize(
            candidate_text
        )
    if spec.mode == "numeric" and not spec.fields:
        return _numbers_agree(primary_text, candidate_text, spec.tolerance)
    a, b = parse_json(primary_text), parse_json(candidate_text)
    if not (a.ok and b.ok):
        return None
    if not spec.fields:
        return json_equal(a.value, b.value, spec.tolerance)
    numeric = spec.mode == "numeric"
    for path in spec.paths:
        left, right = path.find(a.value), path.find(b.value)
        if not left and not right:
            return None
        if numeric and not all(is_number(v) for v in (*left, *right)):
            return None
        if not json_equal(left, right, spec.tolerance):
            return False
    return True


def _numbers_agree(a: str, b: str, tolerance: float) -> bool | None:
    left, right = _numbers(a), _numbers(b)
    if not left and not right:
        return None
    return len(left) == len(right) and all(
        math.isclose(x, y, rel_tol=0.0, abs_tol=tolerance) for x, y in zip(left, right, strict=True)
    )


def _numbers(text: str) -> list[float]:
    found = []
    for match in _NUMBER.finditer(text[:NUMBERS_MAX_CHARS]):
        value = float(match.group())
        if math.isfinite(value):
            found.append(value)
    return found


class DisagreementEstimate(NamedTuple):
    """Disagreement attributable to the candidate, with its 95% interval."""

    estimate: float | None
    """Candidate-primary rate minus primary-primary rate; None when either has no pairs."""
    low: float
    """Lower bound (-1 when unknown). Above 0: the candidate differs beyond the noise."""
    high: float
    """Upper bound (1 when unknown)."""


def attributable_disagreement(
    cand_disagree: int, cand_n: int, noise_disagree: int, noise_n: int
) -> DisagreementEstimate:
    """`cand_disagree` of `cand_n` candidate-primary pairs disagreed and `noise_disagree` of
    `noise_n` primary-primary pairs did: the difference of the two rates with Newcombe's
    interval (see the module docstring). Raises ValueError for impossible counts."""
    for count, n in ((cand_disagree, cand_n), (noise_disagree, noise_n)):
        if isinstance(count, bool) or isinstance(n, bool) or not 0 <= count <= n:
            raise ValueError(f"need 0 <= disagreements <= pairs, got {count}/{n}")
    difference = newcombe_difference(
        Rate.of(cand_disagree, cand_n), Rate.of(noise_disagree, noise_n)
    )
    return DisagreementEstimate(difference.value, difference.low, difference.high)
