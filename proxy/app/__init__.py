"""Startup wiring, the one place that knows every part: `Gateway` builds the parts from the
config and serves them as one ASGI app; `run_gateway` runs it under uvicorn with signal
handling, and `run_workers` runs several of them on one port (`serve --workers`).
Imports every package but `cli`.
"""

from .serve import GatewayServer, run_gateway
from .workers import run_workers

__all__ = [
    "GatewayServer",
    "run_gateway",
    "run_workers",
]
