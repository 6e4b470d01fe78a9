"""The behaviour file: how the fake model answers, how slowly, and how it fails.

YAML in, frozen specs out. `load_behavior` raises `BehaviorError` naming every problem by its key
path (`models.stale.answer.pattern: ...`); nothing half-loads. The format is documented field by
field in docs/mock-upstream.md.

Per-model sections are merged over `default` one top-level key at a time: a model that sets
`answer` keeps the default's latency and faults, and `error: null` switches a default fault off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

EXAMPLES_DIR = Path(__file__).parent / "examples"
"""Behaviour files shipped with the package (default, rule-follower, stale-rule, ...)."""


class Spec(BaseModel):
    """Base for every section: frozen, and unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class EchoAnswer(Spec):
    """`You said: <last user message>` followed by filler, cut to `answer_tokens` tokens."""

    type: Literal["echo"] = "echo"
    answer_tokens: int = Field(48, ge=1, le=100_000)
    """Length of the answer in tokens (a longer user message is cut to fit)."""


class FixedAnswer(Spec):
    """The same text for every request (e.g. a "stale" model that keeps obeying an old rule)."""

    type: Literal["fixed"] = "fixed"
    text: str
    repeat: int = Field(1, ge=1, le=1_000_000)
    """The answer is `text` this many times over: a huge answer from a short behaviour file."""


class MemorisedValue(Spec):
    """A rule the model memorised: on a share `rate` of its answers, group `group` of the
    pattern is answered as `value`, whatever the prompt says.

    `rate` is a counter, like a fault's: the n-th answer (of this model, whose system prompt
    matched) is memorised when floor(n*r) > floor((n-1)*r), so 0.3 memorises answers 4, 7, 10...
    and 0.95 all but the first of every twenty; POST /_mock/reset starts the count again.
    """

    group: int = Field(1, ge=1)
    """Which capturing group of `pattern` holds the rule's value (1 = the first)."""
    value: str
    """The memorised value, answered in place of the group's text."""
    rate: float = Field(1.0, ge=0, le=1)
    """Share of answers that say `value` (0: a follower, 1: always the memorised value)."""


class RegexFromSystemAnswer(Spec):
    """Search the system prompt with `pattern`; fill `{0}`, `{1}`... in `template` with the groups.

    Only `{<digits>}` is replaced, so JSON braces in the template stay as they are. With
    `memorised`, a share of answers fill the memorised group with the memorised value instead
    (a model that learned an old rule); `reasoning`, if set, is filled the same way and sent as
    the provider sends reasoning.
    """

    type: Literal["regex_from_system"] = "regex_from_system"
    pattern: str
    template: str
    default: str = "I found no rule in my instructions."
    """Answer when the pattern does not match (or there is no system prompt)."""
    memorised: MemorisedValue | None = None
    """A memorised rule value that overrides the prompt's on a share of answers."""
    reasoning: str | None = None
    """Reasoning text, a template like `template` (same groups, memorised or not with it):
    Anthropic sends it as a `thinking` block, OpenAI chat as `message.reasoning_content`."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from exc
        return value

    @field_validator("memorised")
    @classmethod
    def _group_exists(
        cls, value: MemorisedValue | None, info: ValidationInfo
    ) -> MemorisedValue | None:
        pattern = info.data.get("pattern")  # absent when the pattern itself was refused
        if value is None or pattern is None:
            return value
        groups = re.compile(pattern).groups
        if value.group > groups:
            raise ValueError(
                f"group {value.group} is not in the pattern "
                f"(it has {groups} capturing group{'' if groups == 1 else 's'})"
            )
        return value


AnswerSpec = Annotated[
    EchoAnswer | FixedAnswer | RegexFromSystemAnswer, Field(discriminator="type")
]
_ANSWER_TYPES = frozenset({"echo", "fixed", "regex_from_system"})


class FaultSpec(Spec):
    """A failure injected into a share of requests.

    `rate` is applied by a counter, not by chance, so runs are reproducible: with rate r the n-th
    eligible request fails when floor(n*r) > floor((n-1)*r) — 0.2 fails requests 5, 10, 15...;
    1.0 fails all of them. Each (model, fault) pair keeps its own counter.
    """

    rate: float = Field(1.0, ge=0, le=1)


class ErrorFault(FaultSpec):
    """Answer with an HTTP error in the caller's wire format."""

    status: int = Field(503, ge=400, le=599)
    message: str = "The mock upstream is overloaded (injected error)."


class TimeoutFault(FaultSpec):
    """Stall before answering: `stall_s` seconds, then answer normally; null = never answer."""

    stall_s: float | None = Field(None, gt=0)


class DisconnectFault(FaultSpec):
    """Streams only: close the connection after `after_chunks` SSE events, mid-body."""

    after_chunks: int = Field(2, ge=0)


class MalformedChunkFault(FaultSpec):
    """Streams only: after `after_chunks` SSE events send `data: <data>` (not JSON), then go on."""

    after_chunks: int = Field(2, ge=0)
    data: str = "{this is not json"


class GarbageFault(FaultSpec):
    """Non-streams only: status 200 with `body`, which is not JSON."""

    body: str = "<html><body>502 Bad Gateway</body></html>"


class ResetFault(FaultSpec):
    """Close the connection before any response byte is sent."""


class HugeBodyFault(FaultSpec):
    """Non-streams only: a normal answer padded to `bytes` (a JSON field of filler)."""

    bytes: int = Field(100 * 1024 * 1024, ge=1, le=4 * 1024 * 1024 * 1024)
    chunked: bool = False
    """Send it chunked, without a content-length (the client learns its size only by reading)."""


class EndlessStreamFault(FaultSpec):
    """Streams only: after the first text delta, repeat it until the client goes away."""

    interval_ms: float = Field(0, ge=0)
    """Pause between two repeats (0: as fast as the client reads)."""


class HeaderFloodFault(FaultSpec):
    """Answer normally, with `count` extra headers of `value_bytes` bytes each."""

    count: int = Field(1000, ge=1, le=1_000_000)
    value_bytes: int = Field(100, ge=1, le=64 * 1024 * 1024)


class ModelBehaviorSpec(Spec):
    """How one model (or the default) answers."""

    answer: AnswerSpec = Field(default_factory=EchoAnswer)
    usage: bool = True
    """False: never report usage (no `usage` in bodies, no usage chunk even when asked for)."""
    cached_tokens: int = Field(0, ge=0)
    """Prompt tokens reported as read from the provider's cache (capped at the prompt size)."""
    stream_chunk_tokens: int = Field(4, ge=1)
    """Tokens of answer text per streamed delta."""
    latency_ms: float = Field(0, ge=0)
    """Non-streams: total delay before the body. 0: ttft_ms + output tokens at tokens_per_second."""
    ttft_ms: float = Field(0, ge=0)
    """Streams: delay before the first text delta."""
    tokens_per_second: float = Field(0, ge=0)
    """Streams: pace of the deltas after the first one. 0: as fast as possible."""
    embedding_dimensions: int = Field(1536, ge=1, le=8192)
    """Vector length for /v1/embeddings when the request gives no `dimensions`."""
    error: ErrorFault | None = None
    timeout: TimeoutFault | None = None
    disconnect_mid_stream: DisconnectFault | None = None
    malformed_chunk: MalformedChunkFault | None = None
    garbage: GarbageFault | None = None
    reset: ResetFault | None = None
    huge_body: HugeBodyFault | None = None
    endless_stream: EndlessStreamFault | None = None
    header_flood: HeaderFloodFault | None = None

    @field_validator("answer", mode="before")
    @classmethod
    def _text_is_fixed(cls, value: Any) -> Any:
        return {"type": "fixed", "text": value} if isinstance(value, str) else value


class BehaviorSpec(Spec):
    """The whole behaviour file."""

    default: ModelBehaviorSpec = Field(default_factory=ModelBehaviorSpec)
    models: dict[str, ModelBehaviorSpec] = Field(default_factory=dict)
    """Overrides keyed by the request's `model` value, merged over `default` key by key."""
    record_requests: bool = True
    """Keep received requests for GET /_mock/requests. Switch off for benchmarks."""
    max_recorded_requests: int = Field(10_000, ge=1)
    api_key: str | None = None
    """If set, requests must carry it (`Authorization: Bearer` or `x-api-key`) or get 401."""
    response_headers: dict[str, str] = Field(default_factory=dict)
    """Extra headers on every answer (a `set-cookie`, to see what a gateway relays)."""

    @model_validator(mode="before")
    @classmethod
    def _merge_over_default(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
            return data
        base = _as_fields(data.get("default") or {})
        if not isinstance(base, dict):
            return data
        try:
            ModelBehaviorSpec.model_validate(base)
        except ValidationError:
            return data  # reported once under `default`, not again under every model
        merged: dict[Any, Any] = {}
        for name, raw in data["models"].items():
            override = _as_fields({} if raw is None else raw)
            merged[name] = {**base, **override} if isinstance(override, dict) else override
        return {**data, "models": merged}

    def for_model(self, model: str) -> ModelBehaviorSpec:
        """The behaviour for a request naming `model`."""
        return self.models.get(model, self.default)


def _as_fields(value: Any) -> Any:
    """Only the fields a section set, whether it came as YAML or as a spec object."""
    return value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) else value


@dataclass(frozen=True)
class BehaviorProblem:
    """One thing wrong with a behaviour file, at a dotted key path (`models.x.error.status`)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


class BehaviorError(ValueError):
    """The behaviour file cannot be used; `problems` names every reason."""

    def __init__(self, source: str, problems: list[BehaviorProblem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid mock-upstream behaviour {source}:\n{lines}")


def parse_behavior(data: Any, source: str = "<data>") -> BehaviorSpec:
    """Validate already-parsed YAML/JSON into a `BehaviorSpec`."""
    try:
        return BehaviorSpec.model_validate(data if data is not None else {})
    except ValidationError as exc:
        problems = [
            BehaviorProblem(_key_path(err["loc"]), _message(err["msg"], err.get("input")))
            for err in exc.errors()
        ]
        raise BehaviorError(source, problems) from exc


def load_behavior(path: str | Path) -> BehaviorSpec:
    """Read and validate a behaviour file (YAML; JSON is YAML too).

    A bare name that is no file, like `stale-rule`, names a shipped example (`EXAMPLES_DIR`).
    """
    file = Path(path)
    if not file.exists() and (EXAMPLES_DIR / f"{path}.yaml").is_file():
        file = EXAMPLES_DIR / f"{path}.yaml"
    try:
        text = file.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except OSError as exc:
        raise BehaviorError(str(path), [BehaviorProblem("", f"cannot read: {exc}")]) from exc
    except yaml.YAMLError as exc:
        raise BehaviorError(str(path), [BehaviorProblem("", f"not valid YAML: {exc}")]) from exc
    return parse_behavior(data, str(path))


def _message(message: str, value: Any) -> str:
    """The validation message, naming the offending value when it is short enough to read."""
    if isinstance(value, dict | list) or len(text := repr(value)) > 80:
        return message
    return f"{message} (got {text})"


def _key_path(loc: tuple[int | str, ...]) -> str:
    """`('models', 'x', 'answer', 'fixed', 'text')` -> `models.x.answer.text`.

    Pydantic puts the discriminator value of a tagged union into the location; the user never
    wrote that key, so it is left out.
    """
    parts = [
        str(part)
        for i, part in enumerate(loc)
        if not (i > 0 and loc[i - 1] == "answer" and part in _ANSWER_TYPES)
    ]
    return ".".join(parts)
