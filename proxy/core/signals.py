"""One definition per signal: what counts as a user's correction, and whether a candidate's
answer agreed with the primary's. The judge's windows, the report and the metrics all decide
through these functions (the store's SQL for corrections is built from `is_correction`'s rule,
and a test holds the two to the same answer on every shape of feedback).

- **A correction** is feedback of kind `correction` that says `corrected: true` or carries a
  non-empty correction text. `corrected: false` without a text is not one.
- **Agreement** of a pair is decided once, when the pair is recorded, by `judge_pair` under the
  route's `agreement` settings (mode, fields, tolerance; `analyzers.agreement.agree`), and stored
  with the pair as `agree`, `disagree` or `not_applicable` (an answer was not `ok`, or the
  comparison does not apply: not JSON in a JSON mode, a field in neither answer, no numbers).
  `pair_agreed` reads that verdict back; for a pair stored without one (recorded before the
  verdict was, or an evaluation set's, whose route is no route of the config) it falls back to
  the stored equality the route's mode reads when that equality decides it (`exact`,
  `normalized`), and says "does not apply" in the JSON and numeric modes, whose fields and
  tolerance no stored equality reflects.
"""

from __future__ import annotations

from enum import StrEnum

from analyzers.agreement import AgreementSpec, agree
from analyzers.comparison import TextComparison

from .records import FeedbackRecord


def is_correction(feedback: FeedbackRecord) -> bool:
    """Whether `feedback` is a correction of the answer: kind `correction` with `corrected` set
    or a non-empty `correction` text."""
    return feedback.kind == "correction" and (feedback.corrected or bool(feedback.correction))


class Agreement(StrEnum):
    """A pair's verdict under its route's agreement settings, as stored with the pair."""

    AGREE = "agree"
    DISAGREE = "disagree"
    NOT_APPLICABLE = "not_applicable"
    """An answer was not `ok`, or the route's comparison does not apply to the two answers."""


def judge_pair(
    primary_text: str,
    candidate_text: str,
    spec: AgreementSpec,
    *,
    both_ok: bool,
    comparison: TextComparison | None = None,
) -> Agreement:
    """The verdict on one pair under `spec` (the route's agreement settings). `both_ok`: both
    answers ended `ok` (otherwise nothing is compared). `comparison`, when the caller already
    has it, spares the normalised mode a second normalisation of the same texts."""
    if not both_ok:
        return Agreement.NOT_APPLICABLE
    verdict: bool | None
    if spec.mode == "normalized" and comparison is not None and not comparison.truncated:
        verdict = comparison.normalized  # the same test on the same texts, already done
    else:
        verdict = agree(primary_text, candidate_text, spec)
    if verdict is None:
        return Agreement.NOT_APPLICABLE
    return Agreement.AGREE if verdict else Agreement.DISAGREE


def pair_agreed(
    agreement: str | None, mode: str, exact_equal: bool, normalized_equal: bool
) -> bool | None:
    """Whether a stored pair agreed with the primary under its route's settings; None when the
    comparison does not apply. `agreement` is the verdict stored with the pair (None for pairs
    stored without one: then `mode` picks the stored equality, if one decides it)."""
    if agreement is not None:
        verdict = Agreement(agreement)
        return None if verdict is Agreement.NOT_APPLICABLE else verdict is Agreement.AGREE
    if mode == "exact":
        return exact_equal
    if mode == "normalized":
        return normalized_equal
    return None
