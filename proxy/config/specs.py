"""The configuration's sections as frozen pydantic specs: what each key means and its own limits.

Each class is one section (`server`, `store`, `models.<name>`, `routes.<name>`, `rules.<name>`,
`alerts`, `telemetry`, `judge`); unknown keys are errors and a loaded config cannot be changed.
A spec validates its own fields only; what depends on other sections (a route naming a model, a
canary speaking the primary's wire format) is checked in `checks.py`, and `loader.py` turns YAML
into these specs.
"""

from __future__ import annotations

import itertools
import re
import string
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from analyzers.agreement import AgreementSpec
from analyzers.verdicts import Thresholds, refuse_removed
from analyzers.views import Severity

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class Spec(BaseModel):
    """Base for every config section: frozen, and unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LimitsSpec(Spec):
    """What one peer may push at the gateway: client connections, and upstream answers.

    Client side, a connection that breaks a limit is answered in the caller's wire format where
    HTTP still allows (408, 431, 503) and closed; upstream side, the call fails (502, or an error
    event at the end of a stream) and is recorded. Defaults are those of a gateway on the open
    internet (Envoy and nginx use the same orders of magnitude)."""

    header_timeout_s: float = Field(10.0, gt=0, le=300)
    """Longest time from a connection's opening (or a keep-alive request's first byte) to the
    end of its request headers; beyond, 408 and closed (closed without an answer when not a
    byte came)."""
    body_timeout_s: float = Field(30.0, gt=0, le=600)
    """Longest gap between two pieces of a request body; beyond, 408 and closed."""
    body_total_timeout_s: float = Field(300.0, gt=0, le=3600)
    """Longest time to receive a whole request body after its headers; beyond, 408 and closed."""
    keep_alive_s: int = Field(75, ge=1, le=3600)
    """An idle keep-alive connection (no request in progress) is closed after this long."""
    max_header_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024)
    """Largest request line plus headers of one request; beyond, 431 and closed."""
    max_headers: int = Field(100, ge=8, le=10_000)
    """Most header lines in one request; beyond, 431 and closed."""
    max_connections: int = Field(10_000, ge=1, le=1_000_000)
    """Client connections open at once; a connection beyond is answered 503 (after its headers,
    within `header_timeout_s`) and closed. Keep it under the process's open-file limit."""
    max_response_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    """Largest non-streamed upstream answer (error answers too); beyond, the call fails with 502
    and is recorded as `invalid_response` / `UpstreamBodyTooLarge`, the body not kept."""
    max_stream_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    """Largest streamed upstream answer; beyond, the stream is ended for the client with the
    provider's error event and recorded as `invalid_response` / `UpstreamStreamTooLarge`."""
    max_stream_duration_s: float = Field(3600.0, gt=0)
    """Longest streamed upstream answer, from its response head; beyond, ended like
    `max_stream_bytes` (`UpstreamStreamTooLong`)."""
    max_upstream_header_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024)
    """Largest upstream response head (status line and headers); beyond, the call fails (502,
    `UpstreamHeadersTooLarge`)."""
    max_upstream_headers: int = Field(100, ge=8, le=10_000)
    """Most header lines in an upstream response head; beyond, as `max_upstream_header_bytes`."""

    @model_validator(mode="after")
    def _gap_within_total(self) -> LimitsSpec:
        if self.body_timeout_s > self.body_total_timeout_s:
            raise ValueError(
                f"body_timeout_s ({self.body_timeout_s:g}) must not exceed "
                f"body_total_timeout_s ({self.body_total_timeout_s:g})"
            )
        return self


class ServerSpec(Spec):
    host: str = "127.0.0.1"
    """Address to listen on. Anything but loopback requires the admin token to be set."""
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    """Largest request body accepted; larger bodies get 413 before they are read."""
    admin_token_env: str = "MIRRORGATE_ADMIN_TOKEN"
    """Environment variable holding the bearer token for /admin and /hooks."""
    drain_timeout_s: float = Field(10.0, gt=0)
    """On SIGTERM (or SIGINT): how long in-flight requests may still finish (the rest are cut
    and recorded as `shutdown`); then as long again for the recorder queue."""
    feedback_tokens_env: str = "MIRRORGATE_FEEDBACK_TOKENS"
    """Environment variable holding the application tokens of `POST /v1/feedback`, comma
    separated (`Authorization: Bearer <token>`); each token is one caller. Unset or empty: no
    application tokens (signed per-request tokens still work)."""
    reviewer_tokens_env: str = "MIRRORGATE_REVIEWER_TOKENS"
    """Environment variable holding the console's reviewer tokens, comma separated, each at least
    16 characters: whoever signs in on `/ui` with one may review answers and nothing else. Unset
    or empty: only the admin signs in."""
    feedback_signing_key_env: str = "MIRRORGATE_FEEDBACK_SIGNING_KEY"
    """Environment variable holding the key that signs `x-mirrorgate-feedback-token` (at least
    32 characters, the same on every replica). Unset: a random key made once and kept in the
    store, which every replica shares."""
    feedback_token_ttl_s: float = Field(7 * 24 * 3600.0, ge=60, le=90 * 24 * 3600)
    """How long a signed feedback token stays valid after its answer, seconds (default 7 days)."""
    feedback_rate_per_s: float = Field(10.0, gt=0, le=100_000)
    """Feedback posts each caller may make per second, sustained (a token bucket per caller:
    application token, or the client address for signed tokens); beyond, 429."""
    feedback_burst: int = Field(100, ge=1, le=1_000_000)
    """Feedback posts a caller may make at once before `feedback_rate_per_s` applies."""
    outcome_rate_per_s: float = Field(200.0, gt=0, le=100_000)
    """Outcome posts (`POST /v1/outcomes`) each caller may make per second, sustained, in buckets
    of their own beside feedback's. Higher than feedback's: an application posts an outcome for
    every operation (up to one per kind), where users correct an answer now and then; raise it
    when one application token posts for more operations a second than this."""
    outcome_burst: int = Field(2000, ge=1, le=1_000_000)
    """Outcome posts a caller may make at once before `outcome_rate_per_s` applies."""
    max_shadow_calls: int = Field(1000, ge=1)
    """Shadow (and noise-floor) calls in flight at once, all routes together; beyond, dropped."""
    route_refresh_s: float = Field(1.0, gt=0, le=60)
    """How often each replica reads rollout state from the store (a route change made by another
    replica is applied within this delay plus one query)."""
    external_url: str | None = None
    """How people reach this gateway (alert links point at its admin API); default: host:port."""
    allowed_hosts: tuple[str, ...] = ()
    """More names this gateway answers state-changing admin and webhook calls under (`Host`,
    and `Origin` when sent), each `name` (any port) or `name:port`: a Service's DNS name, the
    name Alertmanager's webhook URL uses. Loopback names on the listening port and
    `external_url`'s host are always allowed; any other is refused with 403 (DNS rebinding)."""
    shadow_shed_lag_ms: float = Field(10.0, ge=0, le=10_000)
    """Overload by lag: once the event loop runs ready work this late on average (about the last
    second of wake-ups), new shadow and noise-floor calls are dropped (`reason="overload"`) until
    it is back under half of it. 0 leaves the lag out; otherwise at least 1 ms."""
    shadow_shed_busy_percent: float = Field(70.0, ge=0, le=100)
    """Overload by CPU: once the event loop's thread is on the CPU this share of the time (over
    about half a second), new shadow and noise-floor calls are dropped (`reason="overload"`)
    until it is 10 points lower. 0 leaves it out."""
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    """Timeouts and size caps for client connections and upstream answers (`server.limits.*`)."""
    log_format: Literal["text", "json"] = "text"
    """Log lines as `time level logger: message` text, or one JSON object per line (keys `ts`,
    `level`, `logger`, `msg` and the line's own fields); `serve --log-format` overrides it."""
    access_log_sample: float = Field(1.0, ge=0, le=1)
    """Share of answered client requests that get an access-log line (`mirrorgate.access`);
    requests that end in an error are always logged, whatever the share."""
    workers: int = Field(1, ge=1, le=64)
    """Processes serving the one port (`serve --workers` overrides it). 1: the gateway serves in
    the process `serve` started. More: that process binds one `SO_REUSEPORT` socket per worker,
    forks the workers and supervises them (restarts a dead one, forwards SIGTERM, SIGINT and
    SIGHUP); the workers share the store and its decider lock, so they need PostgreSQL."""

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for host in value:
            if not re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:[0-9]{1,5})?", host):
                raise ValueError(
                    f"'{host[:100]}' is not a host name or host:port (no scheme, no path)"
                )
        return tuple(host.lower() for host in value)

    @field_validator("external_url")
    @classmethod
    def _external_http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("shadow_shed_lag_ms")
    @classmethod
    def _lag_above_timer_noise(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError("must be 0 (off) or at least 1 ms: the loop's timers tick in ms")
        return value


class StoreSpec(Spec):
    url: str = "sqlite:///mirrorgate.db"
    """SQLAlchemy URL: `sqlite:///path.db` or `postgresql+psycopg://user@host/db`."""
    bodies: Literal["full", "redacted", "none"] = "redacted"
    """Keep bodies as they are (full), with secrets and e-mail addresses masked, or not at all."""
    retention_days: int = Field(14, ge=1)
    """Records older than this are deleted (checked hourly and at start)."""
    queue_size: int = Field(50_000, ge=100)
    """Records waiting to be written; beyond it records are dropped and counted."""
    queue_max_bytes: int = Field(256 * 2**20, ge=2**20)
    """Estimated bytes the records waiting to be written may hold (bodies and a constant per
    record); beyond it a record is kept without its bodies, or dropped if even that does not
    fit (both counted)."""
    batch_size: int = Field(500, ge=1)
    flush_interval_ms: int = Field(200, ge=10, le=200)
    journal: bool = True
    """Append each answered client exchange to a local crash journal before its last byte is
    sent, and replay what the store never committed at the next start (SIGKILL, OOM kill)."""
    journal_dir: str | None = None
    """Where the journal's segment files live. None: next to the SQLite file
    (`<file>.journal/`), or `mirrorgate-journal/` in the temporary directory for PostgreSQL and
    in-memory SQLite. Each store URL gets its own sub-directory there."""
    journal_fsync_interval_s: float = Field(1.0, gt=0, le=60)
    """How often the journal is flushed to disk: a machine crash loses at most this much."""
    journal_max_body_bytes: int = Field(0, ge=0, le=16 * 1024 * 1024)
    """Bodies (request, response, text together) journaled up to this size, as `bodies` says;
    a larger record is journaled without them. 0 (the default): the journal keeps no bodies, so
    the event loop never serialises or redacts one (redacting costs about 12 µs per KB)."""
    journal_max_bytes: int = Field(1 << 30, ge=1 << 20)
    """Disk the journal may hold; beyond it records are not journaled (and counted)."""

    @field_validator("url")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if not value.startswith(("sqlite://", "postgresql")):
            raise ValueError("must be a sqlite:/// or postgresql+psycopg:// URL")
        return value


class PriceSpec(Spec):
    """USD per million tokens."""

    input_per_mtok: float = Field(0.0, ge=0)
    output_per_mtok: float = Field(0.0, ge=0)
    cached_input_per_mtok: float | None = Field(None, ge=0)
    """Defaults to the input price."""
    cache_write_per_mtok: float | None = Field(None, ge=0)
    """Anthropic prompt-cache writes; defaults to the input price."""
    reasoning_per_mtok: float | None = Field(None, ge=0)
    """Only for providers that bill reasoning apart from output; defaults to the output price."""


class ModelSpec(Spec):
    provider: Literal["openai", "anthropic"]
    """Wire format spoken upstream."""
    base_url: str
    """As the provider's SDK takes it: OpenAI-style ends in /v1; Anthropic's is the bare host."""
    model: str = Field(min_length=1)
    """Model name sent upstream."""
    api_key_env: str | None = None
    """Variable holding the upstream key; set, it replaces the client's credentials on every call
    to this model. Unset: see `pass_client_key`."""
    pass_client_key: bool = False
    """For a model without `api_key_env`: whether the client's own credentials (`Authorization`,
    `x-api-key`, `api-key`) go to it on calls made for a client, whichever role it has in the
    route. `false` (the default): it sends no credentials at all (a keyless local model). The
    judge's and replays' calls never carry a client's. Cookies never go upstream."""
    timeout_s: float = Field(60.0, gt=0)
    """Longest wait for the response headers and between two chunks of a stream."""
    total_timeout_s: float | None = Field(None, gt=0)
    """Longest a call may take from sending the request to the whole answer (non-streams) or to
    the response headers (streams); past it the client gets a 504. Unset: 10 times `timeout_s`."""
    connect_timeout_s: float = Field(5.0, gt=0)
    max_connections: int = Field(256, ge=1)
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra headers sent upstream on every call (e.g. an organisation id)."""
    price: PriceSpec = Field(default_factory=PriceSpec)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_source_of_key(self) -> ModelSpec:
        if self.api_key_env and self.pass_client_key:
            raise ValueError(
                "pass_client_key: true and api_key_env exclude each other (a model with its own "
                "key never sends the client's)"
            )
        return self

    @property
    def origin(self) -> str:
        """`scheme://host:port` of `base_url`, the port spelled out: what decides whether two
        models are the same host to a client's credentials."""
        scheme, _, rest = self.base_url.partition("://")
        netloc = rest.split("/", 1)[0].rpartition("@")[2].lower()
        if not netloc.endswith("]") and ":" in netloc.rsplit("]", 1)[-1]:
            return f"{scheme.lower()}://{netloc}"
        return f"{scheme.lower()}://{netloc}:{443 if scheme.lower() == 'https' else 80}"


class ShadowSpec(Spec):
    model: str
    sample: float = Field(1.0, ge=0, le=1)
    """Share of the route's requests mirrored to this candidate."""
    max_concurrency: int = Field(8, ge=1)
    max_usd_per_hour: float | None = Field(None, gt=0)
    timeout_s: float | None = Field(None, gt=0)


JUDGED_METRICS = (
    "error_rate", "latency_p50", "latency_p95", "ttft_p50", "ttft_p95", "cost_per_request",
    "check_pass_rate", "correction_rate", "disagreement", "judge_score", "findings",
    "rule_adaptation", "human_preference",
)  # fmt: skip
"""Every metric a canary can be judged on. `judge_score`, `findings`, `rule_adaptation` and
`human_preference` need evidence that only some configurations produce (an LLM judge scoring the
canary as a shadow; analyzers; rule-flip probes on the route's rule; stored answers of the canary
as a shadow, for blind review): by default they are judged only where it exists
(`unavailable_evidence`); listed explicitly without it, they are a config error.
`human_preference` is judged only when listed (`OPT_IN_METRICS`)."""
OPT_IN_METRICS = ("human_preference",)
"""Metrics left out of the default `analysis.metrics`: blind reviews come when people have time,
so a route gates its canary on them only when its owner says so (once listed, too few reviews
hold every step until reviewers have scored `thresholds.min_samples_reviews` pairs)."""


class AnalysisSpec(Spec):
    min_samples: int = Field(50, ge=1)
    """Fewer requests than this in either arm make rates inconclusive (latency: see
    `thresholds.min_samples_latency`)."""
    interval_s: float = Field(5.0, gt=0)
    """How often the judge looks at the rollout."""
    failure_limit: int = Field(2, ge=1)
    """Consecutive looks with a failing metric that roll the canary back."""
    metrics: list[str] = Field(
        default_factory=lambda: [m for m in JUDGED_METRICS if m not in OPT_IN_METRICS]
    )
    """Which metrics are judged (and gate each step); `check_pass_rate` covers every check.
    `judge_score` and `findings` are judged only when their evidence is configured;
    `human_preference` (blind review in the console) only when listed."""
    findings_severity: Severity = "warning"
    """The `findings` metric counts answers with an analyzer finding of this severity or worse
    (`info` < `warning` < `critical`)."""
    thresholds: Thresholds = Field(default_factory=Thresholds)
    """How much worse than the primary the canary may be; the defaults rarely need changing."""
    max_corrections_per_caller: int | None = Field(5, ge=1)
    """The correction rate counts at most this many corrected answers per arm from any one
    feedback caller in a window, so that one caller cannot roll a canary back alone (at the
    default thresholds it takes over 20 corrections to fail the metric). null: no cap."""

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: object) -> object:
        return refuse_removed(
            data,
            window_s="each step is judged on all of its evidence since the step began (rule "
            "checks: since their rule epoch began)",
        )

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, value: list[str]) -> list[str]:
        unknown = [m for m in value if m not in JUDGED_METRICS]
        if unknown:
            raise ValueError(f"unknown metric {unknown[0]!r}; known: {', '.join(JUDGED_METRICS)}")
        return value


_BODY_PATH = r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+){0,7}$"
_STICKY = re.compile(r"^(none|header:[A-Za-z0-9-]+|body:[A-Za-z0-9_.]+)$")


RollbackTarget = Literal["primary", "fallback"]
"""Where a rollback sends the route's traffic: its baseline primary, or its `fallback` model."""


_DURATION = re.compile(r"^[1-9][0-9]{0,5}[smhd]$")
_DURATION_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(value: str) -> float:
    """Seconds in a duration of the form `30m`, `6h`, `7d` (checked by the specs)."""
    return float(int(value[:-1]) * _DURATION_S[value[-1]])


class RequireEvalSpec(Spec):
    """The offline gate (`routes.<name>.canary.require_eval`): a rollout starts only when the
    candidate has a recent evaluation run on the route's set that does not regress against the
    primary's run on the same set version."""

    set: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")
    """The evaluation set, by its name (the `name` of its manifest.json, by default its
    directory's name) or by the path of its directory (whose last part is then the name)."""
    max_drop: float = Field(0.02, ge=0, le=1)
    """Largest drop of pass rate, candidate below primary, tolerated on any stratum (task or
    difficulty) with at least `min_cases` cases; 0.02 is two points."""
    max_age: str = "7d"
    """How old the newest run of the candidate may be (`30m`, `12h`, `7d`)."""
    min_cases: int = Field(20, ge=1, le=1_000_000)
    """A stratum with fewer cases is shown but never blocks (too few to tell a drop from
    noise)."""

    @field_validator("max_age")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not _DURATION.match(value):
            raise ValueError("must be a duration such as '30m', '12h' or '7d'")
        return value

    @property
    def set_name(self) -> str:
        """The name runs are stored under: `set` itself, or the last part of a path."""
        return self.set.rstrip("/").rsplit("/", 1)[-1] or self.set


class DifficultySpec(Spec):
    """What makes a case of an evaluation set `hard` (any signal) or `edge` (a rare rule
    version); every other case is `easy`."""

    long_chars: int = Field(2000, ge=1, le=10_000_000)
    """A prompt (every message's text) longer than this many characters is hard."""
    many_turns: int = Field(6, ge=1, le=10_000)
    """A conversation of more messages than this is hard."""
    corrected: bool = True
    """A request whose primary answer a user corrected is hard."""
    disagreed: bool = True
    """A request on which a shadow disagreed with the primary is hard."""
    rare_version_share: float = Field(0.05, ge=0, le=1)
    """A request of a rule version carrying less than this share of the window's traffic is an
    edge case (0: none is)."""


_TASK_FORM = re.compile(r"^(none|rule|header:[A-Za-z0-9-]{1,100}|body:[A-Za-z0-9_.-]{1,200})$")


class EvalSetSpec(Spec):
    """How `mirrorgate evalset build` samples the route's traffic (`routes.<name>.evalset`)."""

    task: str = "none"
    """The task classifier: `rule` (the rule version), `body:<field>` (a body field, dots for
    nesting), `header:<name>` (the request header, recorded by the gateway as the exchange's
    `task:` tag) or `none` (one task); `tasks` instead classifies by regex."""
    tasks: dict[Annotated[str, Field(pattern=_NAME)], str] = Field(
        default_factory=dict, max_length=100
    )
    """Task name to regex over the last user message, tried in order (the first match wins;
    no match is task `other`). Set with `task: regex`."""
    difficulty: DifficultySpec = Field(default_factory=DifficultySpec)
    min_per_task: int = Field(5, ge=0, le=100_000)
    """Every task gets at least this many cases when the window has them, however rare it is
    (the long tail); the rest is shared in proportion to traffic."""
    held_out: float = Field(0.1, ge=0, le=0.5)
    """Share of the built cases kept in held_out.jsonl, which no candidate run prints."""

    @field_validator("task")
    @classmethod
    def _task_form(cls, value: str) -> str:
        if value != "regex" and not _TASK_FORM.match(value):
            raise ValueError("must be 'none', 'rule', 'regex', 'header:<name>' or 'body:<field>'")
        return value

    @field_validator("tasks")
    @classmethod
    def _patterns(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            if len(pattern) > 1000:
                raise ValueError(f"'{name}': a pattern of at most 1000 characters")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"'{name}': not a regular expression ({exc})") from None
        return value

    @model_validator(mode="after")
    def _regex_needs_tasks(self) -> EvalSetSpec:
        if self.task == "regex" and not self.tasks:
            raise ValueError("task: regex needs 'tasks' (task name: pattern)")
        if self.task != "regex" and self.tasks:
            raise ValueError("'tasks' goes with task: regex")
        return self


class CanarySpec(Spec):
    model: str
    steps: list[Annotated[int, Field(ge=1, le=100)]] = Field(default_factory=lambda: [10, 50])
    step_interval_s: float = Field(60.0, gt=0)
    """The shortest time at each step: a step advances once every metric passes *and* it has
    lasted this long."""
    max_hold_s: float | None = Field(3600.0, gt=0)
    """A step held longer than this (some metric not yet passing) raises one warning alert
    naming what holds it and what it needs; null: never."""
    sticky: str = "none"
    """`header:<name>`, `body:<field>` or `none`."""
    analysis: AnalysisSpec = Field(default_factory=AnalysisSpec)
    rollback_to: RollbackTarget = "primary"
    """Where the canary's traffic goes when it is rolled back without an explicit target:
    `primary` (canary to 0 %, the baseline serves) or `fallback` (the whole route moves to the
    route's `fallback`, which must then be set)."""
    require_eval: RequireEvalSpec | None = None
    """The offline gate: `rollout start` refuses without a recent, non-regressing evaluation
    run of the candidate (off unless set)."""

    @field_validator("sticky")
    @classmethod
    def _sticky_form(cls, value: str) -> str:
        if not _STICKY.match(value):
            raise ValueError("must be 'none', 'header:<name>' or 'body:<field>'")
        return value

    @field_validator("steps")
    @classmethod
    def _ascending(cls, value: list[int]) -> list[int]:
        if not value or any(b <= a for a, b in itertools.pairwise(value)):
            raise ValueError("must be a non-empty list of strictly increasing percentages")
        return value


class AgreementConfig(Spec):
    """How a candidate's answer is compared with the primary's: the one verdict per pair that
    `mirrorgate_agreement_total`, the rollout judge's `disagreement` and the report count."""

    mode: Literal["exact", "normalized", "json_fields", "numeric"] = "normalized"
    fields: list[str] = Field(default_factory=list)
    """JSONPaths (or top-level keys) compared in json_fields and numeric modes."""
    tolerance: float = Field(0.0, ge=0)
    """Largest absolute difference between two numbers that still agree."""


class GuardSpec(Spec):
    """The guard of the production model (`routes.<name>.guard`): after a rule change opens a new
    epoch, the primary's compliance with the new version is judged against the other models
    answering the same new-version requests and against its own previous epoch."""

    on_rule_regression: Literal["switch", "alert"] = "alert"
    """`alert`: raise a `rule_regression` alert with the evidence; `switch`: also move the route
    to the candidate with the best measured adaptation (served as arm `fallback`)."""
    candidates: list[str] = Field(default_factory=list)
    """Models the route may be switched to (needed by `switch`)."""
    min_samples: int = Field(30, ge=1)
    """Fewer judged answers than this, of the primary or of a candidate, on the new version hold
    the guard: too little evidence never switches."""
    interval_s: float | None = Field(None, gt=0, le=3600)
    """Seconds between two looks at the route (default: its `canary.analysis.interval_s`, else
    5). Looking often costs nothing: the guard's bounds are valid at every look."""


class ExperimentArmSpec(Spec):
    """One arm of an experiment: a model, optionally with a prompt variant."""

    model: str
    system_prompt_append: str | None = Field(None, min_length=1, max_length=16384)
    """Text appended to the request's system prompt on this arm (OpenAI chat: the first
    system/developer message, or a new system message; Responses: `instructions`; Anthropic:
    `system`). Endpoints without a system prompt (completions, embeddings) are sent as they are."""


_UNIT = re.compile(r"^(operation|header:[A-Za-z0-9-]+|body:[A-Za-z0-9_.]+)$")


class ExperimentSpec(Spec):
    """An online A/B experiment on the route (`routes.<name>.experiment`): started and stopped
    through the admin API; while it runs, each unit is served by one arm, sticky."""

    arms: dict[Annotated[str, Field(pattern=_NAME)], ExperimentArmSpec] = Field(
        min_length=2, max_length=10
    )
    """Two to ten arms by name. The control is the arm named `control`, else the first one."""
    weights: dict[str, Annotated[int, Field(ge=1, le=100)]] | None = None
    """Percent of the experiment's units per arm: whole numbers, one per arm, summing to 100.
    Omitted: an equal share each."""
    unit: str = "operation"
    """What is randomised, sticky: `operation` (the request's business operation,
    `x-mirrorgate-operation`), `header:<name>` or `body:<field.path>` (a user, say). A request
    without its unit key is served as if no experiment ran, and is not counted."""
    primary_metric: str = "completion_rate"
    """The metric the decision is about (`completion_rate`, `adoption_rate`, `correction_rate`,
    `cost_per_operation`, `calls_per_operation`, `error_rate`, `latency_p50`, `latency_p95`, or
    `check:<name>`, the pass rate of a check of a rule bound to the route, or `human_preference`,
    blind reviews of an arm against control)."""
    guardrails: list[str] = Field(default_factory=list, max_length=20)
    """Metrics no arm may be worse on: a breach stops that arm (its units go to control)."""
    minimum_detectable_effect: float = Field(gt=0, le=10)
    """The smallest lift worth finding: points of a rate (0.03 = 3 points), a relative change
    for cost and latency (0.1 = 10 %). Sizes the `needs` of a decision."""
    alpha: float = Field(0.05, gt=0, lt=0.5)
    """The error budget of the anytime-valid intervals (looking often costs nothing)."""
    interval_s: float = Field(30.0, gt=0, le=3600)
    """Seconds between two looks of the decider."""
    min_units: int = Field(50, ge=1, le=1_000_000)
    """Units per arm before any decision or guardrail stop is taken on it."""

    @field_validator("unit")
    @classmethod
    def _unit_form(cls, value: str) -> str:
        if not _UNIT.match(value):
            raise ValueError("must be 'operation', 'header:<name>' or 'body:<field>'")
        return value

    @property
    def control(self) -> str:
        """The control arm: the one named `control`, else the first."""
        return "control" if "control" in self.arms else next(iter(self.arms))

    def shares(self) -> dict[str, float]:
        """Arm → share of units (0..1, summing to 1), in the arms' order."""
        if self.weights is None:
            return {name: 1 / len(self.arms) for name in self.arms}
        return {name: self.weights.get(name, 0) / 100 for name in self.arms}


class RouteSpec(Spec):
    primary: str
    fallback: str | None = None
    """Model retried on when the primary fails before any byte was sent, and the one serving the
    whole route after a rollback to `fallback`."""
    shadows: list[ShadowSpec] = Field(default_factory=list)
    noise_sample: float = Field(0.0, ge=0, le=1)
    canary: CanarySpec | None = None
    agreement: AgreementConfig = Field(default_factory=AgreementConfig)
    operation_field: str | None = Field(None, pattern=_BODY_PATH, max_length=200)
    """The body field naming the business operation a request is part of, as a dotted path
    (e.g. `metadata.operation_id`, OpenAI's `metadata` object); the `x-mirrorgate-operation`
    header wins over it. None: only the header is read."""
    guard: GuardSpec | None = None
    """The production model's guard against a rule it keeps after the rule changed (off unless
    set)."""
    experiment: ExperimentSpec | None = None
    """An online A/B experiment between arms (off until started through the admin API)."""
    evalset: EvalSetSpec = Field(default_factory=EvalSetSpec)
    """How evaluation sets are built from this route's traffic."""


CheckType = Literal[
    "json", "json_schema", "json_path", "regex", "not_regex", "contains", "not_contains",
    "max_chars", "refusal", "tool_call", "phantom_rule",
]  # fmt: skip


class CheckSpec(Spec):
    name: str = Field(pattern=_NAME)
    type: CheckType
    pattern: str | None = None
    path: str | None = None
    equals: Any = None
    in_: list[Any] | None = Field(None, alias="in")
    min: float | None = None
    max: float | None = None
    regex: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    value: str | None = None
    phrases: list[str] | None = None
    tool: str | None = None
    arguments_schema: dict[str, Any] | None = None
    parameter: str | None = None
    """phantom_rule: a regex with a named group `value`, where the rule's value sits in a
    version's system prompt (default: the rule's `probes.parameter`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _fields_for_type(self) -> CheckSpec:
        need: dict[str, tuple[str, ...]] = {
            "regex": ("pattern",), "not_regex": ("pattern",), "json_path": ("path",),
            "json_schema": ("schema_",), "contains": ("value",), "not_contains": ("value",),
            "max_chars": ("max",), "tool_call": ("tool",),
        }  # fmt: skip
        for attr in need.get(self.type, ()):
            if getattr(self, attr) is None:
                raise ValueError(f"a {self.type} check needs '{attr.rstrip('_')}'")
        if self.type == "json_path" and all(
            getattr(self, a) is None for a in ("equals", "in_", "min", "max", "regex")
        ):
            raise ValueError("a json_path check needs one of equals, in, min, max, regex")
        for attr in ("pattern", "regex", "parameter"):
            source = getattr(self, attr)
            if source is not None:
                try:
                    re.compile(source)
                except re.error as exc:
                    raise ValueError(f"'{attr}' is not a valid regular expression: {exc}") from exc
        return self


class RuleVersionSpec(Spec):
    match_prompt: str | None = None
    """Regex against the system prompt that identifies this version when no header says so."""
    checks: list[CheckSpec] = Field(default_factory=list)

    @field_validator("match_prompt")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value


def _ignore_pattern(value: str) -> str:
    """A `fingerprint_ignore` entry: a regex that compiles and does not match the empty string."""
    try:
        compiled = re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from exc
    if compiled.search(""):
        raise ValueError("matches the empty string (it would be replaced between every character)")
    return value


def _value_pattern(value: str) -> str:
    """A probe's `parameter`: a regex that compiles and has a named group `value`."""
    try:
        compiled = re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from exc
    if "value" not in compiled.groupindex:
        raise ValueError("needs a named group 'value', e.g. 'max_weight\\s*=\\s*(?P<value>\\d+)'")
    if compiled.search(""):
        raise ValueError("matches the empty string")
    return value


ProbeValue = int | float | str


class VersionSupportSpec(Spec):
    """What a new prompt variant (or header value) needs before it becomes a rule version with
    its rule-change event. A version declared under `versions` needs nothing."""

    min_requests: int = Field(3, ge=1, le=1_000_000)
    """Requests it has carried."""
    min_units: int = Field(2, ge=1, le=64)
    """Distinct units that sent them: the route's canary `sticky` key, or each request where the
    route has none (then `min_requests` of at least `min_units` is what counts)."""


class ProbesSpec(Spec):
    """Rule-flip probes (`rules.<name>.probes`): live requests of the rule re-sent, off the client
    path, with the rule's value in the system prompt flipped, to see which models follow it."""

    parameter: Annotated[str, AfterValidator(_value_pattern)]
    """Where the rule's value sits in the system prompt: a regex with a named group `value`."""
    values: list[ProbeValue] = Field(default_factory=list, max_length=100)
    """What to flip the value to (one drawn per probe); or generate them with `scale`/`offset`."""
    scale: float | None = None
    """Generated value: the original (a number) times `scale` (then plus `offset`)."""
    offset: float | None = None
    """Generated value: the original (a number) plus `offset`."""
    expect: list[CheckSpec] = Field(min_length=1)
    """How a follower answers: checks in which `{value}` stands for the value asked. An answer
    passing them for the flipped value *followed*; passing them for the original value is
    *stuck* (the old rule); anything else is *other*."""
    targets: list[str] | None = None
    """Models probed (default: each route's primary, shadows and canary)."""
    sample: float = Field(0.05, ge=0, le=1)
    """Share of the rule's live requests that spawn probes (one per target)."""
    max_per_hour: int = Field(200, ge=1)
    """Probe calls per target and hour at most."""
    max_usd_per_hour: float | None = Field(2.0, gt=0)
    """Probe spend per target and hour at most (null: no limit)."""
    max_concurrency: int = Field(4, ge=1)
    """Probe calls in flight per target at most."""
    timeout_s: float | None = Field(None, gt=0)
    """A probe call's limit (default: the model's own timeouts)."""
    min_adaptation: float | None = Field(None, ge=0, le=1)
    """A canary whose adaptation rate is surely below this fails `rule_adaptation` (besides being
    judged against the primary's)."""

    @model_validator(mode="after")
    def _some_values(self) -> ProbesSpec:
        if not self.values and self.scale is None and self.offset is None:
            raise ValueError("probes need 'values', or 'scale'/'offset' to generate them")
        return self


class RuleSpec(Spec):
    routes: list[str] = Field(min_length=1)
    version: str = "fingerprint"
    """`header:<name>`, or `fingerprint` of the normalised system prompt (the default)."""
    checks: list[CheckSpec] = Field(default_factory=list)
    versions: dict[str, RuleVersionSpec] = Field(default_factory=dict)
    fingerprint_ignore: list[Annotated[str, AfterValidator(_ignore_pattern)]] = Field(
        default_factory=list
    )
    """Regexes whose matches in the system prompt are replaced by `<ignored>` before it is
    fingerprinted (per-request text the built-in masks do not know, such as a user's name)."""
    template: Literal["auto", "off"] = "auto"
    """`auto`: the parts of the system prompt that vary per request (a name) are learned as slots
    of a template, and a templated prompt is one version; `off`: every normalised prompt is a
    fingerprint version of its own. `fingerprint_ignore` applies first either way."""
    version_support: VersionSupportSpec = Field(default_factory=lambda: VersionSupportSpec())
    """What a prompt variant or header value needs before it becomes a version."""
    version_min_requests: int | None = Field(None, ge=1)
    """Old name of `version_support.min_requests`, still read (it may not be given with
    `version_support`)."""
    max_versions: int = Field(64, ge=1)
    """Fingerprint and header versions a rule keeps open. With templates, opening one more
    retires the least recently seen; otherwise requests of any further new version carry the
    version `overflow` (counted in `mirrorgate_rule_versions_overflow_total`)."""
    probes: ProbesSpec | None = None
    """Rule-flip probes (off unless set)."""

    def value_parameter(self) -> str | None:
        """The regex (named group `value`) that finds the rule's value in a version's system
        prompt: `probes.parameter`, else the first own `parameter` of a phantom_rule check;
        None when the rule has neither (its versions then carry no value)."""
        if self.probes is not None:
            return self.probes.parameter
        for check in (*self.checks, *(c for v in self.versions.values() for c in v.checks)):
            if check.type == "phantom_rule" and check.parameter is not None:
                return check.parameter
        return None

    @field_validator("template", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `off` as false: that is what the user wrote.
        if value is False:
            return "off"
        return value

    @model_validator(mode="after")
    def _old_min_requests(self) -> RuleSpec:
        if self.version_min_requests is not None and "version_support" in self.model_fields_set:
            raise ValueError(
                "version_min_requests is the old name of version_support.min_requests: "
                "give only version_support"
            )
        return self

    def support(self) -> VersionSupportSpec:
        """`version_support`, with `min_requests` from `version_min_requests` when that old
        key is given."""
        if self.version_min_requests is None:
            return self.version_support
        return VersionSupportSpec(
            min_requests=self.version_min_requests, min_units=self.version_support.min_units
        )

    @field_validator("versions")
    @classmethod
    def _not_overflow(cls, value: dict[str, RuleVersionSpec]) -> dict[str, RuleVersionSpec]:
        if "overflow" in value:
            raise ValueError("'overflow' is reserved (the version of requests past max_versions)")
        return value

    @field_validator("version")
    @classmethod
    def _version_source(cls, value: str) -> str:
        if not re.match(r"^(fingerprint|header:[A-Za-z0-9-]+)$", value):
            raise ValueError("must be 'fingerprint' or 'header:<name>'")
        return value


class AlertSinkSpec(Spec):
    type: Literal["webhook", "slack", "alertmanager"]
    url: str
    headers: dict[str, str] = Field(default_factory=dict)


ALERT_LINK_DEFAULT = "https://github.com/mirrorgate/mirrorgate/blob/main/docs/runbook.md#{anchor}"
"""The runbook section of each alert kind, in the project's published docs."""


class AlertsSpec(Spec):
    sinks: list[AlertSinkSpec] = Field(default_factory=list)
    retries: int = Field(5, ge=0, le=20)
    """Deliveries retried per alert and sink when the sink is down (then counted as failed)."""
    backoff_initial_s: float = Field(0.5, gt=0)
    """First retry delay; doubled per retry (with jitter) up to `backoff_max_s`."""
    backoff_max_s: float = Field(30.0, gt=0)
    dedupe_window_s: float = Field(300.0, ge=0)
    """The same alert (same kind, route, target, rule, version, check) is sent once per window."""
    generator_url: str = Field(ALERT_LINK_DEFAULT, max_length=2000)
    """Where an alert's link (`generator_url`) points: an http(s) URL template with `{kind}`,
    `{route}` and `{anchor}` (the runbook section of the alert's kind) filled in."""

    @field_validator("generator_url")
    @classmethod
    def _link_template(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        try:
            fields = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
        except ValueError as exc:
            raise ValueError(f"is not a valid template ({exc})") from None
        unknown = sorted(fields - {"kind", "route", "anchor"})
        if unknown:
            raise ValueError(
                f"unknown placeholder {{{unknown[0][:50]}}}; use {{kind}}, {{route}}, {{anchor}}"
            )
        return value


class TelemetrySpec(Spec):
    otlp_endpoint: str | None = None
    """OTLP/HTTP traces endpoint (e.g. http://127.0.0.1:4318/v1/traces). Falls back to the standard
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT variables; none: no tracing."""
    service_name: str = "mirrorgate"


class JudgeSpec(Spec):
    """LLM-as-judge on shadow pairs (off unless this section is present)."""

    model: str
    """A model from `models` (OpenAI chat or Anthropic messages format) that scores answers."""
    sample: float = Field(0.1, ge=0, le=1)
    """Share of shadow pairs judged (each costs two calls: both answer orders)."""
    max_usd_per_hour: float | None = Field(1.0, gt=0)
    """Judge spend limit; beyond it pairs are not judged until the hour rolls on."""
    rubric: str | None = None
    """Replaces the built-in rubric (which asks for {"score_a", "score_b"} from 1 to 10 and
    penalises length); yours must ask for the same JSON."""
    both_orders: bool = True
    """Ask twice, the answers swapped, and average (cancels the judge's position bias); false:
    one call, the primary's answer first, at half the cost. Shadow pairs and replay's `judge`
    cases alike."""


class MirrorgateConfig(Spec):
    server: ServerSpec = Field(default_factory=ServerSpec)
    store: StoreSpec = Field(default_factory=StoreSpec)
    models: dict[Annotated[str, Field(pattern=_NAME)], ModelSpec] = Field(min_length=1)
    routes: dict[Annotated[str, Field(pattern=_NAME)], RouteSpec] = Field(min_length=1)
    rules: dict[Annotated[str, Field(pattern=_NAME)], RuleSpec] = Field(default_factory=dict)
    alerts: AlertsSpec = Field(default_factory=AlertsSpec)
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    judge: JudgeSpec | None = None
    analyzers: list[str] = Field(default_factory=list)
    """Analyzer plugins to run on every exchange and pair, by name: built-ins, or third-party
    ones registered in the entry-point group `mirrorgate.analyzers`."""

    def rule_of(self, route: str) -> str | None:
        """The name of the rule set that applies to `route` (at most one does: checked at
        load), or None."""
        return next((name for name, rule in self.rules.items() if route in rule.routes), None)


def agreement_spec(config: AgreementConfig) -> AgreementSpec:
    """The pure comparison spec for a route's `agreement` section (raises SpecError)."""
    return AgreementSpec(config.mode, tuple(config.fields), config.tolerance)


def unavailable_evidence(config: MirrorgateConfig, route: str) -> dict[str, str]:
    """The evidence-backed metrics (`judge_score`, `findings`, `rule_adaptation`,
    `human_preference`) that `route`'s canary cannot be
    judged on in `config`, each with the reason: the judge leaves them out (they would hold the
    rollout forever), and listing one explicitly in `analysis.metrics` is a config error."""
    spec = config.routes[route]
    missing: dict[str, str] = {}
    if config.judge is None:
        missing["judge_score"] = "no LLM judge is configured (the `judge` section)"
    elif spec.canary is not None and all(s.model != spec.canary.model for s in spec.shadows):
        missing["judge_score"] = (
            f"the LLM judge scores shadow pairs only, and the canary '{spec.canary.model}' is "
            "not among the route's shadows"
        )
    if not config.analyzers:
        missing["findings"] = "no analyzers are configured (the `analyzers` list)"
    rule = config.rule_of(route)
    if rule is None or config.rules[rule].probes is None:
        missing["rule_adaptation"] = "the route's rule has no probes (`rules.<name>.probes`)"
    if config.store.bodies == "none":
        missing["human_preference"] = (
            "store.bodies is none: no answer is stored, so none can be reviewed"
        )
    elif spec.canary is not None and all(s.model != spec.canary.model for s in spec.shadows):
        missing["human_preference"] = (
            f"blind review pairs the primary's answer with a shadow's, and the canary "
            f"'{spec.canary.model}' is not among the route's shadows"
        )
    return missing


def experiment_review_arms(spec: RouteSpec) -> tuple[frozenset[str], dict[str, str]]:
    """Which of `spec`'s experiment arms blind review can pair: (the arms whose live answer a
    shadow is compared with, model → the arm a shadow of that model answers for).

    Shadows run beside an experiment arm's answer only when that arm is the production model
    with the client's prompt (the route's primary, no `system_prompt_append`), and a shadow sends
    the client's request unchanged: its answer is another arm's only when that arm is the
    shadow's model with no prompt variant either, and no other such arm shares the model."""
    experiment = spec.experiment
    if experiment is None:
        return frozenset(), {}
    plain = {n: a.model for n, a in experiment.arms.items() if a.system_prompt_append is None}
    live = frozenset(n for n, model in plain.items() if model == spec.primary)
    shadowed = {s.model for s in spec.shadows}
    by_model: dict[str, list[str]] = {}
    for name, model in plain.items():
        if model in shadowed and model != spec.primary:
            by_model.setdefault(model, []).append(name)
    return live, {model: arms[0] for model, arms in by_model.items() if len(arms) == 1}


def experiment_unreviewable(config: MirrorgateConfig, route: str) -> dict[str, str]:
    """The arms of `route`'s experiment (control excluded) that blind review can never pair
    with control in `config`, each with the reason (empty: every arm can be judged on
    `human_preference`)."""
    spec = config.routes[route]
    experiment = spec.experiment
    if experiment is None:
        return {}
    control = experiment.control
    others = [a for a in experiment.arms if a != control]
    if config.store.bodies == "none":
        return dict.fromkeys(
            others, "store.bodies is none: no answer is stored, so none can be reviewed"
        )
    live, by_model = experiment_review_arms(spec)
    answered = set(by_model.values())
    missing: dict[str, str] = {}
    for arm in others:
        if (control in live and arm in answered) or (arm in live and control in answered):
            continue
        missing[arm] = (
            f"blind review pairs the answer of an arm serving the primary "
            f"'{spec.primary}' with the client's prompt beside a shadow's answer, and no "
            f"shadow of the route answers for arm '{arm}' or for '{control}' (an arm is a "
            "shadow's when it is that shadow's model, with no system_prompt_append)"
        )
    return missing
