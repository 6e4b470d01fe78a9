"""One unit of offline work: a request to send to one candidate model, and what to compare with.

Replays (from the store or a JSONL file) and evaluation sets both become `ReplayJob`s; the runner
sends them without knowing where they came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core import ENDPOINTS, Endpoint

ENDPOINTS_BY_NAME: dict[str, Endpoint] = {e.name: e for e in ENDPOINTS.values()}
"""Endpoints by the name records carry (`chat.completions`, `messages`, ...)."""


@dataclass(frozen=True, slots=True)
class Reference:
    """The answer a candidate's answer is compared with."""

    target: str
    """Who gave it: the recorded model's config name, `recorded` (a file names none) or
    `expect` (an evaluation item)."""
    text: str
    """The answer text."""
    status: str = "ok"
    """How the recorded exchange ended (`ok` for files and evaluation sets)."""
    duration_s: float | None = None
    """The recorded exchange's duration, for the latency delta (None: unknown)."""
    ttft_s: float | None = None
    """The recorded time to first token (streams only)."""
    cost_usd: float | None = None
    """The recorded cost, for the cost delta (None: unknown)."""
    masked: bool = False
    """The text comes from the store and may carry `[REDACTED:…]` marks: compare both answers
    redacted, so that redaction alone never counts as a disagreement."""


@dataclass(frozen=True, slots=True)
class ReplayJob:
    """Send `body` to `candidate` and compare the answer with `reference`."""

    request_id: str
    """The recorded request's id (or the evaluation item's id); shared with the pair."""
    route: str
    """The recorded route, `file:<stem>` or `eval:<stem>`; stored on the candidate's record."""
    candidate: str
    """A model name from config (`models.<candidate>`)."""
    endpoint: Endpoint
    body: Mapping[str, Any]
    """The request body; copied for the call, which rewrites `model`."""
    reference: Reference | None
    """None: nothing to compare with (a file line without `response`); no pair is stored."""
    pair_kind: str
    """`replay` or `eval`: the `PairRecord.kind` stored with the answer."""
    tags: tuple[str, ...]
    """Tags of the candidate's record: `("replay",)` or `("eval", <set name>)`."""
    rule: str | None = None
    rule_version: str | None = None

    @property
    def stream(self) -> bool:
        """The request asks for a streamed answer (as the recorded one did)."""
        return self.body.get("stream") is True
