"""Analyzer plugins: built-ins, selection by name, a real entry point in a throwaway
distribution, and plugins that fail alone."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from analyzers.agreement import AgreementSpec
from analyzers.answer import Answer
from analyzers.builtin_analyzers import AgreementAnalyzer
from analyzers.errors import PluginError
from analyzers.plugins import (
    BUILTIN_ANALYZERS,
    ENTRY_POINT_GROUP,
    Analyzer,
    available_analyzers,
    default_analyzers,
    load_analyzers,
    run_safely,
)
from analyzers.views import ExchangeView, Finding, PairView

PLUGIN_MODULE = "mirrorgate_test_tone_plugin"


def exchange(text: str, arm: str = "primary", status: str = "ok") -> ExchangeView:
    return ExchangeView(route="bot", target="prod", arm=arm, answer=Answer(text), status=status)


def pair(primary: str, candidate: str) -> PairView:
    return PairView(exchange(primary), exchange(candidate, arm="shadow"), "shadow")


# --- built-ins ----------------------------------------------------------------------------------


def test_default_analyzers_are_the_builtins() -> None:
    analyzers = default_analyzers()
    assert [a.name for a in analyzers] == ["length", "refusal", "agreement"]
    assert all(isinstance(a, Analyzer) for a in analyzers)


def test_builtin_findings() -> None:
    length, refusal, agreement = default_analyzers()
    assert length.analyze_exchange(exchange("150 kg")) == (
        Finding("length", "chars", 6.0, detail="6 characters"),
    )
    assert length.analyze_pair(pair("abcd", "ab"))[0].value == 0.5
    refused = refusal.analyze_exchange(exchange("I can't help with that."))[0]
    assert (refused.label, refused.severity) == ("refusal", "warning")  # counts against a canary
    answered = refusal.analyze_exchange(exchange("Sure."))[0]
    assert (answered.value, answered.severity) == (0.0, None)
    assert length.analyze_exchange(exchange("x"))[0].severity is None  # a measurement
    differs = refusal.analyze_pair(pair("Sure.", "I cannot help with that."))[0]
    assert (differs.value, differs.label) == (1.0, "candidate_only")
    assert agreement.analyze_pair(pair("Max 150 kg.", "max 150 KG"))[0].label == "agree"
    assert agreement.analyze_pair(pair("150", "100"))[0].label == "disagree"
    assert agreement.analyze_exchange(exchange("x")) == ()


def test_builtins_skip_failed_exchanges_and_inapplicable_comparisons() -> None:
    length, refusal, _ = default_analyzers()
    assert length.analyze_exchange(exchange("", status="timeout")) == ()
    assert (
        refusal.analyze_pair(PairView(exchange("x"), exchange("", status="upstream_error"))) == ()
    )
    json_agreement = AgreementAnalyzer(AgreementSpec("json_fields", ("w",)))
    assert json_agreement.analyze_pair(pair("not json", '{"w": 1}')) == ()
    assert length.analyze_pair(pair("", "x")) == ()


# --- selection by name --------------------------------------------------------------------------


def test_load_analyzers_by_name_in_config_order() -> None:
    analyzers = load_analyzers(["agreement", "length"])
    assert [a.name for a in analyzers] == ["agreement", "length"]


def test_unknown_and_repeated_names_are_errors() -> None:
    with pytest.raises(PluginError, match=r"unknown analyzer 'tone'; available: agreement, length"):
        load_analyzers(["tone"])
    with pytest.raises(PluginError, match="listed twice"):
        load_analyzers(["length", "length"])


def test_factories_that_fail_or_build_the_wrong_thing_are_errors() -> None:
    def broken() -> Analyzer:
        raise ImportError("No module named 'acme'")

    class NotAnAnalyzer:
        name = "half"

    available = {"broken": broken, "half": NotAnAnalyzer}
    with pytest.raises(PluginError, match="'broken' could not be loaded: ImportError") as caught:
        load_analyzers(["broken"], available)  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, ImportError)
    with pytest.raises(PluginError, match="lacks name, analyze_exchange or analyze_pair"):
        load_analyzers(["half"], available)  # type: ignore[arg-type]


# --- a real entry point -------------------------------------------------------------------------

PLUGIN_SOURCE = '''
from analyzers import Finding


class ToneAnalyzer:
    """Counts exclamation marks: a third-party analyzer."""

    name = "tone"

    def analyze_exchange(self, exchange):
        return [Finding(self.name, "exclamations", float(exchange.answer.text.count("!")))]

    def analyze_pair(self, pair):
        return []


class Exploding:
    name = "exploding"

    def analyze_exchange(self, exchange):
        raise RuntimeError("plugin bug")

    def analyze_pair(self, pair):
        raise RuntimeError("plugin bug")
'''


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A distribution `mirrorgate-test-tone` on sys.path, found by importlib.metadata."""
    site = tmp_path / "site"
    (site / PLUGIN_MODULE).mkdir(parents=True)
    (site / PLUGIN_MODULE / "__init__.py").write_text(PLUGIN_SOURCE)
    dist_info = site / "mirrorgate_test_tone-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mirrorgate-test-tone\nVersion: 1.0\n"
    )
    (dist_info / "entry_points.txt").write_text(
        textwrap.dedent(f"""\
            [{ENTRY_POINT_GROUP}]
            tone = {PLUGIN_MODULE}:ToneAnalyzer
            exploding = {PLUGIN_MODULE}:Exploding
            missing = {PLUGIN_MODULE}_gone:Analyzer
            length = {PLUGIN_MODULE}:ToneAnalyzer
            """)
    )
    monkeypatch.syspath_prepend(str(site))  # also invalidates the import caches
    yield
    sys.modules.pop(PLUGIN_MODULE, None)
    importlib.invalidate_caches()


@pytest.mark.usefixtures("installed_plugin")
def test_a_plugin_installed_through_an_entry_point_is_loaded_by_name() -> None:
    found = entry_points(group=ENTRY_POINT_GROUP)
    assert {"tone", "exploding", "missing", "length"} <= set(found.names)
    available = available_analyzers(found)
    assert PLUGIN_MODULE not in sys.modules  # nothing is imported until selected
    [tone] = load_analyzers(["tone"], available)
    assert tone.name == "tone"
    assert tone.analyze_exchange(exchange("Great!!")) == [Finding("tone", "exclamations", 2.0)]
    # A broken entry point fails when selected, naming it; an unselected one costs nothing.
    with pytest.raises(PluginError, match="'missing' could not be loaded: ModuleNotFoundError"):
        load_analyzers(["missing"], available)
    # A name offered twice has no silent winner.
    with pytest.raises(PluginError, match="'length' is offered more than once"):
        load_analyzers(["length"], available)
    assert "refusal" in available  # the built-ins are still there


@pytest.mark.usefixtures("installed_plugin")
def test_a_plugin_that_raises_is_isolated() -> None:
    available = available_analyzers(entry_points(group=ENTRY_POINT_GROUP))
    exploding, tone, length = load_analyzers(["exploding", "tone", "refusal"], available)
    view = exchange("Hello!")
    results = [run_safely(a, "exchange", view) for a in (exploding, tone, length)]
    findings, failure = results[0]
    assert findings == ()
    assert failure is not None
    assert (failure.analyzer, failure.method) == ("exploding", "exchange")
    assert failure.message == "RuntimeError: plugin bug"
    assert isinstance(failure.exception, RuntimeError)
    assert results[1] == ((Finding("tone", "exclamations", 1.0),), None)
    assert results[2][1] is None
    assert run_safely(exploding, "pair", pair("a", "b"))[1] is not None


# --- isolation of bad output --------------------------------------------------------------------


class Returns:
    """An analyzer returning whatever it is given."""

    def __init__(self, value: object) -> None:
        self.value = value
        self.name = "returns"

    def analyze_exchange(self, exchange: ExchangeView) -> Sequence[Finding]:
        return self.value  # type: ignore[return-value]

    def analyze_pair(self, pair: PairView) -> Sequence[Finding]:
        return self.value  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "returned a NoneType, not a sequence of Finding"),
        ("finding", "returned a str, not a sequence of Finding"),
        ([{"name": "x"}], "returned a dict among its findings"),
        ([Finding("returns", "x", float("nan"))], "finding 'x' has value nan, not a finite number"),
        ([Finding("returns", "x", True)], "finding 'x' has value True, not a finite number"),
        ([Finding("returns", "x", 1.0)] * 1_001, "returned more than 1000 findings"),
        (
            [Finding("returns", "x", severity="fatal")],  # type: ignore[arg-type]
            "finding 'x' has severity 'fatal', not one of info, warning, critical",
        ),
    ],
    ids=["none", "str", "dicts", "nan", "bool", "too-many", "severity"],
)
def test_output_that_is_not_findings_is_a_failure(value: object, message: str) -> None:
    findings, failure = run_safely(Returns(value), "exchange", exchange("x"))
    assert findings == ()
    assert failure is not None
    assert failure.message == f"PluginOutputError: {message}"


def test_generators_and_tuples_of_findings_are_accepted() -> None:
    good = Returns(Finding("returns", "x", i) for i in range(3))
    findings, failure = run_safely(good, "pair", pair("a", "b"))
    assert failure is None
    assert [f.value for f in findings] == [0, 1, 2]


def test_a_plugin_whose_name_fails_is_named_by_its_class() -> None:
    class Nameless:
        @property
        def name(self) -> str:
            raise AttributeError("no name")

        def analyze_exchange(self, exchange: ExchangeView) -> Sequence[Finding]:
            raise ValueError("bad")

        def analyze_pair(self, pair: PairView) -> Sequence[Finding]:
            return ()

    _, failure = run_safely(Nameless(), "exchange", exchange("x"))
    assert failure is not None
    assert failure.analyzer == "Nameless"


def test_interrupts_are_not_swallowed() -> None:
    class Interrupting(Returns):
        def analyze_exchange(self, exchange: ExchangeView) -> Sequence[Finding]:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_safely(Interrupting(()), "exchange", exchange("x"))


def test_builtin_registry_is_read_only() -> None:
    with pytest.raises(TypeError):
        BUILTIN_ANALYZERS["x"] = AgreementAnalyzer  # type: ignore[index]
