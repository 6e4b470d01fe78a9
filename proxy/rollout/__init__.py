"""Rollouts at run time: the manager (persist a transition, then apply it), the decider that
judges each canary against its primary on one replica at a time, the evidence it reads, and the
planner that sizes a rollout before it starts.
Imports `proxy.gateway` and below; never a sibling (`mirror`, `replay`, `report`).
"""

from .controller import RolloutController
from .evidence import traffic_profile
from .manager import RolloutManager, RouteUnknownError, TransitionConflictError
from .plan import RolloutPlan, StepPlan, TrafficProfile, plan_rollout

__all__ = [
    "RolloutController",
    "RolloutManager",
    "RolloutPlan",
    "RouteUnknownError",
    "StepPlan",
    "TrafficProfile",
    "TransitionConflictError",
    "plan_rollout",
    "traffic_profile",
]
