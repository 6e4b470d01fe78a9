"""Rule versions on every exchange, rule-change events, and the admin API that lists them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from proxy.config import ConfigError, parse_config
from proxy.gateway.rules import (
    OVERFLOW_VERSION,
    PENDING_MAX,
    RuleMatch,
    RuleResolver,
    RuleTracker,
    VersionPolicy,
    version_policies,
)
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.observability.metrics import GatewayMetrics
from proxy.store.errors import StoreUnavailableError
from proxy.store.exchanges import Store
from proxy.store.rule_events import RuleEvent, RuleEventStore
from tests.conftest import InProcessGateway, seed_sqlite, wait_until

RULES = {
    "rules": {
        "shipping-policy": {
            "routes": ["rule-follower", "stale"],
            "version": "header:x-rule-version",
            "checks": [{"name": "valid-json", "type": "json"}],
            "versions": {
                "v1": {"match_prompt": r"max_weight\s*=\s*100"},
                "v2": {
                    "match_prompt": r"max_weight\s*=\s*150",
                    "checks": [{"name": "max-weight", "type": "json_path",
                                "path": "$.max_weight", "equals": 150}],
                },
            },
        }
    }
}  # fmt: skip


def ask(gw: InProcessGateway, route: str, limit: int | str, **headers: str) -> httpx.Response:
    body: dict[str, Any] = {
        "model": route,
        "messages": [
            {"role": "system", "content": f"Answer in JSON. max_weight = {limit}"},
            {"role": "user", "content": "How heavy can a parcel be?"},
        ],
    }
    response = gw.http.post("/v1/chat/completions", json=body, headers=headers)
    response.raise_for_status()
    return response


def test_versions_by_header_prompt_and_fingerprint_and_one_event_per_version(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(extra=RULES)
    assert ask(gw, "rule-follower", 100).headers["x-mirrorgate-rule-version"] == "v1"
    assert ask(gw, "stale", 100).headers["x-mirrorgate-rule-version"] == "v1"
    v2 = ask(gw, "rule-follower", 150)
    assert v2.headers["x-mirrorgate-rule-version"] == "v2"
    # A version not named in config opens once it recurs (version_min_requests, 3 by default).
    beta = [ask(gw, "rule-follower", 150, **{"x-rule-version": "v3-beta"}) for _ in range(3)]
    assert {r.headers["x-mirrorgate-rule-version"] for r in beta} == {"v3-beta"}
    # A header value that is not a plain version name is ignored (it would become a label).
    assert (
        ask(gw, "rule-follower", 100, **{"x-rule-version": "v1 <script>"}).headers[
            "x-mirrorgate-rule-version"
        ]
        == "v1"
    )
    unknown = ask(gw, "rule-follower", 999).headers["x-mirrorgate-rule-version"]
    assert unknown.startswith("fp-") and len(unknown) == 15
    for _ in range(2):
        assert ask(gw, "rule-follower", 999).headers["x-mirrorgate-rule-version"] == unknown
    assert ask(gw, "rule-follower", 100).headers["x-mirrorgate-rule-version"] == "v1"
    (record,) = wait_until(
        lambda: gw.gateway.store.query(request_id=v2.headers["x-mirrorgate-request-id"]),
        what="the v2 record",
    )
    assert (record.rule, record.rule_version) == ("shipping-policy", "v2")
    # Routes outside the rule set carry no version.
    plain = gw.http.post(
        "/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert "x-mirrorgate-rule-version" not in plain.headers

    def listed() -> list[dict[str, Any]]:
        versions: list[dict[str, Any]] = gw.http.get("/admin/rules").json()["rule_versions"]
        counts = [v["exchanges"] for v in versions]
        return versions if counts == [4, 1, 3, 3] else []  # every exchange written

    versions = wait_until(listed, what="four rule versions with their exchanges")
    assert [(v["version"], v["previous_version"]) for v in versions] == [
        ("v1", None), ("v2", "v1"), ("v3-beta", "v2"), (unknown, "v3-beta"),
    ]  # fmt: skip
    by_version = {v["version"]: v for v in versions}
    assert by_version["v1"]["exchanges"] == 4 and by_version[unknown]["exchanges"] == 3
    assert by_version["v2"]["first_request_id"] == v2.headers["x-mirrorgate-request-id"]
    # A recurring version's event is dated at, and names, its first request.
    assert by_version["v3-beta"]["first_request_id"] == beta[0].headers["x-mirrorgate-request-id"]
    assert "-Answer in JSON. max_weight = 100" in by_version["v2"]["prompt_diff"]
    assert "+Answer in JSON. max_weight = 150" in by_version["v2"]["prompt_diff"]


def resolver() -> RuleResolver:
    text = """
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {bot: {primary: prod}, plain: {primary: prod}}
rules:
  shipping-policy:
    routes: [bot]
    version: header:X-Rule-Version
    versions:
      v1: {match_prompt: 'max_weight\\s*=\\s*100'}
      v2: {match_prompt: 'max_weight\\s*=\\s*150'}
"""
    return RuleResolver(parse_config(text, {}))


def chat(system: str) -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "?"}]}


def test_the_resolver_finds_header_then_prompt_then_fingerprint() -> None:
    rules = resolver()
    body = chat("Answer in JSON. max_weight = 150")
    assert rules.resolve("plain", "chat.completions", body, []) is None
    by_header = rules.resolve("bot", "chat.completions", body, [(b"x-rule-version", b"v3")])
    assert by_header == RuleMatch("shipping-policy", "v3", "Answer in JSON. max_weight = 150")
    by_prompt = rules.resolve("bot", "chat.completions", body, [])
    assert by_prompt is not None and by_prompt.version == "v2"
    # The stored form of a fingerprint version, identical before and after restarts and upgrades.
    unknown = rules.resolve("bot", "chat.completions", chat("Answer in JSON. max_weight = 999"), [])
    assert unknown is not None and unknown.version == "fp-906e5ea0584b"


def test_the_resolver_searches_match_prompt_in_the_first_16k_characters_only() -> None:
    # A huge system prompt must not make every regex scan it all on the client path.
    rules = resolver()
    late = "x" * 16_384 + " max_weight = 150"
    match = rules.resolve("bot", "chat.completions", chat(late), [])
    assert match is not None and match.version.startswith("fp-") and len(match.version) == 15
    early = "max_weight = 150 " + "x" * 1_000_000
    match = rules.resolve("bot", "chat.completions", chat(early), [])
    assert match is not None and match.version == "v2"


def test_events_survive_a_restart_and_are_not_repeated(
    start_gateway: Callable[..., InProcessGateway], upstream: MockUpstreamServer, tmp_path: Any
) -> None:
    url = f"sqlite:///{tmp_path / 'rules.db'}"
    gw = start_gateway(db_url=url, extra=RULES)
    ask(gw, "rule-follower", 100)
    wait_until(lambda: gw.http.get("/admin/rules").json()["rule_versions"], what="event")
    gw.stop()
    again = start_gateway(db_url=url, extra=RULES)
    ask(again, "rule-follower", 100)
    ask(again, "rule-follower", 150)
    versions = wait_until(
        lambda: len(v := again.http.get("/admin/rules").json()["rule_versions"]) == 2 and v,
        what="two versions",
    )
    assert [v["version"] for v in versions] == ["v1", "v2"]
    assert versions[1]["previous_version"] == "v1"


def test_a_rule_change_seen_while_the_store_is_down_is_stored_when_it_is_back(
    tmp_path: Any,
    migrated_sqlite: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'rules.db'}"
    seed_sqlite(url, migrated_sqlite)
    store = Store(url)
    store.migrate()
    events = RuleEventStore(store)
    attempts: list[RuleEvent] = []

    class UnreachableTwice(RuleEventStore):
        def add(self, event: RuleEvent) -> bool:
            attempts.append(event)
            if len(attempts) <= 2:
                raise StoreUnavailableError("storing a rule change: store down")
            return super().add(event)

    tracker = RuleTracker(
        UnreachableTwice(store),
        keep_prompts=False,
        metrics=GatewayMetrics(CollectorRegistry()),
        policies={"shipping": VersionPolicy(named=frozenset({"v2"}))},
    )

    async def observe() -> int:
        tracker.observe(RuleMatch("shipping", "v2", "max_weight = 150"), "bot", "req-1")
        return await tracker.tasks.wait(10)

    assert asyncio.run(observe()) == 0
    assert len(attempts) == 3 and attempts[0] == attempts[2]  # the same event, first-seen time kept
    assert [(e.version, e.request_id) for e in events.events()] == [("v2", "req-1")]
    store.close()


def test_events_are_listed_in_the_order_they_were_seen_not_stored(
    tmp_path: Any, migrated_sqlite: Path
) -> None:
    # Events are stored by concurrent tasks: two changes a few milliseconds apart can reach the
    # database in the other order. The history and the restart state follow the first sighting.
    url = f"sqlite:///{tmp_path / 'rules.db'}"
    seed_sqlite(url, migrated_sqlite)
    store = Store(url)
    store.migrate()
    events = RuleEventStore(store)
    seen = datetime(2026, 1, 1, tzinfo=UTC)
    first = RuleEvent("shipping", "v2", "v1", seen, "req-2", "bot", None)
    second = RuleEvent(
        "shipping", "v3", "v2", seen + timedelta(milliseconds=2), "req-3", "bot", None
    )
    events.add(second)
    events.add(first)
    assert [e.version for e in events.events()] == ["v2", "v3"]
    restarted = RuleTracker(
        events,
        keep_prompts=False,
        metrics=GatewayMetrics(CollectorRegistry()),
        policies={"shipping": VersionPolicy(min_requests=1)},
    )
    restarted.load()

    async def observe() -> None:
        restarted.observe(RuleMatch("shipping", "v4", "max_weight = 200"), "bot", "req-4")
        await restarted.tasks.wait(10)

    asyncio.run(observe())
    assert [(e.version, e.previous_version) for e in events.events()][-1] == ("v4", "v3")
    store.close()


def test_admin_api_needs_the_token_when_one_is_set(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    env = {"MIRRORGATE_ADMIN_TOKEN": "s3cret-token"}
    gw = start_gateway(extra=RULES, env=env)
    assert gw.http.get("/admin/rules").status_code == 401
    wrong = gw.http.get("/admin/rules", headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 403 and "s3cret" not in wrong.text
    assert wrong.json()["error"]["type"] == "permission_error"
    ok = gw.http.get("/admin/routes", headers={"authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200
    assert {r["name"] for r in ok.json()["routes"]} >= {"echo", "rule-follower"}


def test_one_rule_set_per_route() -> None:
    text = """
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {bot: {primary: prod}}
rules:
  a: {routes: [bot]}
  b: {routes: [bot]}
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text, {})
    assert [str(p) for p in info.value.problems] == [
        "rules.b.routes[0]: route 'bot' is already governed by rule set 'a' "
        "(one rule set per route; put every check in it)"
    ]


def check_count(gw: InProcessGateway, route: str, version: str, check: str, result: str) -> float:
    value = gw.gateway.registry.get_sample_value(
        "mirrorgate_check_results_total",
        {"route": route, "target": route, "arm": "primary", "rule": "shipping-policy",
         "rule_version": version, "check": check, "result": result},
    )  # fmt: skip
    return value or 0.0


def test_the_rule_change_story_a_stale_model_fails_only_under_the_new_rule(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    gw = start_gateway(extra=RULES)
    for _ in range(3):
        ask(gw, "rule-follower", 100)
        ask(gw, "stale", 100)
        ask(gw, "rule-follower", 150)
        ask(gw, "stale", 150)
    checks = wait_until(
        lambda: len(c := gw.gateway.store.query_checks()) == 18 and c, what="18 check results"
    )
    by = {(c.route, c.rule_version, c.check): c for c in checks}
    assert by[("rule-follower", "v2", "max-weight")].result == "pass"
    assert by[("stale", "v2", "max-weight")].result == "fail"
    assert "100" in by[("stale", "v2", "max-weight")].reason
    assert ("stale", "v1", "max-weight") not in by  # the v2 check does not apply to v1
    assert all(c.result == "pass" for c in checks if c.check == "valid-json")
    assert check_count(gw, "stale", "v2", "max-weight", "fail") == 3
    assert check_count(gw, "rule-follower", "v2", "max-weight", "pass") == 3
    assert check_count(gw, "stale", "v1", "valid-json", "pass") == 3
    events = gw.http.get("/admin/rules").json()["rule_versions"]
    assert [e["version"] for e in events] == ["v1", "v2"]  # the change is recorded once
    changes = gw.gateway.registry.get_sample_value(
        "mirrorgate_rule_changes_total", {"rule": "shipping-policy"}
    )
    assert changes == 2


def test_checks_that_cannot_compile_fail_at_start_naming_the_key() -> None:
    text = """
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {bot: {primary: prod}}
rules:
  p:
    routes: [bot]
    versions:
      v2:
        checks:
          - {name: weight, type: json_path, path: "$.[[", equals: 1}
          - {name: shape, type: json_schema, schema: {type: 12}}
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text, {})
    paths = [p.path for p in info.value.problems]
    assert paths[0].startswith("rules.p.versions.v2.checks[0]")
    assert paths[1].startswith("rules.p.versions.v2.checks[1]")


def test_checks_stay_off_exchanges_without_a_system_prompt(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    # An embeddings answer or a chat without instructions is not "empty answer" for valid-json,
    # and neither is a rule version of its own nor a rule change.
    gw = start_gateway(extra=RULES)
    bare = gw.http.post(
        "/v1/chat/completions",
        json={"model": "rule-follower", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-rule-version": "v7"},
    )
    embedded = gw.http.post("/v1/embeddings", json={"model": "rule-follower", "input": "a parcel"})
    for response in (bare, embedded):
        assert response.status_code == 200
        assert "x-mirrorgate-rule-version" not in response.headers
    governed = ask(gw, "rule-follower", 100)
    checked = governed.headers["x-mirrorgate-request-id"]
    # One analysis thread, in order: once the governed answer's check is stored, the two before
    # it have been analysed.
    checks = wait_until(
        lambda: [c for c in gw.gateway.store.query_checks() if c.request_id == checked],
        what="the governed answer's check",
    )
    assert [(c.rule_version, c.check, c.result) for c in checks] == [("v1", "valid-json", "pass")]
    assert {c.request_id for c in gw.gateway.store.query_checks()} == {checked}
    for response in (bare, embedded):
        (record,) = wait_until(
            lambda r=response: gw.gateway.store.query(
                request_id=r.headers["x-mirrorgate-request-id"]
            ),
            what="the record of a request without a system prompt",
        )
        assert (record.rule, record.rule_version) == (None, None)
    assert [v["version"] for v in gw.http.get("/admin/rules").json()["rule_versions"]] == ["v1"]


def test_templated_prompts_over_http_are_one_version_and_one_event(
    start_gateway: Callable[..., InProcessGateway],
) -> None:
    rules = {"rules": {"desk": {"routes": ["rule-follower"],
                                "fingerprint_ignore": [r"(?<=Customer: )\w+"]}}}  # fmt: skip
    gw = start_gateway(extra=rules)
    seen = set()
    for day, name in enumerate(["Ada", "Grace", "Alan", "Edsger", "Barbara"], start=1):
        system = (
            f"Customer: {name}. Today is 2026-12-{day:02d}, ticket #{48000 + day}. "
            "Answer in JSON. max_weight = 100"
        )
        user = {"role": "user", "content": "How heavy can a parcel be?"}
        body = {"model": "rule-follower", "messages": [{"role": "system", "content": system}, user]}
        response = gw.http.post("/v1/chat/completions", json=body)
        seen.add(response.headers["x-mirrorgate-rule-version"])
    (version,) = seen
    versions = wait_until(
        lambda: gw.http.get("/admin/rules").json()["rule_versions"], what="the rule's event"
    )
    assert [(v["rule"], v["version"]) for v in versions] == [("desk", version)]
    registry = gw.gateway.registry
    assert registry.get_sample_value("mirrorgate_rule_changes_total", {"rule": "desk"}) == 1


def tracker_for(
    store: Store, registry: CollectorRegistry, **policy: Any
) -> tuple[RuleTracker, RuleEventStore]:
    events = RuleEventStore(store)
    named = frozenset(policy.pop("named", ()))
    tracker = RuleTracker(
        events,
        keep_prompts=True,
        metrics=GatewayMetrics(registry),
        policies={"shipping": VersionPolicy(named=named, **policy)},
    )
    return tracker, events


def test_a_version_opens_once_it_recurs_dated_at_its_first_request(
    tmp_path: Any, migrated_sqlite: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'rules.db'}"
    seed_sqlite(url, migrated_sqlite)
    store = Store(url)
    store.migrate()
    registry = CollectorRegistry()
    tracker, events = tracker_for(store, registry, min_requests=3, named={"v1"})

    async def feed() -> list[str]:
        carried = [
            tracker.observe(RuleMatch("shipping", "v1", "max_weight = 100"), "bot", "req-0").version
        ]
        for i in range(1, 4):
            match = RuleMatch("shipping", "fp-aaaaaaaaaaaa", f"max_weight = 150 (#{i})")
            carried.append(tracker.observe(match, "bot", f"req-{i}").version)
            await tracker.tasks.wait(10)
            if i < 3:  # seen, carried, but nothing opened yet
                assert [e.version for e in events.events()] == ["v1"]
        await tracker.tasks.wait(10)
        return carried

    assert asyncio.run(feed()) == ["v1", *["fp-aaaaaaaaaaaa"] * 3]
    first, second = events.events()
    assert (first.version, first.request_id) == ("v1", "req-0")  # named: opens at once
    assert (second.version, second.previous_version, second.request_id) == (
        "fp-aaaaaaaaaaaa", "v1", "req-1",
    )  # fmt: skip
    assert second.prompt_diff is not None and "+max_weight = 150 (#3)" in second.prompt_diff
    assert registry.get_sample_value("mirrorgate_rule_changes_total", {"rule": "shipping"}) == 2
    assert tracker.versions("shipping") == (2, 0)
    store.close()


def test_versions_past_max_versions_are_overflow_and_open_nothing_even_after_a_restart(
    tmp_path: Any, migrated_sqlite: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'rules.db'}"
    seed_sqlite(url, migrated_sqlite)
    store = Store(url)
    store.migrate()

    def run(tracker: RuleTracker, versions: list[str]) -> list[str]:
        async def feed() -> list[str]:
            carried = [
                tracker.observe(RuleMatch("shipping", v, f"prompt {v}"), "bot", f"req-{v}").version
                for v in versions
            ]
            await tracker.tasks.wait(10)
            return carried

        return asyncio.run(feed())

    registry = CollectorRegistry()
    tracker, events = tracker_for(store, registry, min_requests=1, max_versions=2, named={"v1"})
    overflow = {"rule": "shipping"}
    assert registry.get_sample_value("mirrorgate_rule_versions_overflow_total", overflow) == 0
    carried = run(tracker, ["fp-a", "fp-b", "fp-c", "fp-a", OVERFLOW_VERSION, "v1", "fp-d"])
    assert carried == ["fp-a", "fp-b", "overflow", "fp-a", "overflow", "v1", "overflow"]
    assert [e.version for e in events.events()] == ["fp-a", "fp-b", "v1"]
    assert registry.get_sample_value("mirrorgate_rule_versions_overflow_total", overflow) == 3
    restarted, _ = tracker_for(
        store, CollectorRegistry(), min_requests=1, max_versions=2, named={"v1"}
    )
    with caplog.at_level(logging.WARNING, logger="mirrorgate.rules"):
        restarted.load()
    assert "rule shipping already has 2 stored versions (max_versions 2)" in caplog.text
    assert run(restarted, ["fp-e", "fp-b"]) == ["overflow", "fp-b"]
    assert len(events.events()) == 3
    store.close()


@pytest.mark.parametrize("template", ["off", "auto"])
def test_distinct_prompts_far_past_the_caps_keep_versions_events_and_rows_bounded(
    tmp_path: Any, migrated_sqlite: Path, template: str
) -> None:
    # Half are one template filled per request, half are prompts each its own; every
    # recur_every-th of those recurs and opens until the cap. The resolver and tracker are what
    # the gateway calls. What bounds them are the two caps, max_versions (64) and PENDING_MAX,
    # so the flood is sized from them: half again as many recurring revisions as max_versions, and
    # several times PENDING_MAX one-off prompts before the cap is reached (after it a new
    # version is carried as overflow and never pending). With templates, past the cap the least
    # recently seen version is retired instead: the rule's current template stays open.
    text = f"""
models: {{prod: {{provider: openai, base_url: "http://h/v1", model: m}}}}
routes: {{bot: {{primary: prod}}}}
rules:
  shipping:
    routes: [bot]
    template: {template}
    fingerprint_ignore: ['(?<=Customer: )\\w+']
"""
    config = parse_config(text, {})
    cap = version_policies(config)["shipping"].max_versions
    recur_every = 200
    requests = recur_every * (cap * 3 // 2)  # 96 recurring revisions: 33 past the cap
    assert recur_every * cap // 2 > 6 * PENDING_MAX  # one-off prompts pending before the cap
    resolver = RuleResolver(config)
    url = f"sqlite:///{tmp_path / 'rules.db'}"
    seed_sqlite(url, migrated_sqlite)
    store = Store(url)
    store.migrate()
    events = RuleEventStore(store)
    registry = CollectorRegistry()
    tracker = RuleTracker(
        events, keep_prompts=True, metrics=GatewayMetrics(registry),
        policies=version_policies(config),
    )  # fmt: skip

    def prompt(i: int) -> str:
        if i % 2 == 0:
            return (
                f"Customer: user{i}. Today is 2026-{1 + i % 12:02d}-{1 + i % 28:02d}, "
                f"ticket #{10_000 + i}, session {i:08x}-0000-4000-8000-{i:012x}. max_weight = 100"
            )
        if i % recur_every == 1:  # recurs: a real new version each time, until the cap
            return f"Rules revision {i}: max_weight = 150"
        return f"Rule {i}: max_weight = {i}"

    async def feed() -> set[str]:
        carried = set()
        for i in range(requests):
            for _ in range(3 if i % recur_every == 1 else 1):
                match = resolver.resolve("bot", "chat.completions", chat(prompt(i)), [])
                assert match is not None
                carried.add(tracker.observe(match, "bot", f"req-{i}-{len(carried)}").version)
        await tracker.tasks.wait(30)
        return carried

    carried = asyncio.run(feed())
    stored = events.events()
    templated = resolver.resolve("bot", "chat.completions", chat(prompt(0)), [])
    assert templated is not None
    assert tracker.observe(templated, "bot", "last").version in {e.version for e in stored}
    assert cap == 64
    if template == "auto":
        # Without a sticky key the revisions' changing number is learned as a slot (three
        # different fillings from three requests): they are one template, and nothing overflows.
        revisions = requests // recur_every
        assert 2 <= len(stored) <= 1 + revisions
        assert OVERFLOW_VERSION not in carried
        assert tracker.versions("shipping")[0] <= 64
        assert tracker.versions("shipping")[1] <= PENDING_MAX + 64 + 1024
        assert tracker.is_open("shipping", tracker.observe(templated, "bot", "again").version)
        store.close()
        return
    assert len(stored) == 64  # the template, then 63 recurring revisions: the cap
    assert tracker.versions("shipping")[0] == 64
    assert tracker.versions("shipping")[1] <= PENDING_MAX
    assert OVERFLOW_VERSION in carried
    overflowed = registry.get_sample_value(
        "mirrorgate_rule_versions_overflow_total", {"rule": "shipping"}
    )
    assert overflowed is not None and overflowed > 0
    assert registry.get_sample_value("mirrorgate_rule_changes_total", {"rule": "shipping"}) == 64
    store.close()


def test_rule_version_settings_are_checked_at_load_naming_the_key() -> None:
    text = """
models: {prod: {provider: openai, base_url: "http://h/v1", model: m}}
routes: {bot: {primary: prod}}
rules:
  p:
    routes: [bot]
    fingerprint_ignore: ['Customer: \\w+', '(unclosed', 'x*']
    version_min_requests: 0
    max_versions: 0
    versions: {overflow: {}}
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text, {})
    problems = {p.path: p.message for p in info.value.problems}
    assert sorted(problems) == [
        "rules.p.fingerprint_ignore[1]", "rules.p.fingerprint_ignore[2]", "rules.p.max_versions",
        "rules.p.version_min_requests", "rules.p.versions",
    ]  # fmt: skip
    assert "not a valid regular expression" in problems["rules.p.fingerprint_ignore[1]"]
    assert "empty string" in problems["rules.p.fingerprint_ignore[2]"]
    assert "reserved" in problems["rules.p.versions"]
