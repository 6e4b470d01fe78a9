"""The review queue: weights favour disagreement, new rule versions and a rollout in progress;
draws follow the weights; filling queues each pair once with a recorded fair coin and a share
for second reviewers; an empty queue says why; on SQLite and PostgreSQL."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest

from proxy.config import parse_config
from proxy.console.review_queue import (
    BATCH,
    ExperimentPairs,
    ReviewQueue,
    Weighed,
    draw,
    weigh,
)
from proxy.core import (
    Action,
    ExchangeRecord,
    PairRecord,
    Phase,
    RolloutState,
    Transition,
)
from proxy.store import (
    ANY_VERSION,
    ReviewCandidate,
    ReviewItem,
    ReviewRecord,
    ReviewStore,
    RolloutStore,
    RuleEventStore,
)
from proxy.store.exchanges import Store
from proxy.store.rule_events import RuleEvent
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import T0
from tests.proxy.store.test_reviews import experiment_pair, shadow_pair

db_url = test_store.db_url
open_store = test_store.open_store

CONFIG = """
models:
  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: prod}
  cand: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: cand}
routes:
  support-bot: {primary: prod, shadows: [{model: cand, sample: 1.0}]}
  plain: {primary: prod}
"""


def candidate(**fields: object) -> ReviewCandidate:
    base: dict[str, object] = dict(
        source="shadow", pair_id="p", request_id="r", route="support-bot", rule="policy",
        rule_version="v1", primary_target="prod", primary_arm="primary",
        candidate_target="cand", candidate_arm="shadow", agreement="agree", exchanged_at=T0,
    )  # fmt: skip
    base.update(fields)
    return ReviewCandidate(**base)  # type: ignore[arg-type]


def test_weights_favour_disagreement_new_versions_and_rollouts() -> None:
    none: frozenset[str] = frozenset()
    plain = weigh(candidate(), new_versions=none, rolling_out=none)
    assert (plain.weight, plain.why) == (1.0, "plain")
    disagree = weigh(candidate(agreement="disagree"), new_versions=none, rolling_out=none)
    assert (disagree.weight, disagree.why) == (4.0, "disagree")
    new = weigh(candidate(), new_versions=frozenset({"v1"}), rolling_out=none)
    assert (new.weight, new.why) == (3.0, "new_version")
    everything = weigh(
        candidate(agreement="disagree"),
        new_versions=frozenset({"v1"}),
        rolling_out=frozenset({"cand"}),
    )
    assert everything.weight == 8.0


def test_draws_follow_the_weights() -> None:
    rng = random.Random(7)
    heavy = Weighed(candidate(pair_id="heavy"), 4.0, "disagree")
    light = [Weighed(candidate(pair_id=f"l{i}"), 1.0, "plain") for i in range(9)]
    picked = Counter(
        w.candidate.pair_id for _ in range(4000) for w in draw([heavy, *light], 1, rng)
    )
    # one of 13 weight units: the heavy pair is drawn 4/13 of the time, each light one 1/13
    assert picked["heavy"] / 4000 == pytest.approx(4 / 13, abs=0.03)
    assert picked["l0"] / 4000 == pytest.approx(1 / 13, abs=0.02)
    assert len({w.candidate.pair_id for w in draw([heavy, *light], 5, rng)}) == 5


def queue_on(store: Store, rng: random.Random, config: str = CONFIG) -> ReviewQueue:
    parsed = parse_config(config, {})
    return ReviewQueue(
        ReviewStore(store),
        RuleEventStore(store),
        RolloutStore(store),
        lambda: parsed,
        rng=rng,
        clock=lambda: T0 + timedelta(hours=1),
    )


def test_filling_queues_each_pair_once_with_a_fair_coin_and_second_reviewers(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    records: list[ExchangeRecord | PairRecord] = []
    for n in range(400):
        records.extend(shadow_pair(n))
    store.write_batch(records)
    queue = queue_on(store, random.Random(16))
    total = 0
    while (added := queue.fill("support-bot", ANY_VERSION)) > 0:
        assert added <= BATCH
        total += added
    assert total == 400  # every pair queued once, then nothing is left to draw
    reviews = ReviewStore(store)
    items: list[ReviewItem] = []
    while (item := reviews.next_item("support-bot", ANY_VERSION, "alice")) is not None:
        items.append(item)
        reviews.add(ReviewRecord(item.item_id, "alice", T0, 3, 3, "tie"))
    assert len(items) == 400 and len({i.item_id for i in items}) == 400
    assert all(len(i.item_id) >= 24 for i in items)  # random and opaque
    shown_a = sum(i.candidate_shown_as == "A" for i in items)
    assert 0.42 < shown_a / 400 < 0.58  # a fair coin per item, recorded
    seconds = sum(i.wanted_reviews == 2 for i in items)
    assert 0.13 < seconds / 400 < 0.27  # about one in five wants a second reviewer
    # bob is offered exactly those, and never one of them twice
    offered = []
    while (item := reviews.next_item("support-bot", ANY_VERSION, "bob")) is not None:
        offered.append(item.item_id)
        reviews.add(ReviewRecord(item.item_id, "bob", T0, 3, 3, "tie"))
    assert sorted(offered) == sorted(i.item_id for i in items if i.wanted_reviews == 2)


def test_the_first_batch_favours_disagreement_new_versions_and_the_rollout(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    records: list[ExchangeRecord | PairRecord] = []
    for n in range(200):
        kind = n % 4  # a quarter each: disagree, a new version, the rollout's candidate, plain
        records.extend(
            shadow_pair(
                n,
                agreement="disagree" if kind == 0 else "agree",
                version="v2" if kind == 1 else "v1",
                candidate="cand" if kind == 2 else "other",
            )
        )
    store.write_batch(records)
    events = RuleEventStore(store)
    events.add(RuleEvent("policy", "v1", None, T0 - timedelta(days=3), "r0", "support-bot", None))
    events.add(RuleEvent("policy", "v2", "v1", T0, "r1", "support-bot", None))
    started = RolloutState(
        "support-bot", revision=1, phase=Phase.PROGRESSING, rollout_id="x",
        candidate="cand", baseline="prod", step=0, weight=5.0,
    )  # fmt: skip
    assert RolloutStore(store).commit(
        Transition(RolloutState("support-bot"), started, Action.START, True)
    )
    assert queue_on(store, random.Random(5)).fill("support-bot", ANY_VERSION) == BATCH
    reviews = ReviewStore(store)
    drawn: list[ReviewItem] = []
    while (item := reviews.next_item("support-bot", ANY_VERSION, "x")) is not None:
        drawn.append(item)
        reviews.add(ReviewRecord(item.item_id, "x", T0, skipped=True))
    weights = {"disagree": 4.0, "new_version": 3.0, "rollout": 3.0, "plain": 1.0}
    assert all(i.weight == weights[i.why] for i in drawn)  # read from the store's events, rollouts
    why = Counter(i.why for i in drawn)
    assert set(why) == set(weights)
    # weights 4, 3, 3 and 1 over equal quarters: plain pairs get less than their quarter
    assert why["plain"] < BATCH / 4


def test_an_empty_queue_says_why(open_store: Callable[..., Store]) -> None:
    store = open_store()
    queue = queue_on(store, random.Random(1))
    assert "mirrors no traffic" in queue.why_empty("plain", ANY_VERSION)
    assert "reviewed every pair" in queue.why_empty("support-bot", ANY_VERSION)
    assert queue.next_item("support-bot", ANY_VERSION, "alice") is None
    dark = queue_on(open_store(bodies="none"), random.Random(1))
    assert "store.bodies is none" in dark.why_empty("support-bot", ANY_VERSION)


EXPERIMENT_CONFIG = """
models:
  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: prod}
  cand: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: cand}
  other: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: other}
routes:
  support-bot:
    primary: prod
    shadows: [{model: cand}, {model: other}]
    experiment:
      arms:
        control: {model: prod}
        b: {model: cand}
        twin: {model: prod}
        variant: {model: other, system_prompt_append: "be brief"}
      unit: header:x-user
      minimum_detectable_effect: 0.05
"""


def test_experiment_pairs_are_an_arm_against_control_with_both_arms_kept(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    store.write_batch(
        experiment_pair(1, "control", candidate="cand")  # control vs b: queued
        + experiment_pair(2, "control", candidate="other")  # the variant's prompt differs: no
        + experiment_pair(3, "twin", candidate="cand")  # twin vs b, neither control: no
        + shadow_pair(4)  # no experiment: the shadow source's
    )
    queue = queue_on(store, random.Random(3), EXPERIMENT_CONFIG)
    source = ExperimentPairs(queue.reviews, queue.config)
    (found,) = source("support-bot", ANY_VERSION, since=T0, limit=100)
    assert found.pair_id == "pair-1" and found.source == "experiment"
    assert (found.primary_arm, found.candidate_arm) == ("experiment:control", "experiment:b")
    assert source("plain", ANY_VERSION, since=T0, limit=100) == []
    assert queue.fill("support-bot", ANY_VERSION) == 2  # both sources by default
    seen = {}
    while (item := queue.reviews.next_item("support-bot", ANY_VERSION, "r1")) is not None:
        c = item.candidate
        seen[c.pair_id] = (c.source, c.primary_arm, c.candidate_arm)
        queue.reviews.add(ReviewRecord(item.item_id, "r1", T0, skipped=True))
    assert seen == {
        "pair-1": ("experiment", "experiment:control", "experiment:b"),
        "pair-4": ("shadow", "primary", "shadow"),
    }
