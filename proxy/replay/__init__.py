"""`mirrorgate replay` and evaluation sets: recorded traffic or a JSONL file sent to candidate
models offline, with bounded concurrency, budgets, resumption and a summary; evaluation sets
built from the store (`evalset build`), rotated, and their runs archived (`evalset history`).
Never loads the client path (`proxy.gateway`).
"""

from .command import run_replay
from .evalset_command import run_evalset

__all__ = [
    "run_evalset",
    "run_replay",
]
