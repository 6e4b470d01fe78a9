"""The HTTP surface other than the proxied endpoints: FastAPI routers for the admin API, rollouts,
feedback, the Alertmanager webhook and the public routes (models, health, readiness, metrics),
and the one translation of errors into their answers (`install_error_handling`: routers raise,
it answers). Imports everything below it; only the app's wiring imports it.
"""

from .admin import AdminAuth, build_admin_router, probe_scores, read_limited
from .doors import StateChangeGuard
from .errors import install_error_handling
from .feedback import FeedbackService, RecentExchanges, build_feedback_router
from .feedback_auth import FeedbackAuth
from .public import build_public_router
from .rollouts import build_rollout_router, state_json
from .token_buckets import TokenBuckets

__all__ = [
    "AdminAuth",
    "FeedbackAuth",
    "FeedbackService",
    "RecentExchanges",
    "StateChangeGuard",
    "TokenBuckets",
    "build_admin_router",
    "build_feedback_router",
    "build_public_router",
    "build_rollout_router",
    "install_error_handling",
    "probe_scores",
    "read_limited",
    "state_json",
]
