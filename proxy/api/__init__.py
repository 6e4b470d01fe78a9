"""The HTTP surface other than the proxied endpoints: FastAPI routers for the admin API, rollouts,
experiments, feedback, business operations' outcomes, the Alertmanager webhook and the public
routes (models, health, readiness, metrics), and the one translation of errors into their
answers (`install_error_handling`: routers raise, it answers). Imports everything below it;
only the app's wiring imports it.
"""

from .admin import AdminAuth, AdminParts, admin_router, probe_scores, read_limited
from .doors import StateChangeGuard
from .errors import install_error_handling
from .experiments import ExperimentStatuses, experiment_router, experiment_status
from .feedback import FeedbackService, RecentExchanges, feedback_router
from .feedback_auth import FeedbackAuth
from .outcomes import OutcomeService, RecentOperations, outcome_router
from .public import PublicParts, public_router
from .rollouts import RolloutParts, rollout_forecast, rollout_router, state_json
from .token_buckets import TokenBuckets

__all__ = [
    "AdminAuth",
    "AdminParts",
    "ExperimentStatuses",
    "FeedbackAuth",
    "FeedbackService",
    "OutcomeService",
    "PublicParts",
    "RecentExchanges",
    "RecentOperations",
    "RolloutParts",
    "StateChangeGuard",
    "TokenBuckets",
    "admin_router",
    "experiment_router",
    "experiment_status",
    "feedback_router",
    "install_error_handling",
    "outcome_router",
    "probe_scores",
    "public_router",
    "read_limited",
    "rollout_forecast",
    "rollout_router",
    "state_json",
]
