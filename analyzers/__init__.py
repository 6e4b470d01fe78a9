"""The analyzer plugin API: everything a third-party analyzer imports, and nothing else.

An analyzer is any object that satisfies `Analyzer`: a `name` and two pure methods.
`analyze_exchange` is shown one finished upstream call as an `ExchangeView`, `analyze_pair` two
answers to the same request as a `PairView`; each view holds the model's `Answer` (its text and
its `ToolCall`s) and plain, frozen values only. Both return a sequence of `Finding`s, possibly
empty. They must not do I/O, read the clock or share mutable state, and they run for every
exchange and pair, so they must be fast. An analyzer may raise: mirrorgate calls it through
`run_safely`, which turns an exception (or output that is not findings) into an
`AnalyzerFailure` for that analyzer alone; plugin tests call it the same way.

A verdict of the pass/fail/error kind is a `Check`: subclass `BaseCheck`, implement `evaluate`
to return an `Outcome` and a reason, and `run` gives a `CheckResult` that never raises (a crash
is an `error`, never a `pass`). An analyzer can run such checks and report their results as
findings.

Third-party analyzers are found through the entry-point group `ENTRY_POINT_GROUP` (each entry a
zero-argument callable, usually the class) and built only when the configuration names them.

The other modules of this package are mirrorgate's own scoring code; their names may change
without notice. docs/checks.md documents each name exported here, with a complete plugin.
"""

from __future__ import annotations

from .answer import Answer, ToolCall
from .checkbase import BaseCheck, Check, CheckResult, Outcome
from .plugins import ENTRY_POINT_GROUP, Analyzer, AnalyzerFailure, run_safely
from .views import SEVERITIES, ExchangeView, Finding, PairView, Severity

__all__ = [
    "ENTRY_POINT_GROUP",
    "SEVERITIES",
    "Analyzer",
    "AnalyzerFailure",
    "Answer",
    "BaseCheck",
    "Check",
    "CheckResult",
    "ExchangeView",
    "Finding",
    "Outcome",
    "PairView",
    "Severity",
    "ToolCall",
    "run_safely",
]
