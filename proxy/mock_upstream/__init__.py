"""`mirrorgate mock-upstream`: the built-in fake model server.

The only fake in mirrorgate is the LLM. This one speaks the real OpenAI (chat completions,
completions, embeddings, responses, models) and Anthropic (messages) wire formats, streaming
included, with real token counts, and misbehaves on request: latency, time to first token, stream
pacing, HTTP errors, stalls, resets, mid-stream disconnects, malformed chunks, non-JSON bodies,
missing usage. Its behaviour file is documented in docs/mock-upstream.md.

    create_app(behavior)        the ASGI app (proxy.mock_upstream.app)
    serve(host, port, path)     run it in the foreground (the CLI)
    MockUpstreamServer(...)     run it on 127.0.0.1:0 in a thread (tests, benchmarks)
"""

from proxy.mock_upstream.app import MockUpstreamApp, create_app
from proxy.mock_upstream.behavior import (
    BehaviorError,
    BehaviorSpec,
    ModelBehaviorSpec,
    load_behavior,
    parse_behavior,
)
from proxy.mock_upstream.server import MockUpstreamServer, serve

__all__ = [
    "BehaviorError",
    "BehaviorSpec",
    "MockUpstreamApp",
    "MockUpstreamServer",
    "ModelBehaviorSpec",
    "create_app",
    "load_behavior",
    "parse_behavior",
    "serve",
]
