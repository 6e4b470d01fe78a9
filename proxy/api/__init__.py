"""The HTTP surface other than the proxied endpoints: FastAPI routers for the admin API, rollouts,
feedback and the Alertmanager webhook, with one translation of the gateway's errors into
responses. Imports everything below it; only the app's wiring imports it.
"""

from .admin import AdminAuth, build_admin_router, gateway_error_response
from .feedback import FeedbackService, RecentExchanges
from .rollouts import build_rollout_router

__all__ = [
    "AdminAuth",
    "FeedbackService",
    "RecentExchanges",
    "build_admin_router",
    "build_rollout_router",
    "gateway_error_response",
]
