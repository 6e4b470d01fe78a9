"""Startup wiring, the one place that knows every part: `Gateway` builds the parts from the
config and serves them as one ASGI app; `run_gateway` runs it under uvicorn with signal
handling. Imports every package but `cli`.
"""

from .serve import GatewayServer, run_gateway

__all__ = [
    "GatewayServer",
    "run_gateway",
]
