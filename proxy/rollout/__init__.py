"""Rollouts at run time: the manager (persist a transition, then apply it), the decider that
judges each canary against its primary on one replica at a time, the evidence it reads, and the
planner that sizes a rollout before it starts.
Imports `proxy.gateway` and below; never a sibling (`mirror`, `replay`, `report`).
"""

from .controller import RolloutController
from .eta import RolloutEta, eta_json, rollout_eta, step_since
from .evidence import traffic_profile
from .experiment_decider import ExperimentDecider, decision_json
from .experiments import ExperimentChange, ExperimentConflictError, ExperimentManager
from .guard import GuardLook, RuleGuard
from .manager import RolloutManager, RouteUnknownError, TransitionConflictError
from .offline_gate import OFFLINE_NO_RUNS, offline_evidence, offline_status
from .plan import RolloutPlan, StepPlan, TrafficProfile, plan_rollout
from .probe_budget import probe_budget_until

__all__ = [
    "OFFLINE_NO_RUNS",
    "ExperimentChange",
    "ExperimentConflictError",
    "ExperimentDecider",
    "ExperimentManager",
    "GuardLook",
    "RolloutController",
    "RolloutEta",
    "RolloutManager",
    "RolloutPlan",
    "RouteUnknownError",
    "RuleGuard",
    "StepPlan",
    "TrafficProfile",
    "TransitionConflictError",
    "decision_json",
    "eta_json",
    "offline_evidence",
    "offline_status",
    "plan_rollout",
    "probe_budget_until",
    "rollout_eta",
    "step_since",
    "traffic_profile",
]
