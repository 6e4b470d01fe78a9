"""Rollouts at run time: the manager (persist a transition, then apply it), the decider that
judges each canary against its primary on one replica at a time, the evidence it reads, and the
planner that sizes a rollout before it starts.
Imports `proxy.gateway` and below; never a sibling (`mirror`, `replay`, `report`).
"""

from .controller import RolloutController
from .evidence import traffic_profile
from .experiment_decider import ExperimentDecider, decision_json
from .experiments import ExperimentChange, ExperimentConflictError, ExperimentManager
from .guard import GuardLook, RuleGuard
from .manager import RolloutManager, RouteUnknownError, TransitionConflictError
from .offline_gate import OFFLINE_NO_RUNS, offline_evidence, offline_status
from .plan import RolloutPlan, StepPlan, TrafficProfile, plan_rollout

__all__ = [
    "OFFLINE_NO_RUNS",
    "ExperimentChange",
    "ExperimentConflictError",
    "ExperimentDecider",
    "ExperimentManager",
    "GuardLook",
    "RolloutController",
    "RolloutManager",
    "RolloutPlan",
    "RouteUnknownError",
    "RuleGuard",
    "StepPlan",
    "TrafficProfile",
    "TransitionConflictError",
    "decision_json",
    "offline_evidence",
    "offline_status",
    "plan_rollout",
    "traffic_profile",
]
