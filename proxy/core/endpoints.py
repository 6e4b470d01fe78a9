"""The proxied endpoints: which wire format each speaks and where it goes upstream."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import WireFormat


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One proxied API operation."""

    name: str
    """Name used in records: chat.completions, completions, embeddings, responses or messages."""
    path: str
    """The path clients call on mirrorgate."""
    wire: WireFormat
    """The wire format of requests, responses and errors."""
    upstream_path: str
    """Appended to the model's `base_url` (OpenAI's end in /v1; Anthropic's are bare hosts)."""
    operation: str
    """OpenTelemetry `gen_ai.operation.name`."""
    streams: bool = True
    """Whether `"stream": true` is meaningful here."""
    usage_option: bool = False
    """Whether a stream reports usage only when asked (`stream_options.include_usage`)."""


ENDPOINTS: dict[str, Endpoint] = {
    e.path: e
    for e in (
        Endpoint("chat.completions", "/v1/chat/completions", "openai", "/chat/completions", "chat",
                 usage_option=True),
        Endpoint("completions", "/v1/completions", "openai", "/completions", "text_completion",
                 usage_option=True),
        Endpoint("embeddings", "/v1/embeddings", "openai", "/embeddings", "embeddings",
                 streams=False),
        Endpoint("responses", "/v1/responses", "openai", "/responses", "chat"),
        Endpoint("messages", "/v1/messages", "anthropic", "/v1/messages", "chat"),
    )
}  # fmt: skip
