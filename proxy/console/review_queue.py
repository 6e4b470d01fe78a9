"""The blind review queue: which pairs of recent traffic reviewers are shown, and in what order.

A route and rule version's queue is filled when a reviewer asks for their next item and has
fewer than `LOW_WATER` open ones: up to `BATCH` pairs are drawn from the last `WINDOW` of
traffic, weighted towards what matters (`weight`):

    weight = 1 + 3 · the pair disagreed (its agreement verdict)
               + 2 · its rule version is new (first seen in the last `NEW_VERSION_AGE`)
               + 2 · a rollout is in progress on the route for the pair's candidate

so a disagreeing pair of a new rule version during its candidate's rollout is eight times as
likely to be drawn as a plain one (weighted sampling without replacement: each pair's key is
u^(1/weight), the largest keys win). Each drawn item gets a random opaque id, a fair coin for
the side its candidate answer is shown on, and, with probability `SECOND_REVIEW_SHARE`, a
second reviewer (for agreement).

Where pairs come from (`PairSource`): the shadow pairs of the store (the live answer beside a
shadow's answer to the same request). A canary-served request has no primary answer (the primary
is not called), so primary-vs-canary pairs are the canary model's shadow pairs. Rule-flip probes
are not offered: a probe answers a different prompt (the rule's value flipped), so a preference
between it and the live answer says nothing about either model. During an experiment,
`ExperimentPairs` offers the shadow pairs of requests an experiment arm served: the pair is of
two arms when the live arm is the production model with the client's prompt (the only arm
shadows run beside) and the shadow is another arm's model with no prompt variant
(`proxy.config.experiment_review_arms`); only pairs of an arm with control are queued, each
side's arm kept with the item (`experiment:<arm>`), never sent to the page.
"""

from __future__ import annotations

import math
import random
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

from proxy.config import MirrorgateConfig, experiment_review_arms
from proxy.core import ACTIVE
from proxy.store import (
    ReviewCandidate,
    ReviewItem,
    ReviewStore,
    RolloutStore,
    RuleEventStore,
    experiment_arm_of,
    experiment_side,
)

BATCH = 20
LOW_WATER = 5
WINDOW = timedelta(days=7)
NEW_VERSION_AGE = timedelta(days=1)
SECOND_REVIEW_SHARE = 0.2
DISAGREE_WEIGHT, NEW_VERSION_WEIGHT, ROLLOUT_WEIGHT = 3.0, 2.0, 2.0


class PairSource(Protocol):
    """Pairs of two answers to the same request that could be queued (not queued yet, both
    answered well, both texts stored), newest first."""

    def __call__(
        self, route: str, rule_version: str, *, since: datetime, limit: int
    ) -> list[ReviewCandidate]: ...


@dataclass(frozen=True, slots=True)
class ExperimentPairs:
    """The `PairSource` of a route's experiment: its arms' answers paired with control's."""

    reviews: ReviewStore
    config: Callable[[], MirrorgateConfig]

    def __call__(
        self, route: str, rule_version: str, *, since: datetime, limit: int
    ) -> list[ReviewCandidate]:
        spec = self.config().routes.get(route)
        if spec is None or spec.experiment is None:
            return []
        control = spec.experiment.control
        live, by_model = experiment_review_arms(spec)
        found: list[ReviewCandidate] = []
        for c in self.reviews.experiment_candidates(route, rule_version, since=since, limit=limit):
            served = experiment_arm_of(c.primary_arm)
            other = by_model.get(c.candidate_target)
            if served not in live or other is None or other == served:
                continue
            if control not in (served, other):
                continue  # two arms, neither control: no experiment metric reads it
            found.append(replace(c, candidate_arm=experiment_side(other)))
        return found


@dataclass(frozen=True, slots=True)
class Weighed:
    candidate: ReviewCandidate
    weight: float
    why: str


def weigh(
    candidate: ReviewCandidate, *, new_versions: frozenset[str], rolling_out: frozenset[str]
) -> Weighed:
    """`candidate`'s sampling weight and its main reason (`disagree`, `new_version`, `rollout`,
    or `plain`). `new_versions`: rule versions first seen recently; `rolling_out`: the models
    whose rollout on the candidate's route is in progress."""
    parts = [
        ("disagree", DISAGREE_WEIGHT if candidate.agreement == "disagree" else 0.0),
        (
            "new_version",
            NEW_VERSION_WEIGHT if candidate.rule_version in new_versions else 0.0,
        ),
        ("rollout", ROLLOUT_WEIGHT if candidate.candidate_target in rolling_out else 0.0),
    ]
    weight = 1.0 + sum(w for _, w in parts)
    why = max(parts, key=lambda p: p[1])
    return Weighed(candidate, weight, why[0] if why[1] > 0 else "plain")


def draw(weighed: Sequence[Weighed], k: int, rng: random.Random) -> list[Weighed]:
    """`k` of `weighed` without replacement, each with probability proportional to its weight
    (Efraimidis & Spirakis: the k largest u^(1/w))."""
    keyed = [(math.log(1.0 - rng.random()) / w.weight, i) for i, w in enumerate(weighed)]
    keyed.sort(reverse=True)
    return [weighed[i] for _, i in keyed[:k]]


@dataclass
class ReviewQueue:
    """Fills and serves the review queue (blocking: call from a worker thread)."""

    reviews: ReviewStore
    rule_events: RuleEventStore
    rollouts: RolloutStore
    config: Callable[[], MirrorgateConfig]
    rng: random.Random = field(default_factory=secrets.SystemRandom)
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    sources: list[PairSource] = field(default_factory=list)
    """Where pairs come from; empty: the store's shadow pairs and the experiments' arms
    (`ExperimentPairs`)."""

    def _sources(self) -> list[PairSource]:
        return self.sources or [
            self.reviews.candidates,
            ExperimentPairs(self.reviews, self.config),
        ]

    def next_item(self, route: str, rule_version: str, reviewer_id: str) -> ReviewItem | None:
        """The reviewer's next item, filling the queue first when it runs low."""
        if self.reviews.open_count(route, rule_version, reviewer_id) < LOW_WATER:
            self.fill(route, rule_version)
        return self.reviews.next_item(route, rule_version, reviewer_id)

    def fill(self, route: str, rule_version: str) -> int:
        """Draw up to `BATCH` new pairs of `route` (and `rule_version`) into the queue; how many
        were queued."""
        now = self.clock()
        found: list[ReviewCandidate] = []
        for source in self._sources():
            found.extend(source(route, rule_version, since=now - WINDOW, limit=BATCH * 25))
        if not found:
            return 0
        new_versions = frozenset(
            e.version for e in self.rule_events.events() if e.first_seen_at >= now - NEW_VERSION_AGE
        )
        states = self.rollouts.load([route])
        state = states.get(route)
        rolling_out = frozenset(
            [state.candidate]
            if state is not None and state.phase in ACTIVE and state.candidate
            else []
        )
        weighed = [weigh(c, new_versions=new_versions, rolling_out=rolling_out) for c in found]
        items = [
            ReviewItem(
                item_id=secrets.token_urlsafe(18),
                candidate=w.candidate,
                candidate_shown_as="A" if self.rng.random() < 0.5 else "B",
                wanted_reviews=2 if self.rng.random() < SECOND_REVIEW_SHARE else 1,
                weight=w.weight,
                why=w.why,
                created_at=now,
            )
            for w in draw(weighed, BATCH, self.rng)
        ]
        return self.reviews.enqueue(items)

    def why_empty(self, route: str, rule_version: str) -> str:
        """Why a reviewer has nothing to review on `route` (for the page, in plain words)."""
        config = self.config()
        if not self.reviews.keeps_bodies or config.store.bodies == "none":
            return (
                "Nothing can be reviewed: the gateway does not store answers "
                "(store.bodies is none)."
            )
        spec = config.routes.get(route)
        if spec is None:
            return f"There is no route {route!r}."
        if not spec.shadows:
            return (
                f"Route {route} mirrors no traffic to a second model: blind review compares "
                "the answer a client received with another model's answer to the same request."
            )
        return (
            "You have reviewed every pair queued here. New pairs come with traffic: two good "
            "answers to the same request, from the last 7 days."
        )
