"""What every rule check shares: the `Check` protocol, its `CheckResult`, the `CheckLimits`
that bound its work, and `BaseCheck`, which turns any crash into an `error` result.

Results mean:

- `pass`  — the answer satisfies the rule;
- `fail`  — the answer breaks the rule, or is unusable for it (empty, not valid UTF-8, not JSON
  where JSON is needed); the reason says which;
- `error` — the check could not decide: it crashed (the reason names the exception), or the answer
  is beyond a documented limit and the part that was looked at does not settle it.

A check never raises from `run` and never reports `pass` for something it did not verify.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, runtime_checkable

from analyzers.answer import Answer
from analyzers.errors import SpecError
from analyzers.refusal import DEFAULT_REFUSAL_WINDOW

Outcome = Literal["pass", "fail", "error"]
"""A check's verdict on one answer (the `result` label of `mirrorgate_check_results_total`)."""

MAX_REASON_CHARS = 300
"""Reasons are cut to this many characters (they are stored per exchange)."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's verdict on one answer."""

    name: str
    """The check's configured name (the `check` metric label)."""
    result: Outcome
    """pass, fail or error (see the module docstring)."""
    reason: str
    """Why, in one line of at most `MAX_REASON_CHARS` characters; for `error`, the exception type
    and message. Quotes answer values only when `CheckLimits.quote_values` is on."""


@dataclass(frozen=True, slots=True)
class CheckLimits:
    """Bounds on what checks do with an answer; the same for every check compiled with them."""

    regex_max_chars: int = 16_384
    """`regex`, `not_regex` and `json_path … regex` look at this many leading characters of the
    text (or of the selected string); see `analyzers.patterns` for why."""
    refusal_window_chars: int = DEFAULT_REFUSAL_WINDOW
    """`refusal` looks for its phrases in this many leading characters."""
    quote_values: bool = True
    """Whether reasons may quote short answer values (`$.max_weight is 100`). Turn it off when
    answers must not be stored (`store.bodies: none`): reasons then give only types and sizes."""
    quote_max_chars: int = 40
    """Longest quoted value; longer ones are cut with an ellipsis."""

    def __post_init__(self) -> None:
        for key in ("regex_max_chars", "refusal_window_chars", "quote_max_chars"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(key, f"must be a whole number >= 1, not {value!r}")


DEFAULT_LIMITS = CheckLimits()


@runtime_checkable
class Check(Protocol):
    """A compiled rule check. `run` is pure and thread-safe, and never raises."""

    @property
    def name(self) -> str:
        """The configured name, unique within its rule version."""
        ...

    @property
    def type(self) -> str:
        """The configured type (`json`, `regex`, …)."""
        ...

    def run(self, answer: Answer) -> CheckResult:
        """Judge one answer. Any exception inside becomes an `error` result."""
        ...


class BaseCheck:
    """Gives subclasses a never-raising `run`: they implement `evaluate`. Subclasses are frozen
    dataclasses with a `name` field and a `type` class attribute."""

    name: str
    type: ClassVar[str]

    def run(self, answer: Answer) -> CheckResult:
        try:
            outcome, reason = self.evaluate(answer)
        except Exception as exc:  # a crash is an error, never a pass
            return CheckResult(self.name, "error", _cut(f"check crashed: {exception_text(exc)}"))
        return CheckResult(self.name, outcome, _cut(reason))

    def evaluate(self, answer: Answer) -> tuple[Outcome, str]:
        """The verdict and its reason; may raise (run turns that into `error`)."""
        raise NotImplementedError


class TextCheck(BaseCheck):
    """A check on the answer's text: empty or non-UTF-8 text fails before `judge` sees it."""

    def evaluate(self, answer: Answer) -> tuple[Outcome, str]:
        problem = answer.text_problem
        if problem is not None:
            calls = len(answer.tool_calls)
            suffix = f" ({calls} tool call{'s' if calls != 1 else ''}, no text)" if calls else ""
            return "fail", problem + suffix
        return self.judge(answer.text)

    def judge(self, text: str) -> tuple[Outcome, str]:
        """The verdict on non-empty, valid text."""
        raise NotImplementedError


def exception_text(exc: BaseException) -> str:
    """`Type: message` for a reason, even when the message itself cannot be rendered."""
    try:
        message = str(exc)
    except Exception:  # an exception whose __str__ fails still gets named
        message = "<unprintable>"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _cut(reason: str) -> str:
    """One line, valid UTF-8 (lone surrogates escaped), at most MAX_REASON_CHARS."""
    reason = " ".join(reason[: MAX_REASON_CHARS * 4].split())
    reason = reason.encode("utf-8", "backslashreplace").decode("utf-8")
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 1] + "…"
