"""Analyzer plugins: the `Analyzer` protocol, the built-in list, selection by name, and isolation.

An analyzer is any object with a `name` and two pure methods that take a frozen view and return
findings (`analyzers.views`). Built-ins come from a plain list (`default_analyzers()`);
third-party ones come from the entry-point group `mirrorgate.analyzers`, whose entries load a
zero-argument callable (usually the class) returning an analyzer::

    # the plugin's pyproject.toml
    [project.entry-points."mirrorgate.analyzers"]
    tone = "acme_tone:ToneAnalyzer"

Discovery stays at the edge, because reading installed distributions is I/O. The proxy's
start-up does::

    from importlib.metadata import entry_points
    available = available_analyzers(entry_points(group=ENTRY_POINT_GROUP))
    analyzers = load_analyzers(config_names, available)   # raises PluginError, naming the name

`available_analyzers` only wraps the entry points: nothing is imported until `load_analyzers`
builds the selected ones. At run time every call goes through `run_safely`, which returns a
plugin's exception (to be logged and counted in `mirrorgate_analyzer_errors_total`) instead of
raising it, so a broken plugin never affects the request or the other analyzers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, Protocol, overload, runtime_checkable

from analyzers.builtin_analyzers import AgreementAnalyzer, LengthAnalyzer, RefusalAnalyzer
from analyzers.errors import PluginError
from analyzers.views import SEVERITIES, ExchangeView, Finding, PairView

ENTRY_POINT_GROUP = "mirrorgate.analyzers"
"""The entry-point group third-party analyzers register under."""

MAX_FINDINGS = 1_000
"""A call returning more findings than this is treated as a plugin failure."""


@runtime_checkable
class Analyzer(Protocol):
    """Scores exchanges and pairs. Both methods must be pure — no I/O, no clock, no shared
    mutable state — and fast: they run for every recorded exchange and every pair, off the
    client path. Return an empty sequence when there is nothing to say. Raising is allowed but
    costs the finding: `run_safely` reports it as a failure of this analyzer only."""

    @property
    def name(self) -> str:
        """A stable name: the `analyzer` of every finding and the config name that selects it."""
        ...

    def analyze_exchange(self, exchange: ExchangeView) -> Sequence[Finding]:
        """Called once per finished exchange of every arm (failed ones included: check
        `exchange.ok`)."""
        ...

    def analyze_pair(self, pair: PairView) -> Sequence[Finding]:
        """Called once per pair: shadow (candidate vs primary), noise (primary vs itself) and
        replay pairs."""
        ...


AnalyzerFactory = Callable[[], Analyzer]
"""A zero-argument callable that builds an analyzer (a class, usually)."""

BUILTIN_ANALYZERS: Mapping[str, AnalyzerFactory] = MappingProxyType(
    {"length": LengthAnalyzer, "refusal": RefusalAnalyzer, "agreement": AgreementAnalyzer}
)
"""The built-in analyzers by name."""


def default_analyzers() -> list[Analyzer]:
    """One of each built-in analyzer, in a fixed order."""
    return [factory() for factory in BUILTIN_ANALYZERS.values()]


class EntryPointLike(Protocol):
    """What `available_analyzers` needs of an `importlib.metadata.EntryPoint`."""

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str: ...

    def load(self) -> Any: ...


def available_analyzers(entry_points: Iterable[EntryPointLike] = ()) -> dict[str, AnalyzerFactory]:
    """The built-ins plus one lazy factory per entry point, by name. A name offered twice (by
    two entry points, or by an entry point and a built-in) is kept, and fails when selected:
    there is no silent winner."""
    offered: dict[str, list[str]] = {name: ["built-in"] for name in BUILTIN_ANALYZERS}
    loaders: dict[str, EntryPointLike] = {}
    for entry_point in entry_points:
        offered.setdefault(entry_point.name, []).append(entry_point.value)
        loaders[entry_point.name] = entry_point
    available: dict[str, AnalyzerFactory] = {}
    for name, sources in offered.items():
        if len(sources) > 1:
            available[name] = _ambiguous(name, sources)
        elif name in loaders:
            available[name] = _from_entry_point(loaders[name])
        else:
            available[name] = BUILTIN_ANALYZERS[name]
    return available


def _ambiguous(name: str, sources: list[str]) -> AnalyzerFactory:
    def build() -> Analyzer:
        raise PluginError(
            f"analyzer {name!r} is offered more than once ({', '.join(sources)}); "
            f"rename one of the entry points in group {ENTRY_POINT_GROUP}"
        )

    return build


def _from_entry_point(entry_point: EntryPointLike) -> AnalyzerFactory:
    def build() -> Analyzer:
        factory = entry_point.load()
        if not callable(factory):
            raise TypeError(f"{entry_point.value} is a {type(factory).__name__}, not callable")
        built: Analyzer = factory()
        return built

    return build


def load_analyzers(
    names: Sequence[str], available: Mapping[str, AnalyzerFactory] = BUILTIN_ANALYZERS
) -> list[Analyzer]:
    """Build the analyzers named in config, in that order. Raise `PluginError` for an unknown
    or repeated name, a factory that fails, or an object that is not an `Analyzer`."""
    analyzers: list[Analyzer] = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise PluginError(f"analyzer {name!r} is listed twice")
        seen.add(name)
        factory = available.get(name)
        if factory is None:
            known = ", ".join(sorted(available)) or "none"
            raise PluginError(f"unknown analyzer {name!r}; available: {known}")
        try:
            analyzer = factory()
        except PluginError:
            raise
        except Exception as exc:
            raise PluginError(
                f"analyzer {name!r} could not be loaded: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(analyzer, Analyzer):
            raise PluginError(
                f"analyzer {name!r} built a {type(analyzer).__name__}, which lacks name, "
                "analyze_exchange or analyze_pair"
            )
        analyzers.append(analyzer)
    return analyzers


@dataclass(frozen=True, slots=True)
class AnalyzerFailure:
    """An analyzer call that raised or returned something that is not findings."""

    analyzer: str
    """The analyzer's name (its class name when even `name` failed)."""
    method: Literal["exchange", "pair"]
    """Which call failed."""
    exception: Exception
    """What it raised (for the log's traceback)."""

    @property
    def message(self) -> str:
        """`Type: message`, one line."""
        text = " ".join(str(self.exception).split())[:300]
        return f"{type(self.exception).__name__}: {text}" if text else type(self.exception).__name__


class PluginOutputError(TypeError):
    """An analyzer returned something other than a sequence of valid `Finding`s."""


@overload
def run_safely(
    analyzer: Analyzer, method: Literal["exchange"], view: ExchangeView
) -> tuple[tuple[Finding, ...], AnalyzerFailure | None]: ...


@overload
def run_safely(
    analyzer: Analyzer, method: Literal["pair"], view: PairView
) -> tuple[tuple[Finding, ...], AnalyzerFailure | None]: ...


def run_safely(
    analyzer: Analyzer, method: Literal["exchange", "pair"], view: ExchangeView | PairView
) -> tuple[tuple[Finding, ...], AnalyzerFailure | None]:
    """Call `analyzer.analyze_<method>(view)`; return its findings and None, or no findings and
    the failure. Never raises an `Exception` (a `KeyboardInterrupt`, `SystemExit` or task
    cancellation still propagates)."""
    try:
        if method == "exchange" and isinstance(view, ExchangeView):
            raw = analyzer.analyze_exchange(view)
        elif method == "pair" and isinstance(view, PairView):
            raw = analyzer.analyze_pair(view)
        else:
            raise TypeError(f"method {method!r} does not take a {type(view).__name__}")
        return _findings(raw), None
    except Exception as exc:  # a plugin fails alone
        return (), AnalyzerFailure(_name(analyzer), method, exc)


def _findings(raw: Any) -> tuple[Finding, ...]:
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
        raise PluginOutputError(f"returned a {type(raw).__name__}, not a sequence of Finding")
    findings = []
    for item in raw:
        if not isinstance(item, Finding):
            raise PluginOutputError(f"returned a {type(item).__name__} among its findings")
        value = item.value
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise PluginOutputError(
                f"finding {item.name!r} has value {value!r}, not a finite number"
            )
        if item.severity is not None and item.severity not in SEVERITIES:
            raise PluginOutputError(
                f"finding {item.name!r} has severity {item.severity!r}, not one of "
                f"{', '.join(SEVERITIES)}"
            )
        findings.append(item)
        if len(findings) > MAX_FINDINGS:
            raise PluginOutputError(f"returned more than {MAX_FINDINGS} findings")
    return tuple(findings)


def _name(analyzer: Any) -> str:
    try:
        name = analyzer.name
    except Exception:
        return type(analyzer).__name__
    return name if isinstance(name, str) else type(analyzer).__name__
