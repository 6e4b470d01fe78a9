"""Each rule version's value: found by the tracker in the version's system prompt, persisted with
its event and read back (SQLite and PostgreSQL), learned for versions not open, and handed to the
phantom_rule checks with the values of the versions before it."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from proxy.config import parse_config
from proxy.gateway.rule_values import LEARNED_MAX, RuleValues
from proxy.gateway.rules import RuleMatch, RuleTracker, VersionPolicy
from proxy.observability.metrics import GatewayMetrics
from proxy.store.exchanges import Store
from proxy.store.rule_events import RuleEventStore
from tests.proxy.store import test_exchanges as test_store

db_url = test_store.db_url
open_store = test_store.open_store

PARAMETER = re.compile(r"max_weight\s*=\s*(?P<value>\d+)")


def tracker(store: Store, values: RuleValues, min_requests: int = 1) -> RuleTracker:
    return RuleTracker(
        RuleEventStore(store),
        keep_prompts=False,
        metrics=GatewayMetrics(CollectorRegistry()),
        policies={"shipping": VersionPolicy(min_requests=min_requests, named=frozenset({"v2"}))},
        values=values,
    )


def test_the_tracker_persists_each_versions_value_and_loads_it_back(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    first = tracker(store, RuleValues({"shipping": PARAMETER}))

    async def traffic() -> None:
        first.observe(RuleMatch("shipping", "fp-1", "Policy: max_weight = 100 kg"), "bot", "r1")
        first.observe(RuleMatch("shipping", "v2", "Policy: max_weight = 150 kg"), "bot", "r2")
        first.observe(RuleMatch("shipping", "fp-3", "No weight rule."), "bot", "r3")
        assert await first.tasks.wait(10) == 0

    asyncio.run(traffic())
    stored = [(e.version, e.rule_value) for e in RuleEventStore(store).events()]
    assert stored == [("fp-1", "100"), ("v2", "150"), ("fp-3", None)]

    restarted = RuleValues({"shipping": PARAMETER})
    again = tracker(store, restarted)
    again.load()
    context = restarted.context("shipping", "v2")
    assert context is not None and context.known
    assert (context.current, context.earlier) == ("150", (("fp-1", "100"),))
    # A stored NULL may be "no value" or "not extracted": it is learned again from a request.
    last = restarted.context("shipping", "fp-3")
    assert last is not None and not last.known
    again.observe(RuleMatch("shipping", "fp-3", "No weight rule."), "bot", "r4")
    last = restarted.context("shipping", "fp-3")
    assert last is not None and last.known and last.current is None
    assert last.earlier == (("fp-1", "100"), ("v2", "150"))


def test_a_stored_event_without_a_value_learns_it_from_its_next_request(
    open_store: Callable[..., Store],
) -> None:
    store = open_store()
    # Events written before there was a value parameter (or by an older gateway) have none.
    asyncio.run(_open_without_values(store))
    values = RuleValues({"shipping": PARAMETER})
    restarted = tracker(store, values)
    restarted.load()
    assert not values.knows("shipping", "v2")
    restarted.observe(RuleMatch("shipping", "v2", "max_weight = 150"), "bot", "r9")
    context = values.context("shipping", "v2")
    assert context is not None and context.known and context.current == "150"
    assert context.earlier == (("fp-1", None),)  # still unknown: no request of it seen since


async def _open_without_values(store: Store) -> None:
    blind = tracker(store, RuleValues({}))
    blind.observe(RuleMatch("shipping", "fp-1", "max_weight = 100"), "bot", "r1")
    blind.observe(RuleMatch("shipping", "v2", "max_weight = 150"), "bot", "r2")
    assert await blind.tasks.wait(10) == 0


def test_a_pending_version_has_its_value_before_it_opens(open_store: Callable[..., Store]) -> None:
    values = RuleValues({"shipping": PARAMETER})
    rules = tracker(open_store(), values, min_requests=3)

    async def traffic() -> None:
        for i in range(3):
            rules.observe(RuleMatch("shipping", "fp-a", "max_weight = 100"), "bot", f"a{i}")
        rules.observe(RuleMatch("shipping", "fp-b", "max_weight = 150"), "bot", "b0")
        await rules.tasks.wait(10)

    asyncio.run(traffic())
    pending = values.context("shipping", "fp-b")
    assert pending is not None and pending.known
    assert (pending.current, pending.earlier) == ("150", (("fp-a", "100"),))


def test_values_are_bounded_and_revisions_grow() -> None:
    values = RuleValues({"shipping": PARAMETER})
    assert values.context("other", "v1") is None and values.knows("other", "v1")
    before = values.revision("shipping")
    for i in range(LEARNED_MAX + 10):
        values.learn("shipping", f"fp-{i}", str(i))
    assert values.revision("shipping") > before
    assert not values.knows("shipping", "fp-0")  # the least recently learned went first
    assert values.knows("shipping", f"fp-{LEARNED_MAX + 9}")
    values.opened("shipping", f"fp-{LEARNED_MAX + 9}", None, known=False)
    context = values.context("shipping", f"fp-{LEARNED_MAX + 9}")
    assert context is not None and context.current == str(LEARNED_MAX + 9)


def test_readers_on_other_threads_see_consistent_contexts() -> None:
    values = RuleValues({"shipping": PARAMETER})
    seen: list[int] = []

    def read() -> None:
        for _ in range(2000):
            context = values.context("shipping", "v-last")
            assert context is not None
            seen.append(len(context.earlier))

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(500):
        values.opened("shipping", f"v{i}", str(i))
    reader.join(10)
    assert seen == sorted(seen)  # the list of earlier versions only grows


def test_the_value_parameter_comes_from_probes_or_the_phantom_check() -> None:
    text = """
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {a: {primary: prod}, b: {primary: prod}, c: {primary: prod}}
rules:
  probed:
    routes: [a]
    checks: [{name: phantom, type: phantom_rule}]
    probes:
      parameter: 'max_weight = (?P<value>\\d+)'
      values: [150]
      expect: [{name: f, type: contains, value: "{value}"}]
  own:
    routes: [b]
    versions:
      v2: {checks: [{name: phantom, type: phantom_rule, parameter: 'tier=(?P<value>\\w+)'}]}
  plain:
    routes: [c]
    checks: [{name: j, type: json}]
"""
    values = RuleValues.from_config(parse_config(text, {}))
    assert values.tracks("probed") and values.tracks("own") and not values.tracks("plain")
    assert values.extract("probed", "max_weight = 150") == "150"
    assert values.extract("own", "tier=gold") == "gold"
    assert values.extract("plain", "anything") is None


def test_a_reload_keeps_values_of_an_unchanged_parameter_and_relearns_a_changed_one() -> None:
    base = """
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {a: {primary: prod}, b: {primary: prod}}
rules:
  kept: {routes: [a], checks: [{name: p, type: phantom_rule, parameter: 'w=(?P<value>\\d+)'}]}
  changed: {routes: [b], checks: [{name: p, type: phantom_rule, parameter: 'PARAM'}]}
"""
    values = RuleValues.from_config(parse_config(base.replace("PARAM", "x=(?P<value>\\d+)"), {}))
    for rule in ("kept", "changed"):
        values.opened(rule, "v1", "100")
    before = values.revision("changed")
    values.reconfigure(parse_config(base.replace("PARAM", "y=(?P<value>\\d+)"), {}))
    kept = values.context("kept", "v1")
    assert kept is not None and (kept.known, kept.current) == (True, "100")
    changed = values.context("changed", "v2")
    assert changed is not None and changed.earlier == (("v1", None),)
    assert not values.knows("changed", "v1") and values.revision("changed") > before
    assert values.extract("changed", "y=7") == "7"
    values.reconfigure(
        parse_config(base.replace("PARAM", "y=(?P<value>\\d+)").split("  changed")[0], {})
    )
    assert not values.tracks("changed") and values.tracks("kept")
