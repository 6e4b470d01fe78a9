"""The decider: an outage is waited out; a bug is logged with its traceback, counted under
component="decider", and judging goes on; each step is judged on all its evidence, an unsettled
metric says what it needs, the decision survives a restart, a held step warns once."""

from __future__ import annotations

import asyncio
import logging
import platform
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from prometheus_client import CollectorRegistry

from alerts.alert import Alert
from alerts.dispatcher import AlertDispatcher
from proxy.config import MirrorgateConfig, parse_config, rollout_warnings
from proxy.core.records import Arm, CheckRecord, ExchangeRecord, ProbeRecord, Status
from proxy.core.rollout_state import Action, Phase
from proxy.gateway.routing import RouteTable
from proxy.observability.metrics import GatewayMetrics
from proxy.rollout.controller import RolloutController, release_freed_memory
from proxy.rollout.manager import RolloutManager
from proxy.store import ANY_VERSION, ReviewRecord, ReviewStore
from proxy.store.errors import StoreError, StoreUnavailableError
from proxy.store.exchanges import Store
from proxy.store.judge_windows import Arms, JudgeWindows
from proxy.store.leadership import Leadership
from proxy.store.probes import ProbeStore
from proxy.store.rollouts import RolloutStore
from proxy.store.rule_events import RuleEvent, RuleEventStore
from tests.conftest import require_service, seed_sqlite
from tests.proxy.store.test_exchanges import make_record
from tests.proxy.store.test_reviews import queued, shadow_pair

CONFIG = """
models:
  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: prod}
  cand: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: cand}
routes:
  bot:
    primary: prod
    canary: {model: cand, steps: [50], step_interval_s: 3600, analysis: {interval_s: 0.01}}
"""


class FailingWindows(JudgeWindows):
    """Real window queries, except that the first `failures` reads of traffic raise."""

    def __init__(self, store: Store, *failures: Exception) -> None:
        super().__init__(store)
        self.failures = list(failures)
        self.reads = 0

    def served_counts(self, arms: Arms, since: datetime) -> dict[Arm, tuple[int, int]]:
        self.reads += 1  # once per look: these routes' exchanges have no sticky unit
        if self.failures:
            raise self.failures.pop(0)
        return super().served_counts(arms, since)


@pytest.fixture
def store(tmp_path: Path, migrated_sqlite: Path) -> Iterator[Store]:
    seed_sqlite(f"sqlite:///{tmp_path / 'decider.db'}", migrated_sqlite)
    with Store(f"sqlite:///{tmp_path / 'decider.db'}") as opened:
        opened.migrate()
        yield opened


async def started(
    store: Store, windows: JudgeWindows
) -> tuple[RolloutController, CollectorRegistry]:
    config: MirrorgateConfig = parse_config(CONFIG, {})
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    manager = RolloutManager(config, RolloutStore(store), RouteTable(config), metrics)
    await manager.act("bot", Action.START, reason="test", actor="operator")
    # Some traffic of both arms since the start: enough for the judge to give verdicts.
    now = datetime.now(UTC)
    store.write_batch(
        [make_record(route="bot", target="prod", arm=Arm.PRIMARY, started_at=now)] * 3
        + [make_record(route="bot", target="cand", arm=Arm.CANARY, started_at=now)] * 3
    )
    return RolloutController(config, manager, windows, Leadership(store), metrics), registry


def internal_errors(registry: CollectorRegistry, component: str) -> float:
    value = registry.get_sample_value("mirrorgate_internal_errors_total", {"component": component})
    return value or 0.0


def verdicts(registry: CollectorRegistry) -> float:
    return sum(
        sample.value
        for family in registry.collect()
        if family.name == "mirrorgate_analysis_verdicts"
        for sample in family.samples
        if sample.name == "mirrorgate_analysis_verdicts_total"
    )


@pytest.mark.parametrize(
    "bug",
    [
        RuntimeError("a bug in the window query"),
        # A query the database refuses is a bug in the query, not an outage.
        StoreError("reading traffic: UndefinedColumn: a bug in the window query"),
    ],
)
def test_a_bug_in_a_look_is_logged_counted_and_judging_goes_on(
    store: Store, caplog: pytest.LogCaptureFixture, bug: Exception
) -> None:
    caplog.set_level(logging.INFO, logger="mirrorgate.controller")

    async def scenario() -> tuple[Any, ...]:
        windows = FailingWindows(store, bug)
        controller, registry = await started(store, windows)
        assert await controller.tick(force=True) == []
        after_bug = (internal_errors(registry, "decider"), verdicts(registry))
        await controller.tick(force=True)  # the next look works, and judges
        return after_bug, internal_errors(registry, "decider"), verdicts(registry), windows

    (errors_then, verdicts_then), errors_now, verdicts_now, windows = asyncio.run(scenario())
    assert (errors_then, verdicts_then) == (1, 0)
    assert errors_now == 1 and verdicts_now > 0 and windows.reads == 2
    (failure,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert failure.exc_info is not None and "a bug in the window query" in caplog.text
    assert "judging route bot failed" in failure.getMessage()
    assert "wait for the store" not in caplog.text


@pytest.mark.usefixtures("quick_rollout_ticks")
def test_the_decider_loop_survives_a_bug_and_keeps_deciding(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> tuple[float, float]:
        windows = FailingWindows(store, RuntimeError("a bug"), RuntimeError("another bug"))
        controller, registry = await started(store, windows)
        loop = asyncio.get_running_loop().create_task(controller.run())
        deadline = loop.get_loop().time() + 15
        while verdicts(registry) == 0:
            assert not loop.done(), "the decider loop ended"
            assert loop.get_loop().time() < deadline, "no verdict after the bugs"
            await asyncio.sleep(0.01)
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop
        return internal_errors(registry, "decider"), verdicts(registry)

    errors, judged = asyncio.run(scenario())
    assert errors == 2 and judged > 0


def test_every_look_hands_freed_memory_back_on_its_worker_thread(store: Store) -> None:
    # A look drops thousands of rows on a worker thread; without a trim after it the freed heap
    # stays in glibc's arenas and a gateway with a canary held grows (bench/README.md, the soak).
    trims: list[int] = []

    async def scenario() -> tuple[int, int]:
        controller, registry = await started(store, JudgeWindows(store))
        controller.release_memory = lambda: trims.append(threading.get_ident())
        await controller.tick(force=True)
        after_one = len(trims)
        await controller.tick(force=True)
        assert verdicts(registry) > 0
        return after_one, threading.get_ident()

    after_one, loop_thread = asyncio.run(scenario())
    assert after_one == 1 and len(trims) == 2
    assert loop_thread not in trims  # on the look's worker thread, never on the event loop


def test_a_failed_look_still_hands_freed_memory_back(store: Store) -> None:
    trims: list[int] = []

    async def scenario() -> float:
        controller, registry = await started(store, FailingWindows(store, RuntimeError("bug")))
        controller.release_memory = lambda: trims.append(1)
        await controller.tick(force=True)
        return internal_errors(registry, "decider")

    assert asyncio.run(scenario()) == 1 and trims == [1]


def _rss_anon_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_release_freed_memory_returns_freed_heap_pages_to_the_system() -> None:
    require_service("glibc", platform.libc_ver()[0] == "glibc", "malloc_trim is glibc's")
    before = _rss_anon_mib()
    held = [bytes(2048) for _ in range(60_000)]  # ~120 MB of malloc'd (not pymalloc) blocks
    pinned = bytes(2048)  # above them: freeing them leaves a hole, not a trimmable top
    grown = _rss_anon_mib() - before
    del held
    kept = _rss_anon_mib() - before
    release_freed_memory()
    after = _rss_anon_mib() - before
    assert grown > 100 and kept > grown / 2, "glibc gave the hole back by itself"
    assert after < grown / 4, f"{grown:.0f} MiB held, {kept:.0f} freed but kept, {after:.0f} after"
    assert len(pinned) == 2048


def test_an_unavailable_store_is_waited_for_not_counted_as_a_bug(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mirrorgate.controller")

    async def scenario() -> float:
        windows = FailingWindows(store, StoreUnavailableError("reading traffic: locked"))
        controller, registry = await started(store, windows)
        with pytest.raises(StoreUnavailableError):
            await controller.tick(force=True)  # `run` logs this as waiting for the store
        return internal_errors(registry, "decider")

    assert asyncio.run(scenario()) == 0
    assert not [r for r in caplog.records if r.exc_info]


# --- the judge over a step's whole evidence, the memory that survives a restart, held steps ---

LOW_TRAFFIC = """
models:
  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: prod}
  cand: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: cand}
routes:
  bot:
    primary: prod
    canary:
      model: cand
      steps: [50]
      step_interval_s: 60
      max_hold_s: 600
      analysis: {interval_s: 10, failure_limit: 2, metrics: [error_rate, latency_p50],
                 thresholds: {error_rate_increase: 0.02, rate_margin_relative: 0.25}}
"""


class CapturedAlerts(AlertDispatcher):
    """The alert fan-out, keeping what it was asked to send instead of sending it."""

    def __init__(self) -> None:  # no sinks, no client: nothing leaves the test
        self.sent: list[Alert] = []

    def notify(self, alert: Alert) -> None:
        self.sent.append(alert)


class Clock:
    """A virtual wall clock the test moves."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


async def low_traffic_rollout(
    store: Store, clock: Clock, alerts: CapturedAlerts | None = None
) -> tuple[RolloutController, RolloutManager]:
    config = parse_config(LOW_TRAFFIC, {})
    metrics = GatewayMetrics(CollectorRegistry())
    manager = RolloutManager(
        config, RolloutStore(store), RouteTable(config), metrics, alerts=alerts, clock=clock
    )
    await manager.act("bot", Action.START, reason="test", actor="operator")
    controller = RolloutController(
        config, manager, JudgeWindows(store), Leadership(store), metrics, clock=clock
    )
    return controller, manager


def arrivals(store: Store, start: datetime, seconds: int, per_s: float, **canary: Any) -> None:
    """`per_s` requests per second on each arm for `seconds` from `start`, their durations
    spread over 0.2-0.3 s (a judge never passes a latency that has no spread at all)."""
    every = 1 / per_s
    records = []
    for i in range(int(seconds * per_s)):
        at = start + timedelta(seconds=i * every)
        spread = {"duration_s": 0.2 + 0.1 * (i * 7919 % 1000) / 1000}
        records.append(
            make_record(route="bot", target="prod", arm=Arm.PRIMARY, started_at=at, **spread)
        )
        records.append(
            make_record(
                route="bot", target="cand", arm=Arm.CANARY, started_at=at, **(spread | canary)
            )
        )
    store.write_batch(records)


def test_a_low_traffic_step_is_judged_on_all_its_evidence_and_promoted(store: Store) -> None:
    # 1 request/s per arm for 20 minutes: no 60 s window ever holds enough to show the 2-point
    # error margin, but the step's 1,200 answers per arm do.
    async def scenario() -> tuple[Any, Any]:
        clock = Clock()
        controller, manager = await low_traffic_rollout(store, clock)
        arrivals(store, clock.now, 1200, 1.0)
        clock.now += timedelta(seconds=1200)
        (change,) = await controller.tick(force=True)
        return change.after.phase, manager.store.recent_verdicts("bot")

    phase, rows = asyncio.run(scenario())
    assert phase is Phase.PROMOTED
    error_rate = next(r for r in rows if r["metric"] == "error_rate")
    assert error_rate["n_candidate"] == 1200 and error_rate["verdict"] == "pass"
    assert error_rate["needs"] == 0 and error_rate["eta_s"] == 0.0


def test_an_unsettled_metric_says_what_it_needs_and_when(store: Store) -> None:
    async def scenario() -> list[dict[str, Any]]:
        clock = Clock()
        controller, manager = await low_traffic_rollout(store, clock)
        arrivals(store, clock.now, 100, 1.0)  # 100 answers per arm in 100 s
        clock.now += timedelta(seconds=100)
        assert await controller.tick(force=True) == []
        return manager.store.recent_verdicts("bot")

    error_rate = next(r for r in asyncio.run(scenario()) if r["metric"] == "error_rate")
    assert error_rate["verdict"] == "inconclusive" and error_rate["needs"] > 0
    # One canary answer a second came in: the time is the needed answers at that rate.
    assert error_rate["eta_s"] == pytest.approx(error_rate["needs"], rel=0.02)


def test_a_restarted_decider_resumes_the_failure_count(store: Store) -> None:
    # failure_limit 2: one failing look warns; the next failing look -- by a new decider process
    # after a restart -- rolls back, instead of counting from zero again.
    async def scenario() -> tuple[list[Any], list[Any], list[str]]:
        clock = Clock()
        alerts = CapturedAlerts()
        first, manager = await low_traffic_rollout(store, clock, alerts)
        arrivals(store, clock.now, 400, 1.0, status=Status.UPSTREAM_ERROR, http_status=502)
        clock.now += timedelta(seconds=400)
        before = await first.tick(force=True)
        second = RolloutController(
            manager.config,
            manager,
            JudgeWindows(store),
            Leadership(store),
            manager.metrics,
            clock=clock,
        )
        after = await second.tick(force=True)
        return before, after, [a.kind for a in alerts.sent]

    before, after, kinds = asyncio.run(scenario())
    assert before == [] and kinds[0] == "verdict_fail"
    (change,) = after
    assert change.after.phase is Phase.ROLLED_BACK


def test_a_step_held_past_max_hold_warns_once_naming_what_holds_it(store: Store) -> None:
    async def scenario() -> list[Alert]:
        clock = Clock()
        alerts = CapturedAlerts()
        controller, _ = await low_traffic_rollout(store, clock, alerts)
        arrivals(store, clock.now, 100, 0.2)  # 20 answers per arm: far too few
        clock.now += timedelta(seconds=700)  # past max_hold_s (600)
        await controller.tick(force=True)
        clock.now += timedelta(seconds=10)
        await controller.tick(force=True)  # still held: no second warning for this step
        return alerts.sent

    (alert,) = asyncio.run(scenario())
    assert alert.kind == "step_held" and alert.severity == "warning" and alert.rollout_id
    assert "error_rate" in alert.summary and "needs" in alert.summary


def test_disagreement_without_a_noise_floor_is_a_warning_not_a_hold(store: Store) -> None:
    config = parse_config(
        """
models:
  prod: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: prod}
  cand: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: cand}
routes:
  bot:
    primary: prod
    shadows: [{model: cand}]
    canary: {model: cand, analysis: {metrics: [error_rate, disagreement]}}
""",
        {},
    )
    (warning,) = rollout_warnings(config)
    assert warning.path == "routes.bot.canary.analysis.metrics"
    assert "noise_sample" in warning.message


RULED = (
    LOW_TRAFFIC.replace("metrics: [error_rate, latency_p50]", "metrics: [check_pass_rate]")
    + """
rules:
  shipping:
    routes: [bot]
    checks: [{name: valid-json, type: json}]
"""
)


def test_an_older_rule_version_clients_left_can_fail_but_never_hold(store: Store) -> None:
    # Ten answers of each arm on v1 at the start (too few to judge), then clients move to v2,
    # which both arms pass 400 times: the rollout is promoted instead of waiting for v1 forever.
    async def scenario() -> Phase | None:
        clock = Clock()
        config = parse_config(RULED, {})
        metrics = GatewayMetrics(CollectorRegistry())
        manager = RolloutManager(
            config, RolloutStore(store), RouteTable(config), metrics, clock=clock
        )
        await manager.act("bot", Action.START, reason="test", actor="operator")
        events = RuleEventStore(store)
        start = clock.now
        for version, at in (("v1", start), ("v2", start + timedelta(seconds=10))):
            events.add(RuleEvent("shipping", version, None, at, f"first-{version}", "bot", ""))
        verdicts = []
        for arm, target in ((Arm.PRIMARY, "prod"), (Arm.CANARY, "cand")):
            for version, n, offset in (("v1", 10, 1), ("v2", 400, 20)):
                verdicts += [
                    CheckRecord(
                        request_id=f"{target}-{version}-{i}", route="bot", target=target,
                        arm=arm, rule="shipping", rule_version=version, check="valid-json",
                        result="pass", reason="", created_at=start + timedelta(seconds=offset),
                    )
                    for i in range(n)
                ]  # fmt: skip
        store.write_batch(verdicts)
        clock.now += timedelta(seconds=600)
        controller = RolloutController(
            config, manager, JudgeWindows(store), Leadership(store), metrics, clock=clock
        )
        changes = await controller.tick(force=True)
        return changes[0].after.phase if changes else None

    assert asyncio.run(scenario()) is Phase.PROMOTED


def test_a_rule_no_request_carries_is_a_warning_in_status_not_a_hold(store: Store) -> None:
    # The route has a rule set, but no answer was ever checked against it (no system prompt):
    # the look says so, and the traffic metrics alone promote the canary.
    async def scenario() -> tuple[Phase | None, tuple[str, ...]]:
        clock = Clock()
        config = parse_config(
            RULED.replace("metrics: [check_pass_rate]", "metrics: [error_rate, check_pass_rate]"),
            {},
        )
        metrics = GatewayMetrics(CollectorRegistry())
        manager = RolloutManager(
            config, RolloutStore(store), RouteTable(config), metrics, clock=clock
        )
        await manager.act("bot", Action.START, reason="test", actor="operator")
        arrivals(store, clock.now, 1200, 1.0)
        clock.now += timedelta(seconds=1200)
        controller = RolloutController(
            config, manager, JudgeWindows(store), Leadership(store), metrics, clock=clock
        )
        changes = await controller.tick(force=True)
        memory = manager.store.load_memory("bot")
        assert memory is not None
        return (changes[0].after.phase if changes else None), memory.warnings

    phase, warnings = asyncio.run(scenario())
    assert phase is Phase.PROMOTED
    (warning,) = warnings
    assert warning.startswith("check_pass_rate left out") and "rule shipping" in warning


# --- rule_adaptation: the canary's and the primary's rule-flip probes of the route's rule ---

PROBED = (
    LOW_TRAFFIC.replace(
        "metrics: [error_rate, latency_p50]", "metrics: [error_rate, rule_adaptation]"
    )
    + """
rules:
  shipping:
    routes: [bot]
    probes:
      parameter: 'max_weight\\s*=\\s*(?P<value>\\d+)'
      values: [150]
      expect: [{name: follows, type: regex, pattern: '{value}'}]
"""
)


def probes_of(store: Store, target: str, start: datetime, **results: int) -> None:
    """`results` (followed=…, stuck=…, other=…) probes of rule shipping answered by `target`."""
    records = []
    for result, count in results.items():
        for i in range(count):
            records.append(
                ProbeRecord(
                    probe_id=f"p-{target}-{result}-{i}", request_id=f"r-{target}-{result}-{i}",
                    route="bot", target=target, rule="shipping", rule_version="v1",
                    created_at=start + timedelta(seconds=1 + i), original_value="100",
                    asked_value="150", result=result,
                    answered_value={"followed": "150", "stuck": "100"}.get(result),
                    cost_usd=0.0,
                )
            )  # fmt: skip
    store.write_batch(records)


async def probed_rollout(
    store: Store, clock: Clock, alerts: CapturedAlerts, config_text: str = PROBED
) -> tuple[RolloutController, RolloutManager, CollectorRegistry]:
    config = parse_config(config_text, {})
    registry = CollectorRegistry()
    metrics = GatewayMetrics(registry)
    manager = RolloutManager(
        config, RolloutStore(store), RouteTable(config), metrics, alerts=alerts, clock=clock
    )
    await manager.act("bot", Action.START, reason="test", actor="operator")
    controller = RolloutController(
        config,
        manager,
        JudgeWindows(store),
        Leadership(store),
        metrics,
        probes=ProbeStore(store),
        clock=clock,
    )
    return controller, manager, registry


def test_a_canary_that_memorised_the_rule_is_warned_about_then_rolled_back(store: Store) -> None:
    async def scenario() -> tuple[list[Any], list[Any], list[Alert], CollectorRegistry]:
        clock = Clock()
        alerts = CapturedAlerts()
        controller, _, registry = await probed_rollout(store, clock, alerts)
        arrivals(store, clock.now, 1200, 1.0)  # traffic alone would promote it
        probes_of(store, "prod", clock.now, followed=59, other=1)
        probes_of(store, "cand", clock.now, followed=2, stuck=58)
        clock.now += timedelta(seconds=1200)
        first = await controller.tick(force=True)
        clock.now += timedelta(seconds=10)
        second = await controller.tick(force=True)
        return first, second, alerts.sent, registry

    first, second, sent, registry = asyncio.run(scenario())
    assert first == []
    warning, rollback = [a for a in sent if a.kind != "step_held"]  # 1200 s > max_hold_s
    assert warning.kind == "verdict_fail" and warning.severity == "warning"
    assert warning.rule == "shipping" and warning.check == "rule_adaptation"
    assert (
        "rule_adaptation failed on rule shipping: candidate follows a flipped rule 3% (2/60), "
        "primary 98% (59/60)" in warning.summary
    )
    assert "asked 150, answered 100" in warning.summary
    assert warning.example_request_ids and all(
        i.startswith("r-cand-stuck-") for i in warning.example_request_ids
    )
    assert warning.evidence["candidate_adaptation"] == pytest.approx(2 / 60)
    (change,) = second
    assert change.after.phase is Phase.ROLLED_BACK
    assert "rule_adaptation failed on rule shipping" in rollback.summary
    assert change.after.reason.startswith("rule_adaptation failed on rule shipping")
    assert rollback.severity == "critical" and rollback.rule == "shipping"
    reason = {"route": "bot", "target": "cand", "reason": "rule_adaptation"}
    assert registry.get_sample_value("mirrorgate_rollbacks_total", reason) == 1


def test_a_canary_that_follows_the_rule_passes_rule_adaptation(store: Store) -> None:
    async def scenario() -> tuple[list[Any], list[dict[str, Any]]]:
        clock = Clock()
        controller, manager, _ = await probed_rollout(store, clock, CapturedAlerts())
        arrivals(store, clock.now, 1200, 1.0)
        # 400 probes a side: the 5-point margin is shown at the spread of a canary that might
        # be at it (the null boundary), which 200 probes do not settle
        probes_of(store, "prod", clock.now, followed=400)
        probes_of(store, "cand", clock.now, followed=394, other=6)
        clock.now += timedelta(seconds=1200)
        changes = await controller.tick(force=True)
        return changes, manager.store.recent_verdicts("bot")

    changes, rows = asyncio.run(scenario())
    (change,) = changes
    assert change.after.phase is Phase.PROMOTED
    (adaptation,) = [r for r in rows if r["metric"] == "rule_adaptation"]
    assert adaptation["verdict"] == "pass" and adaptation["n_candidate"] == 400


def test_a_probed_rule_with_no_probe_results_holds_the_step_and_says_why(store: Store) -> None:
    async def scenario() -> tuple[list[Any], list[dict[str, Any]]]:
        clock = Clock()
        controller, manager, _ = await probed_rollout(store, clock, CapturedAlerts())
        arrivals(store, clock.now, 1200, 1.0)
        probes_of(store, "other-model", clock.now, stuck=100)  # not one of the two arms
        clock.now += timedelta(seconds=1200)
        return await controller.tick(force=True), manager.store.recent_verdicts("bot")

    changes, rows = asyncio.run(scenario())
    assert changes == []  # a gating metric without evidence holds; it never vanishes
    (adaptation,) = [r for r in rows if r["metric"] == "rule_adaptation"]
    assert adaptation["verdict"] == "inconclusive"
    assert "no scored rule-flip probe of prod or cand" in adaptation["reason"]


def test_probe_targets_without_the_candidate_leave_rule_adaptation_out_with_a_warning(
    store: Store,
) -> None:
    config_text = PROBED.replace("values: [150]", "values: [150]\n      targets: [prod]")

    async def scenario() -> tuple[list[Any], list[dict[str, Any]], Any]:
        clock = Clock()
        controller, manager, _ = await probed_rollout(store, clock, CapturedAlerts(), config_text)
        arrivals(store, clock.now, 1200, 1.0)
        clock.now += timedelta(seconds=1200)
        changes = await controller.tick(force=True)
        return changes, manager.store.recent_verdicts("bot"), manager.store.load_memory("bot")

    changes, rows, memory = asyncio.run(scenario())
    assert changes[0].after.phase is Phase.PROMOTED  # it can never be measured: not a hold
    assert "rule_adaptation" not in {r["metric"] for r in rows}
    assert any("probes.targets of rule shipping" in w for w in memory.warnings)


def test_a_probe_budget_spent_before_the_start_holds_the_step_until_it_frees(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    # Warm-up traffic spent the hourly probe cap (20) of both models 30 minutes before the start:
    # no probe of the rollout can come for another half hour, and the step says until when.
    caplog.set_level(logging.WARNING, logger="mirrorgate.controller")
    config_text = PROBED.replace("values: [150]", "values: [150]\n      max_per_hour: 20")

    alerts = CapturedAlerts()

    async def scenario() -> tuple[list[Any], list[dict[str, Any]], datetime]:
        clock = Clock()
        warm_up = clock.now - timedelta(minutes=30)
        probes_of(store, "prod", warm_up, followed=20)
        probes_of(store, "cand", warm_up, followed=20)
        controller, manager, _ = await probed_rollout(store, clock, alerts, config_text)
        arrivals(store, clock.now, 700, 1.0)
        clock.now += timedelta(seconds=700)  # past max_hold_s (600)
        changes = await controller.tick(force=True)
        return changes, manager.store.recent_verdicts("bot"), warm_up

    changes, rows, warm_up = asyncio.run(scenario())
    assert changes == []
    (adaptation,) = [r for r in rows if r["metric"] == "rule_adaptation"]
    frees = (warm_up + timedelta(seconds=1, hours=1)).replace(second=0, microsecond=0)
    until = (frees + timedelta(minutes=1)).strftime("%H:%MZ")
    assert adaptation["verdict"] == "inconclusive"
    assert adaptation["reason"] == f"held: probe budget spent until {until}"
    assert f"rule_adaptation held: probe budget spent until {until}" in caplog.text
    (held,) = [a for a in alerts.sent if a.kind == "step_held"]
    assert f"rule_adaptation (held: probe budget spent until {until})" in held.summary


def test_a_pause_and_resume_keep_the_steps_evidence(store: Store) -> None:
    async def scenario() -> list[dict[str, Any]]:
        clock = Clock()
        controller, manager = await low_traffic_rollout(store, clock)
        arrivals(store, clock.now, 100, 1.0)
        clock.now += timedelta(seconds=100)
        await controller.tick(force=True)
        await manager.act("bot", Action.PAUSE, reason="look", actor="operator")
        clock.now += timedelta(seconds=1)
        await manager.act("bot", Action.RESUME, reason="go on", actor="operator")
        arrivals(store, clock.now, 10, 1.0)
        clock.now += timedelta(seconds=10)
        await controller.tick(force=True)
        return manager.store.recent_verdicts("bot")

    rows = asyncio.run(scenario())
    newest = max(r["look"] for r in rows)
    (error_rate,) = [r for r in rows if r["look"] == newest and r["metric"] == "error_rate"]
    assert error_rate["n_candidate"] == 110  # the 100 answers before the pause still count


def test_one_looks_levels_add_up_to_at_most_the_rollouts_budget(store: Store) -> None:
    async def scenario() -> list[dict[str, Any]]:
        clock = Clock()
        controller, manager, _ = await probed_rollout(store, clock, CapturedAlerts())
        arrivals(store, clock.now, 600, 1.0)
        probes_of(store, "prod", clock.now, followed=40)
        probes_of(store, "cand", clock.now, followed=40)
        clock.now += timedelta(seconds=600)
        await controller.tick(force=True)
        return manager.store.recent_verdicts("bot")

    rows = asyncio.run(scenario())
    by_metric = {r["metric"]: r["alpha"] for r in rows}
    # Two families (traffic, probes), one step: each gets half of the rollout's 0.01.
    assert by_metric["rule_adaptation"] == pytest.approx(0.005)
    assert by_metric["error_rate"] <= 0.005
    assert sum(by_metric.values()) <= 0.01


def test_min_adaptation_fails_a_canary_no_better_than_a_stuck_primary(store: Store) -> None:
    config_text = PROBED.replace("values: [150]", "values: [150]\n      min_adaptation: 0.9")

    async def scenario() -> tuple[list[Alert], list[dict[str, Any]]]:
        clock = Clock()
        alerts = CapturedAlerts()
        controller, manager, _ = await probed_rollout(store, clock, alerts, config_text)
        arrivals(store, clock.now, 1200, 1.0)
        probes_of(store, "prod", clock.now, followed=100, stuck=100)
        probes_of(store, "cand", clock.now, followed=100, stuck=100)
        clock.now += timedelta(seconds=1200)
        await controller.tick(force=True)
        return alerts.sent, manager.store.recent_verdicts("bot")

    sent, rows = asyncio.run(scenario())
    outcomes = {r["metric"]: r["verdict"] for r in rows}
    assert outcomes["rule_adaptation:min_adaptation"] == "fail"
    assert outcomes["rule_adaptation"] != "fail"
    (warning,) = [a for a in sent if a.kind == "verdict_fail"]
    assert "below its floor" in warning.summary and warning.rule == "shipping"


# --- human_preference: blind reviews of the canary's shadow answers against the primary's ---

REVIEWED = LOW_TRAFFIC.replace(
    "metrics: [error_rate, latency_p50]", "metrics: [error_rate, human_preference]"
).replace("    primary: prod\n", "    primary: prod\n    shadows: [{model: cand, sample: 1.0}]\n")


def reviews_of(store: Store, start: datetime, first: int = 0, **preferences: int) -> None:
    """Blind reviews of pairs (prod live, cand shadow): `candidate=`, `primary=`, `tie=` counts;
    the candidate is shown as A on even items and as B on odd ones. The pairs are written in
    one batch and queued in one call, then reviewed one by one, in order."""
    reviews = ReviewStore(store)
    planned: list[tuple[int, datetime, str]] = []
    records: list[Any] = []
    for preferred, count in preferences.items():
        for _ in range(count):
            n = first + len(planned) + 1
            at = start + timedelta(seconds=n)
            planned.append((n, at, preferred))
            records += [
                replace(r, started_at=at) if isinstance(r, ExchangeRecord)
                else replace(r, created_at=at)
                for r in shadow_pair(n, route="bot", primary="prod", candidate="cand")
            ]  # fmt: skip
    store.write_batch(records)
    found = {
        c.pair_id: c
        for c in reviews.candidates("bot", ANY_VERSION, since=start, limit=len(planned))
    }
    assert len(found) == len(planned)  # exactly these pairs, none queued before
    items = []
    for n, at, preferred in planned:
        shown: Literal["A", "B"] = "A" if n % 2 == 0 else "B"
        other: Literal["A", "B"] = "B" if shown == "A" else "A"
        item = replace(queued(found[f"pair-{n}"], shown_as=shown), created_at=at)
        items.append((item, {"candidate": shown, "primary": other, "tie": "tie"}[preferred]))
    assert reviews.enqueue([item for item, _ in items]) == len(items)
    for item, choice in items:
        reviews.add(
            ReviewRecord(item.item_id, "alice", item.created_at, 3, 3, choice)  # type: ignore[arg-type]
        )


async def reviewed_rollout(
    store: Store, clock: Clock, alerts: CapturedAlerts
) -> tuple[RolloutController, RolloutManager]:
    config = parse_config(REVIEWED, {})
    metrics = GatewayMetrics(CollectorRegistry())
    manager = RolloutManager(
        config, RolloutStore(store), RouteTable(config), metrics, alerts=alerts, clock=clock
    )
    await manager.act("bot", Action.START, reason="test", actor="operator")
    controller = RolloutController(
        config, manager, JudgeWindows(store), Leadership(store), metrics,
        clock=clock, reviews=ReviewStore(store),
    )  # fmt: skip
    return controller, manager


def test_a_canary_reviewers_prefer_less_is_rolled_back_on_human_preference(store: Store) -> None:
    async def scenario() -> tuple[list[Any], list[Alert]]:
        clock = Clock()
        alerts = CapturedAlerts()
        controller, _ = await reviewed_rollout(store, clock, alerts)
        arrivals(store, clock.now, 1200, 1.0)  # traffic alone would promote it
        reviews_of(store, clock.now, candidate=10, primary=70, tie=10)
        clock.now += timedelta(seconds=1200)
        first = await controller.tick(force=True)
        clock.now += timedelta(seconds=10)
        return first + await controller.tick(force=True), alerts.sent

    changes, sent = asyncio.run(scenario())
    (change,) = changes
    assert change.after.phase is Phase.ROLLED_BACK
    assert change.after.reason.startswith("human_preference failed")
    assert "reviewers preferred the candidate in 17% of 90 blind reviews" in change.after.reason
    (rollback,) = [a for a in sent if a.kind == "rollback"]
    assert rollback.check == "human_preference" and rollback.severity == "critical"


def test_too_few_reviews_hold_the_canary_and_enough_equal_ones_promote_it(store: Store) -> None:
    async def scenario() -> tuple[list[Any], list[dict[str, Any]], list[Any]]:
        clock = Clock()
        controller, manager = await reviewed_rollout(store, clock, CapturedAlerts())
        arrivals(store, clock.now, 1200, 1.0)
        reviews_of(store, clock.now, primary=19)  # all against it, but too few to say
        clock.now += timedelta(seconds=1200)
        held = await controller.tick(force=True)
        rows = manager.store.recent_verdicts("bot")
        reviews_of(
            store, clock.now - timedelta(seconds=1000), 100, candidate=60, primary=41, tie=60
        )
        clock.now += timedelta(seconds=10)
        return held, rows, await controller.tick(force=True)

    held, rows, later = asyncio.run(scenario())
    assert held == []
    (preference,) = [r for r in rows if r["metric"] == "human_preference"]
    assert preference["verdict"] == "inconclusive" and preference["n_candidate"] == 19
    assert preference["scope"] == "reviews"
    (change,) = later
    assert change.after.phase is Phase.PROMOTED
