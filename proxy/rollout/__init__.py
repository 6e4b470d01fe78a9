"""Rollouts at run time: the manager (persist a transition, then apply it), the decider that
judges each canary against its primary on one replica at a time, the evidence it reads, and the
planner that sizes a rollout before it starts.
Imports `proxy.gateway` and below; never a sibling (`mirror`, `replay`, `report`).
"""

from .controller import RolloutController
from .evidence import traffic_profile
from .guard import GuardLook, RuleGuard
from .manager import RolloutManager, RouteUnknownError, TransitionConflictError
from .offline_gate import offline_evidence
from .plan import RolloutPlan, StepPlan, TrafficProfile, plan_rollout

__all__ = [
    "GuardLook",
    "RolloutController",
    "RolloutManager",
    "RolloutPlan",
    "RouteUnknownError",
    "RuleGuard",
    "StepPlan",
    "TrafficProfile",
    "TransitionConflictError",
    "offline_evidence",
    "plan_rollout",
    "traffic_profile",
]
