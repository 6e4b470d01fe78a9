"""The context-awareness score of one model on one rule (pure: a tally in, rates out).

Rule-flip probes re-send live requests with the rule's value flipped and score each answer
*followed* (it obeys the flipped value), *stuck* (it answers the original value: the model
memorised the old rule) or *other*. From one target's tally:

- the **adaptation rate**, followed / probes: how often the model follows a rule it is told;
- the **stuck rate**, stuck / probes: how often it keeps the old one.

Each comes with its 95% **Wilson score interval** (Wilson 1927), which stays inside [0, 1] and
keeps a spread at 0/n and n/n, where the normal approximation collapses to a point. With no probes
the rates and their bounds are None: nothing is known yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.summary import wilson_interval


@dataclass(frozen=True, slots=True)
class ScoredRate:
    """One proportion of a target's probes with its 95% Wilson score interval."""

    rate: float | None
    """events / probes; None with no probes."""
    low: float | None
    """Lower bound of the 95% Wilson interval; None with no probes."""
    high: float | None
    """Upper bound of the 95% Wilson interval; None with no probes."""

    def as_dict(self) -> dict[str, float | None]:
        return {"rate": self.rate, "low": self.low, "high": self.high}


@dataclass(frozen=True, slots=True)
class AdaptationScore:
    """One target's context-awareness score on one rule."""

    followed: int
    stuck: int
    other: int
    adaptation: ScoredRate
    """followed / probes."""
    stuck_rate: ScoredRate
    """stuck / probes."""

    @property
    def probes(self) -> int:
        return self.followed + self.stuck + self.other

    def as_dict(self) -> dict[str, object]:
        """The JSON shape of the admin API: the counts, then `adaptation` and `stuck_rate`, each
        `{rate, low, high}` (`stuck` is the count, so its rate needs its own name)."""
        return {
            "followed": self.followed,
            "stuck": self.stuck,
            "other": self.other,
            "probes": self.probes,
            "adaptation": self.adaptation.as_dict(),
            "stuck_rate": self.stuck_rate.as_dict(),
        }


def _scored(events: int, n: int) -> ScoredRate:
    if n == 0:
        return ScoredRate(None, None, None)
    low, high = wilson_interval(events, n)
    return ScoredRate(events / n, low, high)


def adaptation_score(followed: int, stuck: int, other: int) -> AdaptationScore:
    """The score of a tally of scored probes. Raises ValueError for a negative count."""
    if min(followed, stuck, other) < 0:
        raise ValueError(f"probe counts cannot be negative, got {followed}/{stuck}/{other}")
    n = followed + stuck + other
    return AdaptationScore(followed, stuck, other, _scored(followed, n), _scored(stuck, n))
