"""`mirrorgate report`: the arms of every route compared over a window of recorded traffic, as
Markdown or a self-contained HTML page. Reads the store only; never loads the client path
(`proxy.gateway`).
"""

from .command import run_report

__all__ = [
    "run_report",
]
