"""What the console's pages read and act through, handed over by the app's wiring in one value
(`app.state.console_parts`), and the dependencies through which its routes reach it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Request

from proxy.config import MirrorgateConfig
from proxy.gateway import RouteTable
from proxy.observability import GatewayMetrics
from proxy.rollout import RolloutManager
from proxy.store import EvalStore, GuardStore, ProbeStore, ReviewStore, RuleEventStore, Store

from .auth import ConsoleAuth, Principal

if TYPE_CHECKING:
    from .experiments import ExperimentSource


@dataclass(frozen=True, slots=True)
class ConsoleParts:
    """The parts of a running gateway the console uses; none of them is the console's to close.
    The app's wiring sets them on `app.state.console_parts`; the console's routes, built once per
    process, read them from the request they serve (`console_parts`)."""

    config: Callable[[], MirrorgateConfig]
    """The running configuration (a reload swaps it: read it per request)."""
    auth: ConsoleAuth
    store: Store
    """Exchanges, pairs and checks (`Store.query`, `query_pairs`, `query_checks`): blocking,
    called on a worker thread."""
    rollouts: RolloutManager
    """Rollout states and actions; its `store` is the `RolloutStore` (transitions, verdicts)."""
    routes: RouteTable
    rule_events: RuleEventStore
    probes: ProbeStore
    guard: GuardStore
    metrics: GatewayMetrics
    reviews: ReviewStore
    """Blind review's queue and reviews (`proxy.console.review`)."""
    probed_rules: Callable[[], Sequence[str]] = tuple
    """The rules with `probes` in the running configuration."""
    experiments: ExperimentSource | None = None
    """Where the experiments page reads experiments (None: this gateway runs none)."""
    eval_runs: EvalStore | None = None
    """The stored evaluation runs the offline gate reads (None: no store to read them from)."""


def console_parts(request: Request) -> ConsoleParts:
    """The console parts of the gateway serving `request`."""
    parts: ConsoleParts = request.app.state.console_parts
    return parts


def page_principal(request: Request) -> Principal:
    """`ConsoleAuth.page_principal` of the gateway serving `request`."""
    return console_parts(request).auth.page_principal(request)


def api_principal(request: Request) -> Principal:
    """`ConsoleAuth.api_principal` of the gateway serving `request`."""
    return console_parts(request).auth.api_principal(request)


def admin_page(request: Request) -> Principal:
    """`ConsoleAuth.admin_page` of the gateway serving `request`."""
    return console_parts(request).auth.admin_page(request)
