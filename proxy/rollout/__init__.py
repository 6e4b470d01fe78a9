"""Rollouts at run time: the manager (persist a transition, then apply it), the decider that
judges each canary against its primary on one replica at a time, and the evidence it reads.
Imports `proxy.gateway` and below; never a sibling (`mirror`, `replay`, `report`).
"""

from .controller import RolloutController
from .manager import RolloutManager, RouteUnknownError, TransitionConflictError

__all__ = [
    "RolloutController",
    "RolloutManager",
    "RouteUnknownError",
    "TransitionConflictError",
]
