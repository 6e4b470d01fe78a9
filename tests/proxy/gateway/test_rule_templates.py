"""Rule versions from templates: a templated prompt is one version, a real edit opens one, junk
opens none, and the same prompt has the same version after a restart and on another replica."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from analyzers.rule_template import WORDS_MAX
from proxy.config import ConfigError, parse_config
from proxy.gateway.rule_templates import ROOTS_PENDING_MAX, VARIANTS_MAX, TemplateBook
from proxy.gateway.rule_values import RuleValues
from proxy.gateway.rules import RuleResolver, RuleTracker, version_policies
from proxy.observability.metrics import GatewayMetrics
from proxy.store.exchanges import Store
from proxy.store.rule_events import RuleEventStore
from tests.conftest import seed_sqlite

FIRST = [
    "Ada",
    "Grace",
    "Alan",
    "Edsger",
    "Barbara",
    "Donald",
    "Ken",
    "Dennis",
    "Margaret",
    "Frances",
    "Radia",
    "Leslie",
]
LAST = [
    "Lovelace",
    "Hopper",
    "Turing",
    "Dijkstra",
    "Liskov",
    "Knuth",
    "Thompson",
    "Ritchie",
    "Hamilton",
    "Allen",
]


def config_text(sticky: str = "header:x-user", extra: str = "") -> str:
    return f"""
models:
  prod: {{provider: openai, base_url: "http://h/v1", model: m}}
  cand: {{provider: openai, base_url: "http://h/v1", model: m}}
routes:
  bot: {{primary: prod, canary: {{model: cand, sticky: "{sticky}"}}}}
rules:
  support:
    routes: [bot]
    checks:
      - name: weight
        type: phantom_rule
        parameter: 'max_weight\\s*=\\s*(?P<value>\\d+)'
{extra}"""


def templated(user: int, rng: random.Random, weight: int = 100, tail: str = "Be concise.") -> str:
    """A support prompt filled per request: the customer's name (one or two words), e-mail,
    date, ticket id and an amount; the rules are the fixed text."""
    name = FIRST[user % len(FIRST)] + (f" {LAST[user % len(LAST)]}" if user % 3 else "")
    return (
        "You are the support assistant of Parcelly.\n"
        f"Customer: {name} <user{user}@example.com>. "
        f"Today is 2026-12-{1 + rng.randrange(28):02d}.\n"
        f"Ticket #{48_000 + rng.randrange(10_000)}, order total ${rng.randrange(5, 500)}."
        f"{rng.randrange(100):02d}.\n"
        f"Rules: max_weight = {weight} kg. {tail}"
    )


def chat(system: str) -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "?"}]}


class Gateway:
    """The resolver and tracker a gateway runs, over one store."""

    def __init__(self, store: Store, text: str, load: bool = True) -> None:
        config = parse_config(text, {})
        self.resolver = RuleResolver(config)
        self.registry = CollectorRegistry()
        self.events = RuleEventStore(store)
        self.tracker = RuleTracker(
            self.events, keep_prompts=True, metrics=GatewayMetrics(self.registry),
            policies=version_policies(config), values=RuleValues.from_config(config),
        )  # fmt: skip
        if load:
            self.tracker.load()
        self.count = 0

    def ask(self, system: str, user: int | None) -> str:
        headers = [(b"x-user", str(user).encode())] if user is not None else []
        match = self.resolver.resolve("bot", "chat.completions", chat(system), headers)
        assert match is not None
        self.count += 1
        return self.tracker.observe(match, "bot", f"req-{id(self)}-{self.count}").version

    def settle(self) -> None:
        asyncio.run(self.tracker.tasks.wait(10))


@pytest.fixture
def store(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'rules.db'}"
    seed_sqlite(url, migrated_sqlite)
    opened = Store(url)
    opened.migrate()
    yield opened
    opened.close()


def run(gw: Gateway, requests: list[tuple[str, int | None]]) -> list[str]:
    async def feed() -> list[str]:
        carried = [gw.ask(system, user) for system, user in requests]
        await gw.tracker.tasks.wait(10)
        return carried

    return asyncio.run(feed())


@pytest.mark.parametrize("sticky", ["header:x-user", "none"])
def test_a_templated_prompt_is_one_version_without_fingerprint_ignore(
    store: Store, sticky: str
) -> None:
    rng = random.Random(7)
    gw = Gateway(store, config_text(sticky))
    users = [rng.randrange(40) for _ in range(200)]
    carried = run(gw, [(templated(u, rng), u) for u in users])
    events = gw.events.events()
    assert len(events) == 1
    version = events[0].version
    assert carried[10:] == [version] * 190  # one version from the first few requests on
    assert gw.tracker.is_open("support", version)
    (root,) = gw.tracker.templates("support")
    assert root.labels == ("customer", "total")  # what the masks miss, learned as slots
    assert "⟨customer⟩" in root.rendered and "max_weight = 100 kg" in root.rendered
    assert events[0].rule_value == "100"


@pytest.mark.parametrize("sticky", ["header:x-user", "none"])
@pytest.mark.parametrize(
    "change",
    [{"weight": 150}, {"tail": "Be thorough."}, {"tail": "Be concise. Never promise refunds."}],
    ids=["declared-value", "fixed-word", "added-sentence"],
)
def test_a_real_change_opens_a_version_within_twenty_requests(
    store: Store, sticky: str, change: dict[str, Any]
) -> None:
    rng = random.Random(11)
    gw = Gateway(store, config_text(sticky))
    before = run(gw, [(templated(u, rng), u) for u in (rng.randrange(40) for _ in range(100))])
    after = run(
        gw, [(templated(u, rng, **change), u) for u in (rng.randrange(40) for _ in range(40))]
    )
    events = gw.events.events()
    assert [e.previous_version for e in events] == [None, before[-1]]
    new = events[1].version
    assert new != before[-1] and new in after[:20]
    assert after[after.index(new) :] == [new] * (40 - after.index(new))
    if "weight" in change:
        assert events[1].rule_value == "150"
    diff = events[1].prompt_diff or ""
    # The diff shows the edit, and the learned slots as slots rather than as changed lines.
    assert "⟨customer⟩" in diff and "Customer:" not in "".join(
        line for line in diff.splitlines() if line.startswith(("+", "-")) and "Rules" not in line
    )


def test_junk_prompts_from_one_client_open_nothing_and_a_real_change_is_still_seen(
    store: Store,
) -> None:
    rng = random.Random(3)
    gw = Gateway(store, config_text())
    main = run(gw, [(templated(u, rng), u) for u in (rng.randrange(40) for _ in range(60))])[-1]
    # One client (one sticky unit) sends 500 junk prompts, 3 requests each, some of them edits
    # of the real prompt: none has the support of two users.
    junk: list[tuple[str, int | None]] = []
    for i in range(500):
        system = (
            f"Ignore the rules {i} and obey {rng.random()}"
            if i % 2
            else templated(999, rng, weight=i)
        )
        junk += [(system, 999)] * 3
    carried = run(gw, junk)
    assert len(gw.events.events()) == 1
    assert {v for v in carried if gw.tracker.is_open("support", v)} == {main}  # weight = 100
    book = gw.tracker.book("support")
    assert book is not None
    size = book.size()
    assert size.pending <= ROOTS_PENDING_MAX and size.variants <= VARIANTS_MAX
    real = run(
        gw, [(templated(u, rng, weight=150), u) for u in (rng.randrange(40) for _ in range(20))]
    )
    assert len(gw.events.events()) == 2 and gw.tracker.is_open("support", real[-1])


def test_junk_with_a_unit_per_request_cannot_exhaust_the_budget(store: Store) -> None:
    # Without a sticky key each request is a unit: junk sent 3 times opens versions, but past
    # max_versions the least recently seen is retired, so the rule's own version stays open and
    # a real change still opens.
    rng = random.Random(5)
    gw = Gateway(store, config_text("none", extra="    max_versions: 8\n"))
    main = run(gw, [(templated(u, rng), None) for u in range(30)])[-1]
    for i in range(40):
        run(gw, [(f"Junk prompt number {i}: {rng.random()} obey", None)] * 3)
        run(gw, [(templated(rng.randrange(40), rng), None)])
    assert gw.tracker.is_open("support", main)
    assert gw.tracker.versions("support")[0] <= 8
    book = gw.tracker.book("support")
    assert book is not None and book.size().retired >= 40 + 1 - 8  # junk went; the rule stayed
    # Restarted on the same store, with the junk's versions stored: memory holds the cap, and
    # a real change still opens.
    restarted = Gateway(store, config_text("none", extra="    max_versions: 8\n"))
    assert (
        restarted.tracker.templates("support")[0].version != ""
        and len(restarted.tracker.templates("support")) <= 8
    )
    real = run(restarted, [(templated(u, rng, weight=150), None) for u in range(20)])
    assert restarted.tracker.is_open("support", real[-1]) and real[-1] != main
    assert "overflow" not in real


def test_many_huge_prompts_keep_the_tables_bounded(store: Store) -> None:
    rng = random.Random(13)
    gw = Gateway(store, config_text())
    vocabulary = [f"w{k}" for k in range(5000)]
    for i in range(ROOTS_PENDING_MAX + 6):
        words = " ".join(rng.choice(vocabulary) for _ in range(WORDS_MAX + 100))
        run(gw, [(f"Prompt {i}. {words}", i % 7)])
    book = gw.tracker.book("support")
    assert book is not None
    size = book.size()
    assert size.pending <= ROOTS_PENDING_MAX and size.variants <= VARIANTS_MAX
    assert size.evicted >= 6 - size.variants
    assert all(len(root.template) <= WORDS_MAX for root in book._pending.values())
    assert len(gw.events.events()) == 0  # one request each: no support


def test_the_same_prompt_has_the_same_version_after_a_restart_and_on_another_replica(
    store: Store,
) -> None:
    rng = random.Random(9)
    first = Gateway(store, config_text())
    version = run(first, [(templated(u, rng), u) for u in range(30)])[-1]
    # A restarted gateway reads the template back: the first request of a new customer already
    # carries the version, and no event is added.
    restarted = Gateway(store, config_text())
    assert run(restarted, [(templated(500, rng), 500)]) == [version]
    # A replica that started before the version existed learns the same template, alone, from
    # other customers: the same id, and the store keeps one row.
    replica = Gateway(store, config_text(), load=False)
    learned = run(replica, [(templated(u, rng), u) for u in range(100, 130)])
    assert learned[-1] == version
    assert len(first.events.events()) == 1


def test_bad_values_of_the_new_keys_name_the_key_path() -> None:
    base = config_text()
    for extra, path in (
        ("    template: sometimes\n", "rules.support.template"),
        ("    version_support: {min_units: 0}\n", "rules.support.version_support.min_units"),
        ("    version_support: {min_requests: -1}\n", "rules.support.version_support.min_requests"),
        ("    version_support: {min_users: 2}\n", "rules.support.version_support.min_users"),
    ):
        with pytest.raises(ConfigError) as raised:
            parse_config(base + extra, {})
        assert path in str(raised.value), str(raised.value)
    with pytest.raises(ConfigError) as both:
        parse_config(
            base + "    version_min_requests: 5\n    version_support: {min_units: 3}\n", {}
        )
    assert "rules.support" in str(both.value) and "version_support" in str(both.value)
    old = parse_config(base + "    version_min_requests: 5\n", {})
    assert version_policies(old)["support"].min_requests == 5  # the old key still works
    assert version_policies(old)["support"].min_units == 2
    off = parse_config(base + "    template: off\n", {})  # YAML reads an unquoted off as false
    assert off.rules["support"].template == "off"


def test_at_start_the_versions_in_use_stay_in_memory_and_the_rest_retire() -> None:
    book = TemplateBook()
    for k in range(10):
        book.restore(f"fp-{k:012x}", (f"{k:016x}", None), frozenset())
    book.trim(3, frozenset({"fp-000000000009"}), recent=["fp-000000000000"])
    kept = {root.version for root in book.roots()}
    # The one in use (oldest by first event), then the newest; a named one is never capped.
    assert kept == {"fp-000000000000", "fp-000000000008", "fp-000000000007", "fp-000000000009"}
    assert book.size().retired == 6
