"""The gateway's vocabulary, with no I/O: records, the gateway's error tree and `error_body`,
the endpoints, the pure rollout state machine, sampling and the one sticky key, pricing, budgets,
the one definition of a correction and of a pair's agreement (`signals.py`), signed feedback
tokens, time windows, the one conversion to aware UTC (`as_utc`) and the one door for background
tasks.
Imports only `proxy.config` and `analyzers`; every other package may import it.
"""

from .budget import HourlySpend
from .endpoints import ENDPOINTS, Endpoint
from .errors import (
    AuthError,
    Conflict,
    ForbiddenError,
    GatewayError,
    HeadersTooLarge,
    NotFound,
    PayloadTooLarge,
    RequestError,
    RequestTimeout,
    RouteNotFound,
    TooManyRequests,
    Unavailable,
    UnsupportedMediaType,
    UpstreamError,
    UpstreamTimeout,
    WireFormat,
    WrongWireFormat,
    error_body,
)
from .exact_json import dumps_exact, loads_exact
from .feedback_token import FEEDBACK_TOKEN_HEADER, FeedbackTokens, TokenVerdict, caller_id
from .pricing import cost_usd
from .records import (
    CUT_SHORT,
    JUDGE_ANALYZER,
    JUDGE_SCORE_DELTA,
    Arm,
    CheckRecord,
    ExchangeRecord,
    FeedbackRecord,
    FindingRecord,
    PairRecord,
    RecordSink,
    Status,
    StoredRecord,
    Usage,
)
from .rollout_state import (
    ACTIVE,
    OPERATOR_ACTIONS,
    Action,
    DeciderMemory,
    IllegalTransition,
    Phase,
    RolloutState,
    Transition,
    initial_state,
    rollback_target,
    serving,
    transition,
)
from .sampling import sampled
from .signals import Agreement, is_correction, judge_pair, pair_agreed
from .sticky import sticky_key
from .tasks import TaskSet
from .timewindow import parse_since
from .utc import as_utc

__all__ = [
    "ACTIVE",
    "CUT_SHORT",
    "ENDPOINTS",
    "FEEDBACK_TOKEN_HEADER",
    "JUDGE_ANALYZER",
    "JUDGE_SCORE_DELTA",
    "OPERATOR_ACTIONS",
    "Action",
    "Agreement",
    "Arm",
    "AuthError",
    "CheckRecord",
    "Conflict",
    "DeciderMemory",
    "Endpoint",
    "ExchangeRecord",
    "FeedbackRecord",
    "FeedbackTokens",
    "FindingRecord",
    "ForbiddenError",
    "GatewayError",
    "HeadersTooLarge",
    "HourlySpend",
    "IllegalTransition",
    "NotFound",
    "PairRecord",
    "PayloadTooLarge",
    "Phase",
    "RecordSink",
    "RequestError",
    "RequestTimeout",
    "RolloutState",
    "RouteNotFound",
    "Status",
    "StoredRecord",
    "TaskSet",
    "TokenVerdict",
    "TooManyRequests",
    "Transition",
    "Unavailable",
    "UnsupportedMediaType",
    "UpstreamError",
    "UpstreamTimeout",
    "Usage",
    "WireFormat",
    "WrongWireFormat",
    "as_utc",
    "caller_id",
    "cost_usd",
    "dumps_exact",
    "error_body",
    "initial_state",
    "is_correction",
    "judge_pair",
    "loads_exact",
    "pair_agreed",
    "parse_since",
    "rollback_target",
    "sampled",
    "serving",
    "sticky_key",
    "transition",
]
