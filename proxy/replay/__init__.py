"""`mirrorgate replay` and evaluation sets: recorded traffic or a JSONL file sent to candidate
models offline, with bounded concurrency, budgets, resumption and a summary. Never loads the
client path (`proxy.gateway`).
"""

from .command import run_replay

__all__ = [
    "run_replay",
]
