"""Configuration: YAML in, frozen specs out, or every problem named by its key path.

Loading runs in three passes, each collecting problems instead of stopping at the first:

1. parse the YAML (duplicate keys are an error, not a silent overwrite);
2. interpolate `${VAR}` / `${VAR:-default}` in every string, naming the key of a missing variable;
3. validate into frozen pydantic specs, then check cross references (a route naming an undefined
   model, a rule naming an undefined route) and environment variables the specs point at.

`load_config` raises `ConfigError` carrying every `ConfigProblem`; nothing half-loads.
"""

from __future__ import annotations

import importlib.metadata
import ipaddress
import itertools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from analyzers.agreement import AgreementSpec
from analyzers.checks import compile_check
from analyzers.errors import SpecError
from analyzers.plugins import ENTRY_POINT_GROUP, available_analyzers
from analyzers.verdicts import Thresholds

MAX_CONFIG_BYTES = 4 * 1024 * 1024
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a configuration, at a dotted key path (`routes.bot.primary`)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


class ConfigError(Exception):
    """The configuration cannot be used; `problems` names every reason."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class Spec(BaseModel):
    """Base for every config section: frozen, and unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSpec(Spec):
    host: str = "127.0.0.1"
    """Address to listen on. Anything but loopback requires the admin token to be set."""
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    """Largest request body accepted; larger bodies get 413 before they are read."""
    admin_token_env: str = "MIRRORGATE_ADMIN_TOKEN"
    """Environment variable holding the bearer token for /admin and /hooks."""
    drain_timeout_s: float = Field(10.0, gt=0)
    """On SIGTERM: how long to wait for in-flight requests and the recorder queue."""
    max_shadow_calls: int = Field(1000, ge=1)
    """Shadow (and noise-floor) calls in flight at once, all routes together; beyond, dropped."""
    route_refresh_s: float = Field(1.0, gt=0, le=60)
    """How often each replica reads rollout state from the store (a route change made by another
    replica is applied within this delay plus one query)."""
    external_url: str | None = None
    """How people reach this gateway (alert links point at its admin API); default: host:port."""
    shadow_shed_lag_ms: float = Field(10.0, ge=0, le=10_000)
    """Overload by lag: once the event loop runs ready work this late on average (about the last
    second of wake-ups), new shadow and noise-floor calls are dropped (`reason="overload"`) until
    it is back under half of it. 0 leaves the lag out; otherwise at least 1 ms."""
    shadow_shed_busy_percent: float = Field(70.0, ge=0, le=100)
    """Overload by CPU: once the event loop's thread is on the CPU this share of the time (over
    about half a second), new shadow and noise-floor calls are dropped (`reason="overload"`)
    until it is 10 points lower. 0 leaves it out."""

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
    batch_size: int = Field(500, ge=1)
    flush_interval_ms: int = Field(200, ge=10, le=200)

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
    """Variable holding the upstream key. Unset: the client's own credentials are passed through."""
    timeout_s: float = Field(60.0, gt=0)
    """Longest wait for the response headers and between two chunks of a stream."""
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


class ShadowSpec(Spec):
    model: str
    sample: float = Field(1.0, ge=0, le=1)
    """Share of the route's requests mirrored to this candidate."""
    max_concurrency: int = Field(8, ge=1)
    max_usd_per_hour: float | None = Field(None, gt=0)
    timeout_s: float | None = Field(None, gt=0)


JUDGED_METRICS = (
    "error_rate", "latency_p50", "latency_p95", "ttft_p50", "ttft_p95", "cost_per_request",
    "check_pass_rate", "correction_rate", "disagreement",
)  # fmt: skip


class AnalysisSpec(Spec):
    min_samples: int = Field(50, ge=1)
    """Fewer requests than this in either arm make rates inconclusive (latency: see
    `thresholds.min_samples_latency`)."""
    interval_s: float = Field(10.0, gt=0)
    """How often the judge looks at the rollout."""
    failure_limit: int = Field(2, ge=1)
    """Consecutive looks with a failing metric that roll the canary back."""
    window_s: float = Field(60.0, gt=0)
    """Latency, errors and cost are judged on the last `window_s` of both arms (rule checks on
    their whole rule epoch)."""
    metrics: list[str] = Field(default_factory=lambda: list(JUDGED_METRICS))
    """Which metrics are judged (and gate each step); `check_pass_rate` covers every check."""
    thresholds: Thresholds = Field(default_factory=Thresholds)
    """How much worse than the primary the canary may be; the defaults rarely need changing."""

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, value: list[str]) -> list[str]:
        unknown = [m for m in value if m not in JUDGED_METRICS]
        if unknown:
            raise ValueError(f"unknown metric {unknown[0]!r}; known: {', '.join(JUDGED_METRICS)}")
        return value


_STICKY = re.compile(r"^(none|header:[A-Za-z0-9-]+|body:[A-Za-z0-9_.]+)$")


class CanarySpec(Spec):
    model: str
    steps: list[Annotated[int, Field(ge=1, le=100)]] = Field(
        default_factory=lambda: [1, 5, 25, 50, 100]
    )
    step_interval_s: float = Field(60.0, gt=0)
    sticky: str = "none"
    """`header:<name>`, `body:<field>` or `none`."""
    analysis: AnalysisSpec = Field(default_factory=AnalysisSpec)

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
    """How a candidate's answer is compared with the primary's for `mirrorgate_agreement_total`."""

    mode: Literal["exact", "normalized", "json_fields", "numeric"] = "normalized"
    fields: list[str] = Field(default_factory=list)
    """JSONPaths (or top-level keys) compared in json_fields and numeric modes."""
    tolerance: float = Field(0.0, ge=0)
    """Largest absolute difference between two numbers that still agree."""


class RouteSpec(Spec):
    primary: str
    fallback: str | None = None
    """Model used when the primary fails before any byte was sent, and after a rollback."""
    shadows: list[ShadowSpec] = Field(default_factory=list)
    noise_sample: float = Field(0.0, ge=0, le=1)
    canary: CanarySpec | None = None
    agreement: AgreementConfig = Field(default_factory=AgreementConfig)


CheckType = Literal[
    "json", "json_schema", "json_path", "regex", "not_regex", "contains", "not_contains",
    "max_chars", "refusal", "tool_call",
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
        for attr in ("pattern", "regex"):
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


class RuleSpec(Spec):
    routes: list[str] = Field(min_length=1)
    version: str = "fingerprint"
    """`header:<name>`, or `fingerprint` of the normalised system prompt (the default)."""
    checks: list[CheckSpec] = Field(default_factory=list)
    versions: dict[str, RuleVersionSpec] = Field(default_factory=dict)

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


class AlertsSpec(Spec):
    sinks: list[AlertSinkSpec] = Field(default_factory=list)
    retries: int = Field(5, ge=0, le=20)
    """Deliveries retried per alert and sink when the sink is down (then counted as failed)."""
    backoff_initial_s: float = Field(0.5, gt=0)
    """First retry delay; doubled per retry (with jitter) up to `backoff_max_s`."""
    backoff_max_s: float = Field(30.0, gt=0)
    dedupe_window_s: float = Field(300.0, ge=0)
    """The same alert (same kind, route, target, rule, version, check) is sent once per window."""


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


# --- loading -----------------------------------------------------------------------------------


MAX_NODES = 200_000
"""A document that would expand past this many YAML nodes (an alias bomb) is refused."""


def _scan(node: yaml.Node, problems: list[ConfigProblem]) -> int:
    """Report duplicate keys by path; return how many nodes the document expands to."""
    sizes: dict[int, int] = {}

    def walk(node: yaml.Node, path: tuple[str | int, ...]) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known  # an alias: counted again, but scanned once
        size = 1
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
                if key in seen:
                    problems.append(
                        ConfigProblem(
                            _join(path),
                            f"duplicate key '{key}' (line {key_node.start_mark.line + 1})",
                        )
                    )
                seen.add(key)
                size += walk(value_node, (*path, key))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                size += walk(item, (*path, i))
        sizes[id(node)] = size
        return size

    return walk(node, ())


def _join(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _interpolate(
    node: Any, env: Mapping[str, str], path: tuple[str | int, ...], problems: list[ConfigProblem]
) -> Any:
    if isinstance(node, dict):
        return {k: _interpolate(v, env, (*path, str(k)), problems) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, env, (*path, i), problems) for i, v in enumerate(node)]
    if isinstance(node, str) and "${" in node:

        def replace(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            problems.append(ConfigProblem(_join(path), f"environment variable {name} is not set"))
            return ""

        return _ENV_REF.sub(replace, node)
    return node


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cross_check(cfg: MirrorgateConfig, env: Mapping[str, str]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    for rname, route in cfg.routes.items():
        base = f"routes.{rname}"
        try:
            agreement_spec(route.agreement)
        except SpecError as exc:
            problems.append(ConfigProblem(f"{base}.agreement.{exc.field}", exc.message))
        seen: set[str] = set()
        primary = cfg.models.get(route.primary)
        for i, shadow in enumerate(route.shadows):
            candidate = cfg.models.get(shadow.model)
            if (
                primary is not None
                and candidate is not None
                and candidate.provider != primary.provider
            ):
                problems.append(
                    ConfigProblem(
                        f"{base}.shadows[{i}].model",
                        f"'{shadow.model}' speaks {candidate.provider} but the primary speaks "
                        f"{primary.provider}; requests are not translated between wire formats",
                    )
                )
            if shadow.model in seen:
                problems.append(
                    ConfigProblem(
                        f"{base}.shadows[{i}].model", f"'{shadow.model}' is shadowed twice"
                    )
                )
            seen.add(shadow.model)
        if route.canary is not None and route.canary.model == route.primary:
            problems.append(
                ConfigProblem(f"{base}.canary.model", "the canary cannot be the primary itself")
            )
        canary_model = cfg.models.get(route.canary.model) if route.canary else None
        if (
            primary is not None
            and canary_model is not None
            and canary_model.provider != primary.provider
        ):
            problems.append(
                ConfigProblem(
                    f"{base}.canary.model",
                    f"the canary must speak the primary's wire format ({primary.provider}); "
                    "requests are not translated between wire formats",
                )
            )
        fallback = cfg.models.get(route.fallback or "")
        if primary is not None and fallback is not None and fallback.provider != primary.provider:
            problems.append(
                ConfigProblem(
                    f"{base}.fallback",
                    f"the fallback must speak the primary's wire format ({primary.provider})",
                )
            )
    if cfg.judge is not None and cfg.judge.model not in cfg.models:
        problems.append(
            ConfigProblem("judge.model", f"model '{cfg.judge.model}' is not defined under models")
        )
    if cfg.analyzers:
        available = available_analyzers(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        for i, name in enumerate(cfg.analyzers):
            if name not in available:
                problems.append(
                    ConfigProblem(
                        f"analyzers[{i}]",
                        f"unknown analyzer '{name}'; available: {', '.join(sorted(available))}",
                    )
                )
    governed: dict[str, str] = {}
    for rule_name, rule in cfg.rules.items():
        for i, route_name in enumerate(rule.routes):
            if route_name in governed:
                problems.append(
                    ConfigProblem(
                        f"rules.{rule_name}.routes[{i}]",
                        f"route '{route_name}' is already governed by rule set "
                        f"'{governed[route_name]}' (one rule set per route; put every check in it)",
                    )
                )
            governed.setdefault(route_name, rule_name)
        _check_names(f"rules.{rule_name}.checks", rule.checks, problems)
        for vname, version in rule.versions.items():
            _check_names(f"rules.{rule_name}.versions.{vname}.checks", version.checks, problems)
    if not _is_loopback(cfg.server.host) and not env.get(cfg.server.admin_token_env):
        problems.append(
            ConfigProblem(
                "server.admin_token_env",
                f"{cfg.server.admin_token_env} must be set when listening on {cfg.server.host} "
                "(the admin API is only open without a token on loopback)",
            )
        )
    return problems


def agreement_spec(config: AgreementConfig) -> AgreementSpec:
    """The pure comparison spec for a route's `agreement` section (raises SpecError)."""
    return AgreementSpec(config.mode, tuple(config.fields), config.tolerance)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _check_references(raw: dict[str, Any], problems: list[ConfigProblem]) -> None:
    """Name every reference to an undefined model or route (before validation: all are found)."""
    models, routes = _dict(raw.get("models")), _dict(raw.get("routes"))

    def need(path: str, name: Any) -> None:
        if isinstance(name, str) and name not in models:
            problems.append(ConfigProblem(path, f"model '{name}' is not defined under models"))

    for rname, route in routes.items():
        fields = _dict(route)
        need(f"routes.{rname}.primary", fields.get("primary"))
        need(f"routes.{rname}.fallback", fields.get("fallback"))
        shadows = fields.get("shadows")
        for i, shadow in enumerate(shadows if isinstance(shadows, list) else ()):
            need(f"routes.{rname}.shadows[{i}].model", _dict(shadow).get("model"))
        need(f"routes.{rname}.canary.model", _dict(fields.get("canary")).get("model"))
    for rule_name, rule in _dict(raw.get("rules")).items():
        names = _dict(rule).get("routes")
        for i, name in enumerate(names if isinstance(names, list) else ()):
            if isinstance(name, str) and name not in routes:
                problems.append(
                    ConfigProblem(
                        f"rules.{rule_name}.routes[{i}]", f"route '{name}' is not defined"
                    )
                )


def _check_key_env(
    raw: dict[str, Any], env: Mapping[str, str], problems: list[ConfigProblem]
) -> None:
    """Name every model key variable that is not set (before validation, so all are reported)."""
    models = raw.get("models")
    for name, model in models.items() if isinstance(models, dict) else ():
        var = model.get("api_key_env") if isinstance(model, dict) else None
        if isinstance(var, str) and var and var not in env:
            problems.append(
                ConfigProblem(
                    f"models.{name}.api_key_env", f"environment variable {var} is not set"
                )
            )


def _check_names(path: str, checks: list[CheckSpec], problems: list[ConfigProblem]) -> None:
    seen: set[str] = set()
    for i, check in enumerate(checks):
        try:
            compile_check(check.model_dump(by_alias=True, exclude_none=True))
        except SpecError as exc:
            where = f"{path}[{i}].{exc.field}" if exc.field else f"{path}[{i}]"
            problems.append(ConfigProblem(where, exc.message))
        if check.name in seen:
            problems.append(
                ConfigProblem(f"{path}[{i}].name", f"duplicate check name '{check.name}'")
            )
        seen.add(check.name)


def parse_config(text: str, env: Mapping[str, str] | None = None) -> MirrorgateConfig:
    """Validate configuration text; raise `ConfigError` naming every problem."""
    env = os.environ if env is None else env
    problems: list[ConfigProblem] = []
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _scan(node, problems) > MAX_NODES:
            raise ConfigError(
                [ConfigProblem("", f"the document expands to more than {MAX_NODES} nodes")]
            )
        raw = loader.construct_document(node) if node is not None else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(
            [ConfigProblem("", f"not valid YAML: {where}{getattr(exc, 'problem', exc)}")]
        ) from exc
    except RecursionError as exc:
        raise ConfigError([ConfigProblem("", "the document is nested too deeply")]) from exc
    finally:
        loader.dispose()
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([ConfigProblem("", "the configuration must be a mapping of sections")])
    _check_key_env(raw, env, problems)
    _check_references(raw, problems)
    raw = _interpolate(raw, env, (), problems)
    try:
        cfg = MirrorgateConfig.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(str(p) if not isinstance(p, int) else p for p in err["loc"])
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            elif err["type"] == "missing":
                message = "required key is missing"
            problems.append(ConfigProblem(_join(loc), message))
        raise ConfigError(problems) from exc
    problems.extend(_cross_check(cfg, env))
    if problems:
        raise ConfigError(problems)
    return cfg


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> MirrorgateConfig:
    """Read and validate a configuration file; raise `ConfigError` naming every problem."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError([ConfigProblem("", f"{file}: larger than {MAX_CONFIG_BYTES} bytes")])
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError([ConfigProblem("", f"{file}: no such file")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigProblem("", f"{file}: not UTF-8 text")]) from exc
    except OSError as exc:
        raise ConfigError([ConfigProblem("", f"{file}: cannot read ({exc.strerror})")]) from exc
    return parse_config(text, env)
