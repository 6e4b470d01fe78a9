"""The analyzers that ship with mirrorgate (`default_analyzers()` lists them):

- `length`    — exchange: the answer's length in characters; pair: candidate length / primary
  length (a candidate that rambles or truncates shows here first);
- `refusal`   — exchange: 1 when the answer is a refusal (`analyzers.refusal`), else 0 (a refusal
  has severity `warning`: it counts toward a canary's `findings` metric); pair: whether the two
  answers differ in refusing;
- `agreement` — pair: 1 when the answers agree under an `AgreementSpec` (normalised text by
  default), 0 when not; nothing when the comparison does not apply.

Each skips exchanges that did not end well (status other than ok): there is no answer to judge.
"""

from __future__ import annotations

from collections.abc import Sequence

from analyzers.agreement import AgreementSpec, agree
from analyzers.refusal import find_refusal
from analyzers.views import ExchangeView, Finding, PairView


def _judgeable(pair: PairView) -> bool:
    return pair.primary.ok and pair.candidate.ok


class LengthAnalyzer:
    """Answer length in characters, and the candidate/primary length ratio."""

    name = "length"

    def analyze_exchange(self, exchange: ExchangeView) -> Sequence[Finding]:
        if not exchange.ok:
            return ()
        chars = len(exchange.answer.text)
        return (Finding(self.name, "chars", float(chars), detail=f"{chars} characters"),)

    def analyze_pair(self, pair: PairView) -> Sequence[Finding]:
        if not _judgeable(pair):
            return ()
        primary, candidate = len(pair.primary.answer.text), len(pair.candidate.answer.text)
        if primary == 0:
            return ()
        ratio = candidate / primary
        return (Finding(self.name, "ratio", ratio, detail=f"{candidate} / {primary} characters"),)


class RefusalAnalyzer:
    """Whether an answer is a refusal, and whether a pair differs in refusing."""

    name = "refusal"

    def analyze_exchange(self, exchange: ExchangeView) -> Sequence[Finding]:
        if not exchange.ok:
            return ()
        phrase = find_refusal(exchange.answer.text)
        if phrase is None:
            return (Finding(self.name, "refused", 0.0, "answer"),)
        detail = f"phrase {phrase!r}"
        return (Finding(self.name, "refused", 1.0, "refusal", detail, severity="warning"),)

    def analyze_pair(self, pair: PairView) -> Sequence[Finding]:
        if not _judgeable(pair):
            return ()
        primary = find_refusal(pair.primary.answer.text) is not None
        candidate = find_refusal(pair.candidate.answer.text) is not None
        label = {
            (False, False): "neither",
            (True, True): "both",
            (False, True): "candidate_only",
            (True, False): "primary_only",
        }[(primary, candidate)]
        return (Finding(self.name, "refusal_differs", float(primary != candidate), label),)


class AgreementAnalyzer:
    """Whether the candidate agrees with the primary (`analyzers.agreement`)."""

    name = "agreement"

    def __init__(self, spec: AgreementSpec | None = None) -> None:
        self.spec = spec or AgreementSpec()

    def analyze_exchange(self, exchange: ExchangeView) -> Sequence[Finding]:
        return ()

    def analyze_pair(self, pair: PairView) -> Sequence[Finding]:
        if not _judgeable(pair):
            return ()
        agreed = agree(pair.primary.answer.text, pair.candidate.answer.text, self.spec)
        if agreed is None:
            return ()
        label = "agree" if agreed else "disagree"
        return (Finding(self.name, "agree", float(agreed), label, detail=f"mode {self.spec.mode}"),)
