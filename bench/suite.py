"""The benchmark suite: start the rig, run the scenario grid, memory and profile stages, report.

Stages, in order:

1. start mock upstream, mirrorgate and LiteLLM (all at once, each pinned; wait for readiness);
2. warm every gateway up (c=16, both modes) and read its resident memory;
3. the grid: {non-stream, stream} x {1, 16, 64} x {direct, mirrorgate, LiteLLM}, interleaved per
   (mode, concurrency) so that a gateway and its direct baseline are measured seconds apart;
4. memory: more requests through mirrorgate at c=16, non-streaming, RSS sampled every 0.5 s
   (LiteLLM: a fixed time at c=16);
5. profile: py-spy on mirrorgate under load (c=16 non-streaming and streaming, c=1 non-streaming);
6. shadows: mirrorgate at c=16 on a route with two shadows (a fast and a 2 s candidate, both at
   sample 1.0) against the same primary without shadows, alternated, repeated, in two scenarios:
   a primary that answers at once (the gateway saturated by client traffic: shadows are shed) and
   a paced one (50 ms, the gateway far from saturated: shadows run); then RSS over 100,000 more
   requests through the paced shadowed route (see bench/shadows.py);
7. production: a second gateway on PostgreSQL (`bodies: redacted`) with OTLP tracing to a stand-in
   collector, serving the plain `bench` route and the production-shaped `bench-production`
   (checks, a shadow, a canary started through the admin API, probes; bench/production.py), side by
   side with direct calls and LiteLLM, {non-stream, stream} x {c=1, c=16, c=8 paced}; then py-spy
   on the production route at c=16 non-streaming, folded by component;
8. stop everything (by PID), write results.json and results.md, print the Markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import resource
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import databases, hotpath, production, shadows, targets
from bench.fleet import postgres_cpu_s
from bench.loadgen import LoadResult
from bench.processes import ServerProcess, StartupError, machine_busy_seconds, port_free
from bench.report import (
    DIRECT,
    CellResult,
    Percentiles,
    SuiteResult,
    attach_added_latency,
    markdown,
)

MB = 1024 * 1024
LITELLM_KEY_ENV = "BENCH_LITELLM_KEY"
"""The load generator reads LiteLLM's master key from here (kept out of argv and the results)."""
PROFILE_RATE_HZ = 250
PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
"""Where the production stage creates (and afterwards drops) its database."""
PRODUCTION_DATABASE = "bench_production"
PRODUCTION_LOADS = ((1, 0.0), (16, 0.0), (8, 0.08))
"""(concurrency, think seconds) of the production stage's cells. The closed loops at c=1 and c=16
keep the gateway's core busy with client traffic (the mock answers at once), so the overload guard
sheds shadows and probes there; in the paced cell 8 clients each pause a random 0-80 ms before
a request (~200 req/s, the gateway's core ~20-30 % busy): shadows and probes run, and its p99 says
whether the client path waits for them."""
PRODUCTION_PACED_CELL_FACTOR = 2
"""A paced cell runs this many times a closed-loop cell's seconds (fewer requests per second)."""
SPAN_DRAIN_S = 30.0
"""How long the production stage waits for the exporter to send the last spans (it batches
every 5 s)."""


@dataclass(frozen=True)
class Plan:
    """How long each stage runs."""

    concurrencies: tuple[int, ...]
    cell_s: float
    warmup_s: float
    memory_requests: int
    memory_cap_s: float
    """The memory stage stops here even if `memory_requests` were not all sent (0: no cap)."""
    litellm_memory_s: float
    profile_s: int
    profiles: tuple[tuple[bool, int], ...]
    """(stream, concurrency) of each py-spy profile."""
    litellm_max_concurrency: int = 64
    """LiteLLM cells above this are skipped (at 20 req/s a c=64 cell mostly waits for its tail)."""
    shadow_repeats: int = 3
    """Measured cells per (scenario, mode, with/without shadows) in the shadow stage; medians are
    reported."""
    shadow_cell_s: float = 5.0
    """A saturated-scenario cell (~1,000-2,500 req/s)."""
    shadow_paced_cell_s: float = 10.0
    """A paced-scenario cell: ~300 req/s, so it runs longer for a p99 of ~3,000 samples."""
    shadow_warmup_s: float = 1.5
    shadow_memory_requests: int = 100_000
    shadow_memory_cap_s: float = 600.0
    """~330 s at the paced route's ~300 req/s; the cap leaves room for a slower machine."""
    shadow_rss_step: int = 10_000
    """The shadow memory table shows the RSS at every multiple of this many requests."""


SHADOW_CONCURRENCY = 16
PACED_THINK_S = 0.005
"""Paced clients pause a random 0-5 ms before each request (`loadgen.py --think`): without it the
16 closed-loop clients of a constant-latency upstream drift into lock-step, and a round of 16
requests arriving within a millisecond starts 16 `cand-fast` calls at once, half of them over its
`max_concurrency` of 8 (measured: 8 % of the fast candidate's calls dropped over 15 s without the
pause, 0 with it). Real clients are independent; the pause costs ~5 % of the request rate."""
SHADOW_MEMORY_CONCURRENCY = 16
"""The shadow memory part runs on the paced shadowed route: at c=16 it serves ~300 req/s with the
gateway's core ~13 % busy, so no shadow call is shed for overload and 100,000 requests take
~5.5 minutes."""
SHADOW_CANDIDATES = (targets.FAST_CANDIDATE, targets.SLOW_CANDIDATE)
SHADOWED_ROUTES = (targets.SHADOW_ROUTE, targets.PACED_SHADOW_ROUTE)
FULL = Plan(
    (1, 16, 64), cell_s=8, warmup_s=1.5, memory_requests=100_000, memory_cap_s=180,
    litellm_memory_s=20, profile_s=10, profiles=((False, 16), (True, 16), (False, 1)),
)  # fmt: skip
QUICK = Plan(
    (1, 16, 64), cell_s=1.5, warmup_s=0.5, memory_requests=10_000, memory_cap_s=8,
    litellm_memory_s=0, profile_s=3, profiles=((False, 16),), litellm_max_concurrency=16,
    shadow_repeats=1, shadow_cell_s=1.5, shadow_paced_cell_s=2.0, shadow_warmup_s=0.5,
    shadow_memory_requests=5_000, shadow_memory_cap_s=20, shadow_rss_step=1_000,
)  # fmt: skip


@dataclass
class Target:
    """Something the load generator can aim at."""

    name: str
    port: int
    model: str
    server: ServerProcess | None
    """The gateway process whose CPU and memory we watch (None: direct to the mock)."""
    api_key_env: str = ""
    system: str = ""
    """The system message the load generator sends (empty: its default)."""


STAGES = ("grid", "memory", "profile", "shadows", "production")
"""Stages after start-up and warm-up, in the order they run; `--stages` picks a subset."""


class Suite:
    """One benchmark run: owns the servers it starts and the `SuiteResult` it fills."""

    def __init__(
        self,
        rig: targets.Rig,
        plan: Plan,
        with_litellm: bool,
        stages: tuple[str, ...] = STAGES,
    ) -> None:
        self.rig = rig
        self.plan = plan
        self.with_litellm = with_litellm
        self.stages = stages
        self.mock = targets.mock_upstream(rig)
        self.result = SuiteResult(machine_info(), asdict(rig.layout), asdict(plan))
        self.targets: list[Target] = []
        self.shadow_result: shadows.ShadowStageResult | None = None
        self.production_result: production.StageResult | None = None
        self.pg_admin_url = PG_ADMIN_URL

    # --- stages -----------------------------------------------------------------------------------

    def run(self) -> SuiteResult:
        with contextlib.ExitStack() as stack:
            self._start(stack)
            for target in self.targets:
                self._warm(target)
            stages = {
                "grid": self._grid,
                "memory": self._memory,
                "profile": self._profiles,
                "shadows": self._shadows,
                "production": self._production,
            }
            for name in STAGES:
                if name in self.stages:
                    stages[name]()
        attach_added_latency(self.result.cells)
        if self.shadow_result is not None:
            self.result.shadows = shadows.as_json(self.shadow_result)
        if self.production_result is not None:
            self.result.production = asdict(self.production_result)
        return self.result

    def markdown(self) -> str:
        """The run's report: the main tables, then the shadow stage's section when it ran."""
        extra = []
        if self.shadow_result is not None:
            extra.append(shadows.markdown(self.shadow_result, self.plan.shadow_rss_step))
        if self.production_result is not None:
            extra.append(production.markdown(self.production_result))
        return markdown(self.result, extra)

    def _start(self, stack: contextlib.ExitStack) -> None:
        servers, ports = [self.mock], [targets.MOCK_PORT]
        if set(self.stages) - {"production"}:  # the production stage starts its own gateway
            servers.append(targets.mirrorgate(self.rig))
            ports.append(targets.MIRRORGATE_PORT)
        if self.with_litellm and targets.litellm_available(self.rig):
            key = "sk-bench-" + secrets.token_hex(16)
            os.environ[LITELLM_KEY_ENV] = key
            servers.append(targets.litellm(self.rig, key))
            ports.append(targets.LITELLM_PORT)
        elif self.with_litellm:
            self.result.failures["litellm"] = f"not installed in {self.rig.litellm_venv}"
        for server, port in zip(servers, ports, strict=True):
            if not port_free(targets.HOST, port):
                raise StartupError(f"{targets.HOST}:{port} is taken; {server.name} needs it")
        for server in servers:
            server.launch()
            stack.callback(server.stop)
        self.targets.append(Target(DIRECT, targets.MOCK_PORT, targets.UPSTREAM_MODEL, None))
        for server in servers:
            try:
                server.wait_ready()
            except StartupError as exc:
                if server.name != "litellm":
                    raise
                self.result.failures["litellm"] = str(exc)
                log(f"litellm did not start; going on without it:\n{exc}")
                continue
            self.result.startup_s[server.name] = round(server.startup_s, 2)
            log(f"{server.name} ready after {server.startup_s:.1f}s (pid {server.pid})")
            if server.name == "mirrorgate":
                self.targets.append(
                    Target(server.name, targets.MIRRORGATE_PORT, targets.ROUTE, server)
                )
            elif server.name == "litellm":
                self.targets.append(
                    Target(
                        server.name, targets.LITELLM_PORT, targets.ROUTE, server, LITELLM_KEY_ENV
                    )
                )

    def _warm(self, target: Target) -> None:
        if target.server is None:
            return
        memory = self.result.memory.setdefault(target.name, {})
        memory["rss_idle_mb"] = target.server.rss_bytes() / MB
        self._load(target, stream=False, concurrency=16, seconds=max(2.0, self.plan.warmup_s * 2))
        self._load(target, stream=True, concurrency=16, seconds=max(1.0, self.plan.warmup_s))
        memory["rss_after_warmup_mb"] = target.server.rss_bytes() / MB
        log(f"{target.name}: {memory['rss_after_warmup_mb']:.0f} MB after warm-up")

    def _grid(self) -> None:
        for stream in (False, True):
            for concurrency in self.plan.concurrencies:
                for target in self.targets:
                    if target.name == "litellm" and concurrency > self.plan.litellm_max_concurrency:
                        continue
                    cell = self._cell(target, stream, concurrency)
                    self.result.cells.append(cell)
                    lat = cell.latency_ms
                    log(
                        f"{cell.mode:10} c={concurrency:<3} {target.name:10} "
                        f"{cell.rps:8.0f} req/s  p50 {lat.p50 if lat else float('nan'):8.2f} ms  "
                        f"p99 {lat.p99 if lat else float('nan'):8.2f} ms  errors {cell.errors}"
                    )
        for target in self.targets:
            if target.server is not None:
                self.result.memory[target.name]["rss_after_grid_mb"] = (
                    target.server.rss_bytes() / MB
                )

    def _memory(self) -> None:
        for target in self.targets:
            if target.server is None:
                continue
            if target.name == "mirrorgate":
                self._memory_stage(
                    target, target.server, self.plan.memory_requests, self.plan.memory_cap_s
                )
            elif self.plan.litellm_memory_s > 0:
                self._memory_stage(target, target.server, 0, self.plan.litellm_memory_s)

    def _memory_stage(
        self, target: Target, server: ServerProcess, requests: int, seconds: float
    ) -> None:
        limit = f"{requests:,} requests" if requests else "no request limit"
        log(f"{target.name}: memory stage, c=16, {limit}, {seconds}s cap")
        samples: list[tuple[float, float]] = []
        t0 = time.monotonic()

        def sample() -> None:
            samples.append((round(time.monotonic() - t0, 1), server.rss_bytes() / MB))

        load = self._load(target, False, 16, seconds, requests=requests, every=sample)
        memory = self.result.memory[target.name]
        memory.update(
            requests=load.requests,
            errors=load.errors,
            seconds=round(load.elapsed_s, 1),
            rps=load.requests / load.elapsed_s if load.elapsed_s else 0.0,
            rss_after_mb=server.rss_bytes() / MB,
            rss_peak_mb=max((mb for _, mb in samples), default=0.0),
            rss_timeline_mb=samples[:: max(1, len(samples) // 20)],
        )
        if target.name == "mirrorgate":
            memory["served_total"] = mirrorgate_requests()
        rss = memory["rss_after_mb"]
        log(f"{target.name}: {rss:.0f} MB after {load.requests:,} more requests")

    def _profiles(self) -> None:
        gateway = next((t for t in self.targets if t.name == "mirrorgate"), None)
        py_spy = self.rig.repo / "bench" / ".venv-tools" / "bin" / "py-spy"
        if gateway is None or gateway.server is None:
            return
        if not py_spy.exists():
            self.result.failures["profile"] = f"py-spy not installed at {py_spy}"
            return
        for stream, concurrency in self.plan.profiles:
            name = f"{'stream' if stream else 'non-stream'}, c={concurrency}"
            log(f"mirrorgate: py-spy profile, {name}, {self.plan.profile_s}s")
            self.result.profiles[name] = self._profile(
                gateway, gateway.server, py_spy, stream, concurrency
            )

    def _profile(
        self, target: Target, server: ServerProcess, py_spy: Path, stream: bool, concurrency: int,
        *, served: Callable[[], float] | None = None, slug_prefix: str = "",
    ) -> dict[str, Any]:  # fmt: skip
        """py-spy on `server` under load; `served` counts the client requests it answered (by
        default every `mirrorgate_requests_total` of the suite's gateway)."""
        served = served or mirrorgate_requests
        slug = f"{slug_prefix}{'stream' if stream else 'non-stream'}-c{concurrency}"
        output = self.rig.work / f"profile-{slug}.txt"
        result_path = self.rig.work / "load-profile.json"
        argv = self._loadgen_argv(
            target, stream, concurrency, self.plan.profile_s + 3.0, result_path, warmup=1.0
        )
        with subprocess.Popen(argv, stdout=subprocess.DEVNULL) as load:
            time.sleep(1.5)
            before_requests = served()
            before_cpu, t0 = server.cpu_seconds(), time.monotonic()
            spy = hotpath.record(py_spy, server.pid, self.plan.profile_s, PROFILE_RATE_HZ, output)
            cpu, wall = server.cpu_seconds() - before_cpu, time.monotonic() - t0
            requests = served() - before_requests
            load.wait()
        if requests <= 0:  # the counter is missing: estimate from the load generator's rate
            measured = LoadResult(**json.loads(result_path.read_text()))
            requests = measured.requests * wall / max(measured.elapsed_s, 1e-9)
        if spy.returncode != 0 or not output.exists():
            return {"error": (spy.stderr or spy.stdout).strip()[-2000:]}
        profile = hotpath.fold(output.read_text(), PROFILE_RATE_HZ)
        cpu_us = cpu * 1e6 / requests if requests else 0.0
        summary = profile.summary(cpu_us, self.plan.profile_s)
        summary.update(
            stream=stream, concurrency=concurrency, requests=requests, rps=requests / wall,
            raw=str(output),
        )  # fmt: skip
        return summary

    def _shadow_scenarios(self) -> list[shadows.Scenario]:
        plan = self.plan
        return [
            shadows.Scenario(
                "saturated", targets.ROUTE, targets.SHADOW_ROUTE,
                f"`{targets.UPSTREAM_MODEL}`, answers at once (the gateway's core saturated by "
                "client traffic alone)",
                plan.shadow_cell_s, plan.shadow_warmup_s,
            ),
            shadows.Scenario(
                "paced", targets.PACED_ROUTE, targets.PACED_SHADOW_ROUTE,
                f"`{targets.PACED_MODEL}`, answers after {targets.PACED_LATENCY_MS} ms (streams: "
                "first token after that, the rest at once), the gateway far from saturated",
                plan.shadow_paced_cell_s, plan.shadow_warmup_s,
                ramp_s=targets.PACED_LATENCY_MS / 1000, think_s=PACED_THINK_S,
            ),
        ]  # fmt: skip

    def _shadows(self) -> None:
        gateway = next((t for t in self.targets if t.name == "mirrorgate"), None)
        if gateway is None or gateway.server is None:
            return
        plan = self.plan
        scenarios = self._shadow_scenarios()
        stage = shadows.ShadowStageResult(SHADOW_CONCURRENCY, plan.shadow_repeats, scenarios)
        stage.loadavg.append(_loadavg())
        self.shadow_result = stage
        log(f"mirrorgate: shadow stage, c={SHADOW_CONCURRENCY}, {plan.shadow_repeats} repeats")
        self._drain_shadows()
        for scenario in scenarios:
            variants = {
                v: dataclasses.replace(gateway, model=scenario.route(v))
                for v in (shadows.PLAIN, shadows.SHADOWED)
            }
            for stream in (False, True):
                for repeat in range(plan.shadow_repeats):
                    # Alternate which variant goes first, so that neither always follows the other.
                    order = list(variants) if repeat % 2 == 0 else list(variants)[::-1]
                    for variant in order:
                        before = shadow_counters(scenario.shadowed_route)
                        cell = self._cell(
                            variants[variant], stream, SHADOW_CONCURRENCY,
                            seconds=scenario.cell_s, warmup=scenario.warmup_s,
                            ramp=scenario.ramp_s, think=scenario.think_s,
                        )  # fmt: skip
                        self._drain_shadows()  # the next cell starts with no shadow call in flight
                        counters = shadow_counters(scenario.shadowed_route) - before
                        stage.cells.append(
                            shadows.ShadowCell(scenario.name, variant, repeat, cell, counters)
                        )
                        lat = cell.latency_ms
                        calls = shadows.ShadowCalls.of(counters)
                        busy = cell.rps * (cell.server_cpu_us_per_request or 0.0) / 1e4
                        log(
                            f"{scenario.name:9} {cell.mode:10} #{repeat + 1} {variant:10} "
                            f"{cell.rps:6.0f} req/s  "
                            f"p50 {lat.p50 if lat else float('nan'):6.2f} ms  "
                            f"p99 {lat.p99 if lat else float('nan'):6.2f} ms  "
                            f"gateway CPU {busy:3.0f} %  "
                            f"shadow calls made {calls.made:,.0f}, shed: {calls.shed_text()}"
                        )
        paced = scenarios[-1]
        stage.memory = self._shadow_memory(
            dataclasses.replace(gateway, model=paced.shadowed_route), gateway.server, paced
        )
        stage.loadavg.append(_loadavg())

    def _shadow_memory(
        self, target: Target, server: ServerProcess, scenario: shadows.Scenario
    ) -> shadows.ShadowMemory:
        """RSS every 0.5 s while the shadowed route serves `shadow_memory_requests`."""
        plan, route, concurrency = self.plan, scenario.shadowed_route, SHADOW_MEMORY_CONCURRENCY
        log(
            f"mirrorgate: shadow memory stage, {route}, c={concurrency}, "
            f"{plan.shadow_memory_requests:,} requests, {plan.shadow_memory_cap_s}s cap"
        )
        memory = shadows.ShadowMemory(scenario.name, route, concurrency)
        text = _metrics_text()
        start = shadows.ShadowCounters.parse(text, route)
        memory.backlog_before = shadows.GatewayBacklog.parse(text)
        t0 = time.monotonic()

        def sample() -> None:
            text = _metrics_text()
            served = shadows.ShadowCounters.parse(text, route).offered
            queue = shadows.GatewayBacklog.parse(text).recorder_queue
            rss = server.rss_bytes() / MB
            elapsed = round(time.monotonic() - t0, 1)
            memory.samples.append(shadows.RssSample(elapsed, served - start.offered, rss, queue))

        sample()

        load = self._load(
            target, False, concurrency, plan.shadow_memory_cap_s,
            requests=plan.shadow_memory_requests, every=sample, ramp=scenario.ramp_s,
            think=scenario.think_s,
        )  # fmt: skip
        sample()
        self._drain_shadows()
        memory.requests, memory.errors = load.requests, load.errors
        memory.seconds = round(load.elapsed_s, 1)
        memory.rss_after_drain_mb = server.rss_bytes() / MB
        text = _metrics_text()
        memory.counters = shadows.ShadowCounters.parse(text, route) - start
        memory.backlog_after = shadows.GatewayBacklog.parse(text)
        first, last = memory.samples[0].rss_mb, memory.samples[-1].rss_mb
        calls = shadows.ShadowCalls.of(memory.counters)
        log(
            f"mirrorgate: {first:.0f} -> {last:.0f} MB over {load.requests:,} shadowed requests "
            f"({memory.rps:,.0f} req/s); shadow calls made {calls.made_text()}, "
            f"shed: {calls.shed_text()}"
        )
        return memory

    def _drain_shadows(self, deadline_s: float = targets.SLOW_CANDIDATE_MS / 1000 + 10) -> None:
        """Wait (with a deadline) until every shadow call the gateway accepted has finished."""
        deadline = time.monotonic() + deadline_s
        while True:
            text = _metrics_text()
            in_flight = sum(
                shadows.ShadowCounters.parse(text, route).in_flight(SHADOW_CANDIDATES)
                for route in SHADOWED_ROUTES
            )
            if in_flight <= 0:
                return
            if time.monotonic() > deadline:
                log("shadow calls still in flight after the drain deadline; going on")
                return
            time.sleep(0.1)

    # --- production -------------------------------------------------------------------------------

    def _production(self) -> None:
        """The production-shaped route beside the plain one in one gateway, and LiteLLM."""
        stage = production.StageResult(loadavg=[_loadavg()])
        self.production_result = stage
        litellm = next((t for t in self.targets if t.name == "litellm"), None)
        if litellm is None:
            stage.litellm = self.result.failures.get("litellm", "not started (--no-litellm)")
        with production_gateway(self.rig, self.pg_admin_url) as (server, collector, rollout):
            stage.rollout = rollout
            log(
                f"mirrorgate-production ready (pid {server.pid}); rollout "
                f"{rollout['phase']} at {rollout['weight_percent']} %"
            )
            port = targets.PRODUCTION_PORT
            plain = Target(production.PLAIN, port, targets.ROUTE, server)
            shaped = Target(
                production.PRODUCTION, port, production.PRODUCTION_ROUTE, server,
                system=production.SYSTEM_PROMPT,
            )  # fmt: skip
            direct = Target(DIRECT, targets.MOCK_PORT, targets.UPSTREAM_MODEL, None)
            direct_json = Target(
                production.DIRECT_JSON, targets.MOCK_PORT, production.JSON_MODEL, None,
                system=production.SYSTEM_PROMPT,
            )  # fmt: skip
            for target in (plain, shaped):
                warm = max(2.0, self.plan.warmup_s * 2)
                self._load(target, stream=False, concurrency=16, seconds=warm)
                self._load(target, stream=True, concurrency=16, seconds=warm / 2)
            baselines = {production.PLAIN: direct, production.PRODUCTION: direct_json}
            order = [direct, direct_json, plain, shaped, *([litellm] if litellm else [])]
            for stream in (False, True):
                for concurrency, think in PRODUCTION_LOADS:
                    measured = {
                        t.name: self._production_cell(t, stream, concurrency, think) for t in order
                    }
                    for name, cell in measured.items():
                        base = measured[baselines.get(name, direct).name]
                        if name not in (DIRECT, production.DIRECT_JSON):
                            cell.added_p50_ms = cell.p50_ms - base.p50_ms
                            cell.added_p99_ms = cell.p99_ms - base.p99_ms
                        stage.cells.append(cell)
            stage.profile = self._production_profile(shaped, server)
            stage.spans, stage.totals = self._drain_spans(collector, port)
            stage.loadavg.append(_loadavg())
        log(
            f"production stage: {stage.spans.spans:,} spans for {stage.upstream_calls:,.0f} "
            "upstream calls"
        )

    def _production_cell(
        self, target: Target, stream: bool, concurrency: int, think: float = 0.0
    ) -> production.StageCell:
        route_tally = target.name == production.PRODUCTION
        before: dict[str, Any] = {}

        def snapshot() -> None:
            before["pg"] = postgres_cpu_s()
            if route_tally:
                before["tally"] = production_tally(target.port)

        cell = self._cell(
            target, stream, concurrency, on_measure=snapshot, think=think,
            seconds=self.plan.cell_s * (PRODUCTION_PACED_CELL_FACTOR if think else 1),
        )  # fmt: skip
        pg_after = postgres_cpu_s()
        done = max(cell.requests, 1)
        result = production.StageCell(
            target.name, stream, concurrency, cell.requests, cell.errors, cell.rps,
            cell.latency_ms.p50 if cell.latency_ms else float("nan"),
            cell.latency_ms.p99 if cell.latency_ms else float("nan"),
            gateway_cpu_us=cell.server_cpu_us_per_request, think_s=think,
        )  # fmt: skip
        if target.server is not None and pg_after is not None and before["pg"] is not None:
            result.postgres_cpu_us = (pg_after - before["pg"]) * 1e6 / done
        if route_tally:
            result.tally = production_tally(target.port) - before["tally"]
        log(
            f"{cell.mode:10} {result.load:9} {target.name:11} {cell.rps:7.0f} req/s  "
            f"p50 {result.p50_ms:7.2f} ms  p99 {result.p99_ms:7.2f} ms  "
            f"CPU {_fmt(result.gateway_cpu_us)} µs/req  errors {cell.errors}"
            + (
                f"  canary {100 * result.tally.canary_share:.1f} %  probes {result.tally.probe:.0f}"
                if result.tally
                else ""
            )
        )
        return result

    def _production_profile(self, target: Target, server: ServerProcess) -> dict[str, Any]:
        py_spy = self.rig.repo / "bench" / ".venv-tools" / "bin" / "py-spy"
        if not py_spy.exists():
            return {"error": f"py-spy not installed at {py_spy}"}
        log(f"mirrorgate-production: py-spy profile, non-stream, c=16, {self.plan.profile_s}s")

        def served() -> float:
            return production_tally(target.port).client_requests

        return self._profile(
            target, server, py_spy, False, 16, served=served, slug_prefix="production-"
        )

    def _drain_spans(
        self, collector: production.SpanCollector, port: int
    ) -> tuple[production.SpanCount, dict[str, production.RouteTally]]:
        """Wait (with a deadline) until the collector has a span for every upstream call."""
        deadline = time.monotonic() + SPAN_DRAIN_S
        while True:
            text = _metrics_text(port)
            totals = {
                route: production.RouteTally.parse(text, route)
                for route in (targets.ROUTE, production.PRODUCTION_ROUTE)
            }
            spans = collector.snapshot()
            if spans.spans >= sum(t.upstream_calls for t in totals.values()):
                return spans, totals
            if time.monotonic() > deadline:
                log("the collector is still short of spans after the drain deadline; going on")
                return spans, totals
            time.sleep(0.25)

    # --- load -------------------------------------------------------------------------------------

    def _loadgen_argv(
        self, target: Target, stream: bool, concurrency: int, seconds: float, output: Path,
        *, requests: int = 0, warmup: float = 0.0, ramp: float = 0.0, think: float = 0.0,
    ) -> list[str]:  # fmt: skip
        argv = [
            str(self.rig.python), str(self.rig.repo / "bench" / "loadgen.py"),
            "--host", targets.HOST, "--port", str(target.port), "--model", target.model,
            "--concurrency", str(concurrency), "--seconds", str(seconds),
            "--requests", str(requests), "--warmup", str(warmup), "--output", str(output),
            "--announce",
        ]  # fmt: skip
        if stream:
            argv.append("--stream")
        if ramp > 0:
            argv += ["--ramp", str(ramp)]
        if think > 0:
            argv += ["--think", str(think)]
        if target.api_key_env:
            argv += ["--api-key-env", target.api_key_env]
        if target.system:
            argv += ["--system", target.system]
        return self.rig.layout.pin(self.rig.layout.load, argv)

    def _load(
        self, target: Target, stream: bool, concurrency: int, seconds: float, *,
        requests: int = 0, warmup: float = 0.0, on_measure: Callable[[], None] | None = None,
        every: Callable[[], None] | None = None, ramp: float = 0.0, think: float = 0.0,
    ) -> LoadResult:  # fmt: skip
        """Run one load process to the end and return its result.

        `on_measure` is called when the warm-up is over and the measured phase starts; `every`
        each 0.5 s while the load runs.
        """
        output = self.rig.work / "load.json"
        output.unlink(missing_ok=True)
        argv = self._loadgen_argv(
            target, stream, concurrency, seconds, output, requests=requests, warmup=warmup,
            ramp=ramp, think=think,
        )  # fmt: skip
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as proc:
            if proc.stdout is not None:
                proc.stdout.readline()  # "measuring" (or EOF if it failed)
            if on_measure is not None:
                on_measure()
            while every is not None and proc.poll() is None:
                every()
                time.sleep(0.5)
            _, err = proc.communicate()
        if proc.returncode != 0 or not output.exists():
            raise RuntimeError(f"load generator failed ({proc.returncode}): {err[-2000:]}")
        return LoadResult(**json.loads(output.read_text()))

    def _cell(
        self, target: Target, stream: bool, concurrency: int, *,
        seconds: float | None = None, warmup: float | None = None, ramp: float = 0.0,
        think: float = 0.0, on_measure: Callable[[], None] | None = None,
    ) -> CellResult:  # fmt: skip
        """One measured run; `on_measure` is called when the measured phase starts, just before
        the CPU readings."""
        servers = [s for s in (target.server, self.mock) if s is not None]
        before: dict[str, Any] = {}

        def snapshot() -> None:
            if on_measure is not None:
                on_measure()
            before.update(
                cpu=[s.cpu_seconds() for s in servers],
                busy=machine_busy_seconds(),
                own=_own_cpu_seconds(),
                t=time.monotonic(),
            )

        load = self._load(
            target, stream, concurrency,
            self.plan.cell_s if seconds is None else seconds,
            warmup=self.plan.warmup_s if warmup is None else warmup,
            on_measure=snapshot, ramp=ramp, think=think,
        )  # fmt: skip
        window = time.monotonic() - before["t"]
        busy = machine_busy_seconds() - before["busy"]
        own = _own_cpu_seconds() - before["own"] + load.cpu_s
        cpu = [s.cpu_seconds() - b for s, b in zip(servers, before["cpu"], strict=True)]
        wall = load.elapsed_s or 1.0
        done = max(load.requests, 1)
        return CellResult(
            target=target.name,
            stream=stream,
            concurrency=concurrency,
            requests=load.requests,
            errors=load.errors,
            error_kinds=load.error_kinds,
            seconds=round(load.elapsed_s, 2),
            rps=load.requests / wall,
            latency_ms=Percentiles.of_seconds(load.latencies),
            ttft_ms=Percentiles.of_seconds(load.ttfts) if stream else None,
            server_cpu_us_per_request=cpu[0] * 1e6 / done if target.server is not None else None,
            mock_cpu_us_per_request=cpu[-1] * 1e6 / done,
            client_cpu_percent=100 * load.cpu_s / wall,
            other_cpu_percent=max(0.0, 100 * (busy - sum(cpu) - own) / window),
        )


@contextlib.contextmanager
def production_gateway(
    rig: targets.Rig, pg_admin_url: str, database: str = PRODUCTION_DATABASE,
    port: int = targets.PRODUCTION_PORT, mock_port: int = targets.MOCK_PORT,
    candidate_mock_port: int | None = None,
) -> Iterator[tuple[ServerProcess, production.SpanCollector, dict[str, Any]]]:  # fmt: skip
    """The production stage's setup: a fresh PostgreSQL database, the span collector, the
    gateway (`targets.mirrorgate_production`, ready; the candidate on `candidate_mock_port`'s
    mock when given) and its canary started through the admin API. Yields (gateway, collector,
    rollout state); stops the gateway and drops the database."""
    with (
        databases.fresh_database(pg_admin_url, database) as url,
        production.SpanCollector() as collector,
    ):
        server = targets.mirrorgate_production(
            rig, url, collector.endpoint, port, mock_port, candidate_mock_port
        )
        if not port_free(targets.HOST, port):
            raise StartupError(f"{targets.HOST}:{port} is taken; {server.name} needs it")
        try:
            server.start()
            yield server, collector, production.start_canary(f"http://{targets.HOST}:{port}")
        finally:
            server.stop()


def production_tally(port: int) -> production.RouteTally:
    """The production route's counters, from its gateway's /metrics."""
    return production.RouteTally.parse(_metrics_text(port), production.PRODUCTION_ROUTE)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _own_cpu_seconds() -> float:
    """CPU of this process (the load generators report their own)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def _metrics_text(port: int = targets.MIRRORGATE_PORT) -> str:
    url = f"http://{targets.HOST}:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
    return body.decode()


def mirrorgate_requests(port: int = targets.MIRRORGATE_PORT) -> float:
    """Sum of mirrorgate_requests_total over all label sets, from the gateway's /metrics."""
    text = _metrics_text(port)
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("mirrorgate_requests_total{")
    )


def shadow_counters(route: str) -> shadows.ShadowCounters:
    """A shadowed route's counters, from the gateway's /metrics."""
    return shadows.ShadowCounters.parse(_metrics_text(), route)


def _loadavg() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def machine_info() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "mirrorgate_sources_sha256": sources_fingerprint(),
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": _loadavg(),
    }


def sources_fingerprint() -> str:
    """SHA-256 over the gateway's Python sources, to tell which code a result belongs to."""
    digest = hashlib.sha256()
    root = targets.Rig.repo_root()
    for path in sorted((root / "proxy").rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short stages (under 2 minutes)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM comparison")
    parser.add_argument("--memory-requests", type=int, help="requests in the memory stage")
    parser.add_argument("--memory-cap-s", type=float, help="time cap of the memory stage (0: none)")
    parser.add_argument(
        "--shadow-repeats", type=int,
        help="repeats of each (scenario, mode, variant) cell in the shadow stage (default 3)",
    )  # fmt: skip
    parser.add_argument(
        "--shadow-memory-requests", type=int, help="requests in the shadow stage's memory part"
    )
    parser.add_argument(
        "--shadow-memory-cap-s", type=float, help="time cap of that memory part (0: none)"
    )
    parser.add_argument(
        "--nice", type=int, default=0,
        help="niceness of every process the rig starts; negative (root) puts them ahead of "
        "other work on a shared machine",
    )  # fmt: skip
    parser.add_argument(
        "--pg-admin-url", default=PG_ADMIN_URL,
        help=f"PostgreSQL where the production stage creates its database {PRODUCTION_DATABASE}",
    )  # fmt: skip
    parser.add_argument(
        "--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}"
    )
    args = parser.parse_args(argv)
    stages = tuple(s.strip() for s in args.stages.split(",") if s.strip())
    if unknown := set(stages) - set(STAGES):
        parser.error(f"unknown stage(s): {', '.join(sorted(unknown))}")
    plan = QUICK if args.quick else FULL
    if args.memory_requests is not None:
        plan = dataclasses.replace(plan, memory_requests=args.memory_requests)
    if args.memory_cap_s is not None:
        plan = dataclasses.replace(plan, memory_cap_s=args.memory_cap_s)
    if args.shadow_repeats is not None:
        plan = dataclasses.replace(plan, shadow_repeats=max(1, args.shadow_repeats))
    if args.shadow_memory_requests is not None:
        plan = dataclasses.replace(plan, shadow_memory_requests=args.shadow_memory_requests)
    if args.shadow_memory_cap_s is not None:
        plan = dataclasses.replace(plan, shadow_memory_cap_s=args.shadow_memory_cap_s)
    rig = targets.Rig.create(args.out.resolve(), nice=args.nice)
    # SIGTERM unwinds like Ctrl-C, so that every server started so far is stopped by its PID.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    started = time.monotonic()
    log(f"{rig.layout}; output in {rig.work}")
    try:
        suite = Suite(rig, plan, with_litellm=not args.no_litellm, stages=stages)
        suite.pg_admin_url = args.pg_admin_url
        result = suite.run()
    except StartupError as exc:
        log(f"could not start the rig: {exc}")
        return 1
    result.machine["total_runtime_s"] = round(time.monotonic() - started, 1)
    at_end = sources_fingerprint()
    if at_end != result.machine["mirrorgate_sources_sha256"]:
        # Someone edited the gateway during the run: the servers run the sources of the start.
        result.machine["mirrorgate_sources_sha256_at_end"] = at_end
        log(f"the mirrorgate sources changed during the run (now {at_end})")
    text = suite.markdown()
    (rig.work / "results.json").write_text(json.dumps(asdict(result), indent=2, default=str))
    (rig.work / "results.md").write_text(text)
    sys.stdout.write(text)
    log(f"done in {result.machine['total_runtime_s']}s; {rig.work / 'results.json'}")
    return 0
