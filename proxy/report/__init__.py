"""`mirrorgate report`: the arms of every route compared over a window of recorded traffic, as
Markdown or a self-contained HTML page. Reads the store only; never loads the client path
(`proxy.gateway`). Its rollout history (`build_rollouts`) is also what the console's rollout
page reads.
"""

from .command import run_report
from .rollouts import (
    RollbackEvidence,
    RolloutReport,
    TransitionReport,
    VerdictReport,
    build_rollouts,
    describe_transition,
    describe_verdict,
)

__all__ = [
    "RollbackEvidence",
    "RolloutReport",
    "TransitionReport",
    "VerdictReport",
    "build_rollouts",
    "describe_transition",
    "describe_verdict",
    "run_report",
]
