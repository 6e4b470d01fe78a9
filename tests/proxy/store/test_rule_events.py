"""Rule-change events and the traffic of each rule version, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta

from proxy.core.records import Arm
from proxy.store.exchanges import Store
from proxy.store.rule_events import RuleEvent, RuleEventStore, VersionTraffic
from tests.proxy.store import test_exchanges as test_store
from tests.proxy.store.test_exchanges import T0, make_record

db_url = test_store.db_url
open_store = test_store.open_store


def event(version: str, previous: str | None = None, seconds: int = 0) -> RuleEvent:
    return RuleEvent(
        rule="shipping", version=version, previous_version=previous,
        first_seen_at=T0 + timedelta(seconds=seconds), request_id=f"first-{version}",
        route="bot", prompt_diff=f"-{previous}\n+{version}" if previous else None,
    )  # fmt: skip


def test_one_event_per_version_comes_back_equal_in_the_order_stored(
    open_store: Callable[..., Store],
) -> None:
    events = RuleEventStore(open_store())
    assert events.events() == []
    assert events.add(event("v1")) is True
    assert events.add(event("v2", "v1", seconds=60)) is True
    # Another replica saw v1 too, later: the first event stands.
    assert events.add(event("v1", seconds=120)) is False
    assert events.events() == [event("v1"), event("v2", "v1", seconds=60)]
    assert all(e.first_seen_at.tzinfo is not None for e in events.events())


def test_traffic_counts_the_exchanges_of_each_version(open_store: Callable[..., Store]) -> None:
    store = open_store()
    store.write_batch(
        [
            make_record(rule="shipping", rule_version="v1", started_at=T0),
            make_record(rule="shipping", rule_version="v1", started_at=T0 + timedelta(minutes=5)),
            make_record(rule="shipping", rule_version="v2", started_at=T0 + timedelta(minutes=9)),
            make_record(started_at=T0),  # no rule: not a version's traffic
            # A rule-flip probe asks another value: not the version's traffic either.
            make_record(rule="shipping", rule_version="v2", arm=Arm.PROBE, started_at=T0),
        ]
    )
    traffic = RuleEventStore(store).traffic()
    assert traffic == {
        ("shipping", "v1"): VersionTraffic(2, T0, T0 + timedelta(minutes=5)),
        ("shipping", "v2"): VersionTraffic(1, T0 + timedelta(minutes=9), T0 + timedelta(minutes=9)),
    }


def test_a_version_keeps_its_rule_value_capped_at_100_characters(
    open_store: Callable[..., Store],
) -> None:
    events = RuleEventStore(open_store())
    v1 = dataclasses.replace(event("v1"), rule_value="100")
    v2 = dataclasses.replace(event("v2", "v1", seconds=60), rule_value="x" * 250)
    v3 = event("v3", "v2", seconds=120)  # a rule without a value parameter
    for e in (v1, v2, v3):
        assert events.add(e) is True
    assert [e.rule_value for e in events.events()] == ["100", "x" * 100, None]


def test_a_version_keeps_its_template_whatever_bodies_says_and_learns_a_new_one(
    open_store: Callable[..., Store],
) -> None:
    # A template holds digests of words, not words: stored under `bodies: none` too, so that a
    # restarted gateway matches prompts to it.
    store = open_store()
    store.text = dataclasses.replace(store.text, policy="none")
    events = RuleEventStore(store)
    slotted = '{"t":["0123456789abcdef",null],"p":[]}'
    assert events.add(dataclasses.replace(event("fp-a"), template='{"t":["0123456789abcdef"]}'))
    events.set_template("shipping", "fp-a", slotted)
    events.set_template("shipping", "fp-none", slotted)  # no such version: nothing changes
    (stored,) = events.events()
    assert stored.template == slotted and stored.prompt_diff is None


def test_recent_versions_are_those_of_the_newest_exchanges_most_recent_first(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    store.write_batch(
        [
            make_record(rule="shipping", rule_version="v1", started_at=T0),
            make_record(rule="shipping", rule_version="v2", started_at=T0 + timedelta(minutes=1)),
            make_record(rule="shipping", rule_version="v1", started_at=T0 + timedelta(minutes=2)),
            make_record(rule="other", rule_version="x", started_at=T0 + timedelta(minutes=3)),
            make_record(started_at=T0 + timedelta(minutes=4)),  # no rule
        ]
    )
    events = RuleEventStore(store)
    assert events.recent_versions() == {"shipping": ["v1", "v2"], "other": ["x"]}
    assert events.recent_versions(limit=2) == {"shipping": ["v1"], "other": ["x"]}
