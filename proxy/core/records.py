"""The exchange record: one upstream call, as mirrorgate saw it.

Every arm (primary, canary, fallback, shadow, judge, probe) produces one `ExchangeRecord` per
upstream call.
Records are built once, when the exchange ends, and never change afterwards: the recorder, the
metrics, the analyzers and the store all read the same frozen object.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime


class Arm(enum.StrEnum):
    """Which part of a route served (or shadowed) the request."""

    PRIMARY = "primary"
    CANARY = "canary"
    FALLBACK = "fallback"
    SHADOW = "shadow"
    JUDGE = "judge"
    """A call of the LLM judge scoring a shadow pair: never client traffic, only its cost counts."""
    PROBE = "probe"
    """A rule-flip probe: a live request re-sent with its rule's value flipped, off the client
    path; never client traffic."""
    EXPERIMENT = "experiment"
    """An arm of a running A/B experiment (`routes.<name>.experiment`): which one is the
    record's `experiment_arm`."""


class Status(enum.StrEnum):
    """How an exchange ended. Everything but `OK` is an error of some kind."""

    OK = "ok"
    """The upstream answered 2xx and the whole answer reached the client."""
    UPSTREAM_ERROR = "upstream_error"
    """The upstream answered with an HTTP error status (its body was forwarded)."""
    CONNECT_ERROR = "connect_error"
    """The upstream could not be reached, or reset the connection."""
    TIMEOUT = "timeout"
    """The upstream did not answer (or stalled mid-stream) within the model's `timeout_s`, or
    a non-streamed answer took longer than its `total_timeout_s`."""
    INVALID_RESPONSE = "invalid_response"
    """The upstream answered 2xx with a body that is not the wire format (garbage, bad chunk)."""
    CLIENT_DISCONNECTED = "client_disconnected"
    """The client went away before the answer was complete; the upstream call was cancelled."""
    SHUTDOWN = "shutdown"
    """The gateway was stopping (SIGTERM, SIGINT) and the exchange outlasted
    `server.drain_timeout_s`: the upstream call was cancelled and the client, if still there,
    got the provider's error event (streams) or a 503 (non-streams)."""


CUT_SHORT = frozenset({Status.CLIENT_DISCONNECTED, Status.SHUTDOWN})
"""Exchanges ended by someone else than the model: the client leaving, the gateway stopping.
Counted in `mirrorgate_exchanges_cut_total`; neither requests nor errors of the arm they were on."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts for one exchange, split the way providers bill them."""

    input_tokens: int = 0
    """Prompt tokens billed at the full input price (cached tokens excluded)."""
    output_tokens: int = 0
    """Completion tokens, reasoning tokens included (as OpenAI reports them)."""
    cached_input_tokens: int = 0
    """Prompt tokens served from the provider's prompt cache (cheaper)."""
    cache_write_tokens: int = 0
    """Anthropic prompt-cache writes (billed at the input price unless priced separately)."""
    reasoning_tokens: int = 0
    """The part of `output_tokens` spent on hidden reasoning, where the provider says so."""
    estimated: bool = False
    """True when the upstream did not report usage and mirrorgate counted tokens itself."""


@dataclass(frozen=True, slots=True)
class ExchangeRecord:
    """One upstream call and its outcome. Times are UTC; durations are seconds."""

    request_id: str
    """The id mirrorgate gave the client request (`x-mirrorgate-request-id`); shared by all arms."""
    route: str
    """The route name from config (what the client put in `model`)."""
    target: str
    """The model name from config (`models.<target>`) that served this call."""
    upstream_model: str
    """The model name sent upstream (`models.<target>.model`)."""
    arm: Arm
    """primary, canary, fallback, shadow or judge."""
    endpoint: str
    """The wire endpoint: chat.completions, completions, embeddings, responses or messages."""
    provider: str
    """The wire format spoken upstream: openai or anthropic."""
    streamed: bool
    """True when the answer was streamed (SSE)."""
    started_at: datetime
    """When mirrorgate received the client request."""
    duration_s: float
    """From receiving the request to the last byte of the answer (or the failure)."""
    ttft_s: float | None
    """Time to first token: from receiving the request to the first content chunk (streams only)."""
    overhead_s: float
    """Time spent in mirrorgate itself: the duration minus the time waiting on upstreams."""
    status: Status
    """How the exchange ended."""
    http_status: int
    """The HTTP status the client received (or would have, for shadows); 0 if none was sent."""
    usage: Usage = field(default_factory=Usage)
    """Token counts, from the upstream's usage report or estimated."""
    cost_usd: float = 0.0
    """Price of the call from the model's price table (0 when the model has no price)."""
    error_class: str | None = None
    """A short machine-readable cause for a failed exchange, e.g. `ReadTimeout`, `http_503`."""
    rule: str | None = None
    """The rule set governing this request (rules issue), if any."""
    rule_version: str | None = None
    """The version of that rule set this request carried."""
    pair_id: str | None = None
    """Links a shadow record to its primary, and a judge call to the pair it scored."""
    tags: tuple[str, ...] = ()
    """Free labels such as `replay`."""
    request_body: str | None = None
    """The request as sent upstream, subject to `store.bodies` (None when not kept)."""
    response_body: str | None = None
    """The answer as received (non-streamed answers only), subject to `store.bodies`."""
    response_text: str | None = None
    """The plain answer text (message content), for analyzers; not stored when bodies is `none`."""
    operation_id: str | None = None
    """The business operation the request is part of (`x-mirrorgate-operation`, or the route's
    `operation_field`), on every arm's record of the request, judge calls included; None when
    the request named none."""
    experiment_arm: str | None = None
    """The experiment arm (a config name) the request was assigned to, on every client-path call
    it made (its fallback included); None outside an experiment."""
    experiment_unit: str | None = None
    """The experiment's randomisation unit, as a keyed hash of the unit key (never the raw user
    or operation id); None outside an experiment."""
    sticky_unit: str | None = None
    """The request's sticky unit (`proxy.core.sticky_unit`: a keyed hash of the route's canary
    `sticky` key, never the raw user or tenant id), on every record made for the request (primary,
    canary, fallback, its shadows and probes); the rollout judge's variances are computed over
    it. None when the route's canary has no sticky key, the request lacks it, or it ran in an
    experiment (whose unit is `experiment_unit`)."""

    def retimed(self, duration_s: float, overhead_s: float) -> ExchangeRecord:
        """This record with another `duration_s` and `overhead_s`: what
        `dataclasses.replace(self, duration_s=..., overhead_s=...)` makes, at half its cost (no
        per-field introspection). The client path retimes every answer's record once its last
        byte is out."""
        return self._copy(duration_s=duration_s, overhead_s=overhead_s)

    def with_bodies(
        self, request_body: str | None, response_body: str | None, response_text: str | None
    ) -> ExchangeRecord:
        """This record with other bodies (the store's `store.bodies` policy), as cheaply as
        `retimed`."""
        return self._copy(
            request_body=request_body, response_body=response_body, response_text=response_text
        )

    def _copy(self, **changes: object) -> ExchangeRecord:
        """`dataclasses.replace(self, **changes)` without its per-field introspection."""
        new = object.__new__(ExchangeRecord)
        for name in _EXCHANGE_FIELDS:
            _set(new, name, getattr(self, name))
        for name, value in changes.items():
            _set(new, name, value)
        return new


_EXCHANGE_FIELDS = tuple(f.name for f in fields(ExchangeRecord))
_set = object.__setattr__  # how a frozen dataclass's own __init__ sets its fields


@dataclass(frozen=True, slots=True)
class PairRecord:
    """A candidate's answer compared with the primary's answer to the same request."""

    pair_id: str
    """Shared with the candidate's `ExchangeRecord.pair_id`."""
    kind: str
    """`shadow` (live mirroring), `noise` (the primary asked twice), `replay` (recorded traffic
    sent again offline) or `eval` (an evaluation-set item; `primary_target` is then `expect`)."""
    request_id: str
    """The client request both answers belong to (for replays: the recorded request's id)."""
    route: str
    primary_target: str
    candidate_target: str
    created_at: datetime
    primary_status: str
    candidate_status: str
    exact_equal: bool
    normalized_equal: bool
    json_equal: bool | None
    """None when either answer is not JSON."""
    json_fields: tuple[tuple[str, bool], ...] = ()
    """Per top-level JSON key: equal in both answers."""
    length_ratio: float | None = None
    """len(candidate answer) / len(primary answer)."""
    latency_delta_s: float | None = None
    """Candidate duration minus primary duration."""
    ttft_delta_s: float | None = None
    """Candidate time to first token minus the primary's (streams only)."""
    cost_delta_usd: float | None = None
    """Candidate cost minus primary cost."""
    agreement: str | None = None
    """The verdict under the route's agreement settings when the pair was recorded (an
    `Agreement` value: `agree`, `disagree`, `not_applicable`); None when none was made
    (pairs stored before schema version 9; evaluation sets). Read it with `pair_agreed`."""
    sticky_unit: str | None = None
    """The client request's `sticky_unit` (the rollout judge counts the pair for it); None when
    it had none, and for replays and evaluation sets."""


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    """A user's correction or rating of one answer, joined to the exchange that produced it."""

    request_id: str
    """The `x-mirrorgate-request-id` of the answer."""
    kind: str
    """`correction`, `score` or `label`: feedback is idempotent per (request id, kind)."""
    route: str
    target: str
    arm: Arm
    """The arm that served the answer the user saw."""
    created_at: datetime
    corrected: bool = False
    """The user corrected the answer (with or without saying how)."""
    correction: str | None = None
    """What the answer should have been, when the user said."""
    score: int | None = None
    """A rating from 1 to 5."""
    label: str | None = None
    """A free label such as `wrong-policy` or `rude`."""
    rule: str | None = None
    rule_version: str | None = None
    caller: str | None = None
    """Who sent it, as a short non-secret id (`proxy.core.caller_id`: `app:…`, `app:…/user:…` or
    `addr:…`); the judge counts at most a few corrections per caller. None: stored before
    callers were."""


OUTCOME_KINDS = ("completed", "adopted", "corrected", "value", "labels")
"""What an outcome says about a business operation; each is stored once per operation."""


@dataclass(frozen=True, slots=True)
class OutcomeRecord:
    """What happened to one business operation, as its application said (`POST /v1/outcomes`):
    one record per kind, idempotent per (operation id, kind)."""

    operation_id: str
    """The id the operation's requests carried (`x-mirrorgate-operation`)."""
    kind: str
    """One of `OUTCOME_KINDS`."""
    caller: str
    """Who said it (`proxy.core.caller_id`: `app:…`, `app:…/user:…` or `addr:…`)."""
    created_at: datetime
    route: str | None = None
    """The route of the operation's first client call when the outcome arrived."""
    flag: bool | None = None
    """`completed`, `adopted`, `corrected`: whether it was."""
    value: float | None = None
    """`value`: a business value (revenue, minutes saved, …), finite."""
    labels: tuple[tuple[str, str], ...] = ()
    """`labels`: free string labels, sorted by name."""


@dataclass(frozen=True, slots=True)
class CheckRecord:
    """One rule check's verdict on one answer."""

    request_id: str
    route: str
    target: str
    arm: Arm
    rule: str
    rule_version: str
    check: str
    result: str
    """`pass`, `fail` or `error` (a check that crashed is `error`, never `pass`)."""
    reason: str
    created_at: datetime
    pair_id: str | None = None
    sticky_unit: str | None = None
    """The checked exchange's `sticky_unit` (the rollout judge counts each verdict for its
    request's unit); None when it had none."""


@dataclass(frozen=True, slots=True)
class FindingRecord:
    """One analyzer plugin's scored observation about an answer (or a pair of answers)."""

    request_id: str
    route: str
    target: str
    """The answer's model (for a pair: the candidate's)."""
    arm: Arm
    analyzer: str
    name: str
    created_at: datetime
    value: float | None = None
    label: str | None = None
    detail: str = ""
    pair_id: str | None = None
    """Set when the finding is about a pair (the candidate compared with the primary)."""
    severity: str | None = None
    """`info`, `warning` or `critical` (`analyzers.SEVERITIES`); None for a plain measurement."""


JUDGE_ANALYZER = "judge"
"""The `analyzer` of the LLM judge's findings on a shadow pair (`candidate_score`,
`primary_score`, `score_delta`, `position_bias`)."""
JUDGE_SCORE_DELTA = "score_delta"
"""The judge's finding read by the rollout judge: candidate minus primary score, both orders
averaged, on the 1-10 scale."""


PROBE_RESULTS = ("followed", "stuck", "other")
"""How a probe's answer is scored: it follows the flipped value, keeps the original one (the old
rule), or neither. A probe call that failed is not scored (its exchange says why)."""


@dataclass(frozen=True, slots=True)
class ProbeRecord:
    """One rule-flip probe: a live request re-sent to one target with the rule's value flipped,
    and how the answer was scored. Its call is an `ExchangeRecord` of arm `probe` whose `pair_id`
    is this record's `probe_id`."""

    probe_id: str
    """Shared with the probe call's `ExchangeRecord.pair_id`."""
    request_id: str
    """The live request the probe was made from."""
    route: str
    target: str
    """The model probed."""
    rule: str
    rule_version: str
    """The version the live request carried (the one whose value was flipped)."""
    created_at: datetime
    original_value: str
    """The value the live request's system prompt held."""
    asked_value: str
    """The value the probe put in its place."""
    result: str
    """`followed`, `stuck` or `other` (`PROBE_RESULTS`)."""
    answered_value: str | None = None
    """The value the answer stated, where it could be read (at most 200 characters)."""
    cost_usd: float = 0.0


StoredRecord = ExchangeRecord | PairRecord | CheckRecord | FindingRecord | ProbeRecord
"""Every kind of record the recorder writes."""

RecordSink = Callable[[StoredRecord], object]
"""Where a part hands its records: the recorder's `submit`, the recent-answers index, a test's
list. A sink never blocks and may drop (counting what it drops)."""
