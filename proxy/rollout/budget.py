"""One false-rollback budget per rollout (pure): how `false_rollback_rate` is shared between the
judge's calls on one rollout, so that a candidate within every threshold is rolled back with at
most that probability over the whole rollout, however many steps, rule epochs, probes, reviews,
pauses and resumes it goes through (docs/rollouts.md, "One budget per rollout").

Every call of `analyzers.judge_stats.judge` is an anytime-valid test of its own evidence, so by
the union bound the rollout's risk is at most the sum of the calls' budgets. The controller
judges four families, each given an equal share among those the route's configuration can judge
(decided from the configuration, never from which evidence happened to arrive, so a share is
never re-dealt mid-rollout):

- **traffic** — each step is one sequence (`judge(sequences=len(steps))`): its evidence is every
  exchange since the step began, kept across a pause and resume, so a resume continues the
  step's sequence instead of opening a fresh one;
- **rule epochs** — open-ended: the i-th epoch of the rollout, in the order their first checked
  answer arrived, gets `1 / (i·(i+1))` of the family's share, a series that sums to 1 however
  many versions open;
- **probes** (`rule_adaptation`) and **reviews** (`human_preference`) — one sequence each, since
  the rollout started.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RolloutBudget:
    """The shares of `false_rollback_rate` of one rollout's judge calls (they sum to at most 1)."""

    traffic: float
    """Of the traffic metrics, over all steps (each step gets `traffic / len(steps)`)."""
    epochs: float
    """Of the rule checks, over every rule epoch the rollout will ever see (`epoch`)."""
    probes: float
    """Of `rule_adaptation` (and its floor), since the rollout started."""
    reviews: float
    """Of `human_preference`, since the rollout started."""

    def epoch(self, index: int) -> float:
        """The share of the `index`-th rule epoch (1-based, in the order the epochs opened)."""
        if index < 1:
            raise ValueError(f"epoch index must be >= 1, got {index}")
        return self.epochs / (index * (index + 1))


def rollout_budget(*, checks: bool, probes: bool, reviews: bool) -> RolloutBudget:
    """Equal shares between traffic and each other family the route judges (`checks`: its rule
    set's checks, `probes`: its rule's rule-flip probes, `reviews`: blind human preference)."""
    families = 1 + checks + probes + reviews
    share = 1.0 / families
    return RolloutBudget(
        traffic=share,
        epochs=share if checks else 0.0,
        probes=share if probes else 0.0,
        reviews=share if reviews else 0.0,
    )


def epoch_order(first_checked: dict[str, object]) -> dict[str, int]:
    """Version → its 1-based index among the rollout's epochs: by the moment its first checked
    answer of the rollout arrived (ties by name). A new version arrives later than every earlier
    one, so an epoch's index never changes once given."""
    ordered = sorted(first_checked.items(), key=lambda kv: (kv[1], kv[0]))
    return {version: i for i, (version, _) in enumerate(ordered, start=1)}
