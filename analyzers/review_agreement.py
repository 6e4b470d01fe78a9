"""How far blind reviewers agree, and whether the side an answer was shown on swayed them (pure:
reviews in, numbers out).

- Agreement is read on the items two reviewers scored (the first two reviews of each): Cohen's
  kappa on the preference (A, B or tie: agreement beyond what the two reviewers' own shares of
  each answer would give by chance; 1 is perfect, 0 chance, below 0 worse than chance) and the
  mean absolute difference of their 1-5 scores, over both answers.
- Position bias is read on every review: the share of preferences for the answer shown as A. The
  answers are put on either side by a fair coin, so without bias the A share of decided
  preferences is one half whatever the models are.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Preference = Literal["A", "B", "tie"]
PREFERENCES: tuple[Preference, ...] = ("A", "B", "tie")


@dataclass(frozen=True, slots=True)
class ScoredPair:
    """One reviewer's scores of one item, as shown: the answer on the left (A) and the right (B)."""

    item: str
    score_a: int
    score_b: int
    preference: Preference


@dataclass(frozen=True, slots=True)
class Agreement:
    """Two reviewers on the same items."""

    items: int
    """Items scored by at least two reviewers (the first two of each are compared)."""
    kappa: float | None
    """Cohen's kappa on the preferences; None without items, or when both reviewers always gave
    the same single preference (chance agreement is then 1 and kappa undefined)."""
    observed: float | None
    """Share of those items with the same preference."""
    mean_score_difference: float | None
    """Mean |difference| of the two reviewers' scores of the same answer (0-4)."""


@dataclass(frozen=True, slots=True)
class PositionBias:
    """Where the preferred answer was shown."""

    reviews: int
    a: int
    """Preferences for the answer shown as A."""
    b: int
    ties: int

    @property
    def a_share(self) -> float | None:
        """A's share of decided (not tied) preferences: about one half without position bias."""
        decided = self.a + self.b
        return self.a / decided if decided else None


def agreement(reviews: Iterable[ScoredPair]) -> Agreement:
    """Agreement of the first two reviews of every item that has two (in the order given)."""
    firsts: dict[str, ScoredPair] = {}
    pairs: list[tuple[ScoredPair, ScoredPair]] = []
    seconds: set[str] = set()
    for review in reviews:
        first = firsts.get(review.item)
        if first is None:
            firsts[review.item] = review
        elif review.item not in seconds:
            seconds.add(review.item)
            pairs.append((first, review))
    if not pairs:
        return Agreement(0, None, None, None)
    n = len(pairs)
    same = sum(one.preference == two.preference for one, two in pairs)
    shares_one = Counter(one.preference for one, _ in pairs)
    shares_two = Counter(two.preference for _, two in pairs)
    chance = math.fsum(shares_one[p] * shares_two[p] for p in PREFERENCES) / (n * n)
    observed = same / n
    kappa = None if chance >= 1.0 else (observed - chance) / (1.0 - chance)
    differences = [abs(one.score_a - two.score_a) for one, two in pairs] + [
        abs(one.score_b - two.score_b) for one, two in pairs
    ]
    return Agreement(n, kappa, observed, math.fsum(differences) / len(differences))


def position_bias(preferences: Sequence[Preference]) -> PositionBias:
    """How often each side was preferred, over every review."""
    counts = Counter(preferences)
    return PositionBias(len(preferences), counts["A"], counts["B"], counts["tie"])
