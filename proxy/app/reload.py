"""Reloading the configuration without a restart (SIGHUP, `POST /admin/reload`).

A reload reads the file the gateway was started with (`source`: the same path and the same
`serve --host/--port` overrides), checks it as `check-config` does, and either applies it in one
step on the event loop (`Gateway.apply`) or keeps the running configuration and says why. Each
ends in one `ReloadOutcome`: logged (a rejection at WARNING), counted in
`mirrorgate_config_reloads_total{result}`, and answered by the endpoint.

What reloads is `RELOADED` (models with their prices, routes with their shadows, canaries and
agreement settings, rule sets, the LLM judge, alert sinks); the sections of `FIXED` need a new
listener, engine, exporter or plugin set and keep their running value: each key path of theirs
that the file changes is named in `not_reloaded`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from proxy.config import ConfigError, ConfigProblem, MirrorgateConfig, config_warnings
from proxy.observability import GatewayMetrics

log = logging.getLogger("mirrorgate")

RELOADED = ("models", "routes", "rules", "judge", "alerts")
"""Sections swapped in by a reload, each changed key named in `changed` (`routes.chat`)."""

FIXED = ("server", "store", "telemetry", "analyzers")
"""Sections that keep their running value (listener and its limits, engine, exporter, analyzer
plugins); the changed key paths are named in `not_reloaded`."""


class ReloadResult(StrEnum):
    APPLIED = "applied"
    UNCHANGED = "unchanged"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class ReloadOutcome:
    """What one reload did."""

    result: ReloadResult
    generation: int
    """The configuration generation served after it (1 at start)."""
    changed: tuple[str, ...] = ()
    """Key paths (`routes.chat`, `models.fast`) whose new value is served now."""
    not_reloaded: tuple[str, ...] = ()
    """Key paths that differ in the file but keep their running value until a restart."""
    problems: tuple[ConfigProblem, ...] = field(default=())
    """Why the file was rejected, every problem by key path (rejected only)."""

    def answer(self) -> dict[str, Any]:
        """The endpoint's JSON body."""
        if self.result is ReloadResult.REJECTED:
            return {
                "error": {
                    "type": "config_rejected",
                    "message": f"the configuration was not reloaded: {len(self.problems)} "
                    "problem(s); the running configuration stays",
                },
                "problems": [{"path": p.path, "message": p.message} for p in self.problems],
                "generation": self.generation,
            }
        return {
            "result": self.result.value,
            "generation": self.generation,
            "changed": list(self.changed),
            "not_reloaded": list(self.not_reloaded),
        }


def _keyed(section: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    return [
        f"{section}.{name}"
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    ]


def _section(old: MirrorgateConfig, new: MirrorgateConfig, section: str) -> list[str]:
    """The key paths of `section` that differ: one level below the section (a route, a model,
    a server key), or the section itself when it is a list or was added or removed."""
    before, after = getattr(old, section), getattr(new, section)
    if before == after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        return _keyed(section, before, after)
    if hasattr(before, "model_dump") and hasattr(after, "model_dump"):
        return _keyed(section, before.model_dump(), after.model_dump())
    return [section]


def config_changes(old: MirrorgateConfig, new: MirrorgateConfig) -> tuple[list[str], list[str]]:
    """(changed, not_reloaded): the reloadable key paths `new` changes, and the fixed ones."""
    changed = [path for section in RELOADED for path in _section(old, new, section)]
    fixed = [path for section in FIXED for path in _section(old, new, section)]
    return changed, fixed


def merged(old: MirrorgateConfig, new: MirrorgateConfig) -> MirrorgateConfig:
    """`new` with every `FIXED` section kept as it runs in `old`."""
    return new.model_copy(update={section: getattr(old, section) for section in FIXED})


class ConfigReloader:
    """Runs reloads one at a time: a second one waits for the first, then reads the file anew.

    `source` reads and checks the file (raising `ConfigError`); `running` is the configuration
    served now; `apply` swaps a new one in (on the event loop, in one step).
    """

    def __init__(
        self,
        source: Callable[[], MirrorgateConfig],
        running: Callable[[], MirrorgateConfig],
        apply: Callable[[MirrorgateConfig], Awaitable[list[str]]],
        metrics: GatewayMetrics,
        env: Mapping[str, str],
    ) -> None:
        self.source = source
        self.running = running
        self.apply = apply
        self.metrics = metrics
        self.env = env
        self.generation = 1
        self._lock = asyncio.Lock()

    async def reload(self, cause: str) -> ReloadOutcome:
        """Reload once (`cause` names who asked, for the log)."""
        async with self._lock:
            outcome = await self._reload()
        self.metrics.config_reloads.labels(outcome.result.value).inc()
        if outcome.result is ReloadResult.REJECTED:
            log.warning(
                "config reload (%s) rejected, the running configuration stays: %s",
                cause,
                "; ".join(str(p) for p in outcome.problems),
            )
        else:
            log.warning(
                "config reload (%s): %s, generation %d; changed: %s; not reloaded: %s",
                cause,
                outcome.result.value,
                outcome.generation,
                ", ".join(outcome.changed) or "nothing",
                ", ".join(outcome.not_reloaded) or "nothing",
            )
        return outcome

    async def _reload(self) -> ReloadOutcome:
        try:
            new = await asyncio.to_thread(self.source)
        except ConfigError as exc:
            return ReloadOutcome(
                ReloadResult.REJECTED, self.generation, problems=tuple(exc.problems)
            )
        old = self.running()
        changed, fixed = config_changes(old, new)
        if not changed:
            return ReloadOutcome(ReloadResult.UNCHANGED, self.generation, (), tuple(fixed))
        served = merged(old, new)
        fixed += await self.apply(served)
        self.generation += 1
        self.metrics.config_generation.set(self.generation)
        for warning in config_warnings(served, self.env):
            log.warning("config: %s", warning)
        return ReloadOutcome(ReloadResult.APPLIED, self.generation, tuple(changed), tuple(fixed))
