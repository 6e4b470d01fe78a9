"""The client path: ASGI helpers, the exchange (read, plan, call, forward, record), canary and
sticky routing, rule-version resolution, and the hooks (`ExchangeObserver`) through which
off-path features listen without the client path importing them. Imports the layers below
(`store`, `upstream`, `observability`, `core`, `config`).
"""

from .access_log import AccessLog
from .asgi import ClientGone, Receive, Scope, Send, read_body
from .exchange import ProxyHandler
from .hooks import ExchangeObserver, FinishedExchange, RefusedRequest
from .routing import RoutePlan, RouteState, RouteTable
from .rule_values import RuleValues, VersionValues
from .rules import OVERFLOW_VERSION, RuleTracker, VersionPolicy, version_policies

__all__ = [
    "OVERFLOW_VERSION",
    "AccessLog",
    "ClientGone",
    "ExchangeObserver",
    "FinishedExchange",
    "ProxyHandler",
    "Receive",
    "RefusedRequest",
    "RoutePlan",
    "RouteState",
    "RouteTable",
    "RuleTracker",
    "RuleValues",
    "Scope",
    "Send",
    "VersionPolicy",
    "VersionValues",
    "read_body",
    "version_policies",
]
