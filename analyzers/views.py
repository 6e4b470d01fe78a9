"""What an analyzer is shown — one exchange, or a pair of answers to the same request — and what
it gives back: findings.

Views are frozen and hold plain values only (no records, no sessions, no clients), so an
analyzer can neither change what the proxy recorded nor reach anything outside its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from analyzers.answer import Answer

Severity = Literal["info", "warning", "critical"]
"""How bad a finding is, for the rollout judge's `findings` metric: `info` (a measurement, worth
knowing), `warning` (a problem in this answer, e.g. a refusal) or `critical` (an answer that must
not reach users). A finding without a severity is a measurement only and never counts."""

SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")
"""Every severity, least severe first."""


def at_or_above(severity: Severity) -> tuple[Severity, ...]:
    """The severities that count when findings at `severity` or worse are counted."""
    return SEVERITIES[SEVERITIES.index(severity) :]


PairKind = Literal["shadow", "noise", "replay"]
"""`shadow`: a candidate mirrored live; `noise`: the primary asked twice (the noise floor);
`replay`: a candidate asked offline with a recorded request."""


@dataclass(frozen=True, slots=True)
class ExchangeView:
    """One upstream call and its answer, as an analyzer sees it."""

    route: str
    """The route name from config."""
    target: str
    """The model name from config that answered."""
    arm: str
    """primary, canary, fallback or shadow."""
    answer: Answer
    """The answer's text and tool calls (empty for a failed exchange)."""
    endpoint: str = "chat.completions"
    """chat.completions, completions, responses or messages."""
    rule: str | None = None
    """The rule set governing the request, if any."""
    rule_version: str | None = None
    """That rule set's version for this request."""
    system_prompt: str = ""
    """The request's system prompt (see `analyzers.rule_version.extract_system_prompt`)."""
    request_text: str = ""
    """The rest of the request as text (the last user message, or the prompt)."""
    status: str = "ok"
    """How the exchange ended: ok, upstream_error, connect_error, timeout, invalid_response,
    client_disconnected."""
    http_status: int = 200
    """The HTTP status the client received (or would have, for shadows); 0 if none."""
    duration_s: float = 0.0
    """From receiving the request to the last byte of the answer."""
    ttft_s: float | None = None
    """Time to first token (streams only)."""
    cost_usd: float = 0.0
    """Price of the call (0 when the model has no price)."""
    input_tokens: int = 0
    """Prompt tokens, cached ones included."""
    output_tokens: int = 0
    """Completion tokens, reasoning included."""

    @property
    def ok(self) -> bool:
        """True when the exchange ended well and its answer can be judged."""
        return self.status == "ok"


@dataclass(frozen=True, slots=True)
class PairView:
    """Two answers to the same request: the primary's and a candidate's (for `noise` pairs, the
    primary's second answer)."""

    primary: ExchangeView
    candidate: ExchangeView
    kind: PairKind = "shadow"


@dataclass(frozen=True, slots=True)
class Finding:
    """One scored observation about an exchange or a pair. Stored per exchange (or pair) and
    available to the rollout judge and the report by (analyzer, name)."""

    analyzer: str
    """The analyzer's name (as selected in config)."""
    name: str
    """What was measured, unique within the analyzer (`chars`, `refused`, `agree`)."""
    value: float | None = None
    """A finite number, when the finding is a measurement or a 0/1 flag."""
    label: str | None = None
    """A short category, when the finding is one (`refusal`, `agree`)."""
    detail: str = ""
    """One line for humans; must not quote the answer when bodies are not stored."""
    severity: Severity | None = None
    """How bad the observation is (`SEVERITIES`); None for a plain measurement. An answer with a
    finding at or above a canary's `analysis.findings_severity` counts against it."""
