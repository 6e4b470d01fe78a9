"""Who may change things: the checks every state-changing admin and webhook call passes, token
or not, before it is read.

A browser can be made to send a request to the gateway from any web page: a cross-site form or
`fetch` (CSRF), or a page whose own name is re-pointed at 127.0.0.1 (DNS rebinding). Neither can
send `content-type: application/json` without the browser asking the gateway first (a CORS
preflight, which it never answers), and neither can choose the `Host` it sends: the name of the
attacker's page. So a call that is not a GET or HEAD is refused:

    403  its `Host` is not a name of this gateway (`StateChangeGuard.allows`), or it carries an
         `Origin` whose host is not one (a `null` origin included)
    415  its body is not declared `application/json`

The names of this gateway: the loopback names (127.0.0.1, localhost, [::1]) on the port the
connection reached — in `Host` on any port (a rebound page cannot send one, and `kubectl
port-forward` sends its own local port) —, the address the connection reached on that port, the
host of `server.external_url`, and each of `server.allowed_hosts`. The admin API checks its reads
too (they show rule diffs and rollout reasons); other reads stay open to any `Host`: Prometheus
and the kubelet send the pod's address to /metrics and /readyz, and a read changes nothing.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request

from proxy.config import MirrorgateConfig
from proxy.core import ForbiddenError, UnsupportedMediaType

SAFE_METHODS = frozenset({"GET", "HEAD"})
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def split_host(value: str, default_port: int) -> tuple[str, int] | None:
    """`name[:port]` as (lower-case name, port); IPv6 names keep their brackets. None: not a
    host."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value.partition("]")
        name += bracket
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:]
    else:
        name, _, port_text = value.partition(":")
    if not name or name == "[]":
        return None
    if not port_text:
        return name, default_port
    if not port_text.isdigit() or len(port_text) > 5:
        return None
    return name, int(port_text)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host.lower()


class StateChangeGuard:
    """The checks of the module docstring, built once from the configuration."""

    def __init__(self, config: MirrorgateConfig) -> None:
        server = config.server
        self._any_port: set[str] = set()
        self._exact: set[tuple[str, int]] = set()
        self._local_names = set(LOOPBACK_NAMES)
        if server.host not in _WILDCARDS:
            self._local_names.add(_bracketed(server.host))
        if server.external_url:
            parts = urlsplit(server.external_url)
            found = split_host(
                parts.netloc.rpartition("@")[2], _DEFAULT_PORTS.get(parts.scheme, 80)
            )
            if found is not None:
                self._exact.add(found)
        for entry in server.allowed_hosts:
            found = split_host(entry, -1)  # -1: the entry names no port
            if found is not None and found[1] == -1:
                self._any_port.add(found[0])
            elif found is not None:
                self._exact.add(found)

    def allows(
        self,
        host: tuple[str, int],
        local: tuple[str, int] | None,
        *,
        any_loopback_port: bool = False,
    ) -> bool:
        """Whether `host` (name, port) names this gateway for a connection that reached `local`
        (the listening socket's address and port; None when the server does not say).
        `any_loopback_port`: a loopback name passes on any port (right for `Host`, which a
        rebound page cannot set to one; wrong for `Origin`, where another port is another site)."""
        name, port = host
        if name in self._any_port or host in self._exact:
            return True
        if local is None:
            return False
        if any_loopback_port and name in LOOPBACK_NAMES:
            return True
        local_name, local_port = _bracketed(str(local[0])), int(local[1])
        return port == local_port and (name in self._local_names or name == local_name)

    def __call__(self, request: Request) -> None:
        """Refuse a state-changing call as the module docstring says; let reads through."""
        self.refuse_foreign(request)
        self.refuse_non_json(request)

    def refuse_foreign(self, request: Request, *, reads: bool = False) -> None:
        """403 for a state-changing call under another `Host` or from another `Origin`; with
        `reads`, for a read too (the admin API's reads show prompts and rollout reasons, which a
        rebound page must not see)."""
        if request.method in SAFE_METHODS and not reads:
            return
        scope = request.scope
        scheme = scope.get("scheme", "http")
        server = scope.get("server")  # (address, port) of the listening socket; port may be None
        local = (
            (str(server[0]), int(server[1] or _DEFAULT_PORTS.get(scheme, 80))) if server else None
        )
        raw_host = request.headers.get("host", "")
        host = split_host(raw_host, _DEFAULT_PORTS.get(scheme, 80))
        if host is None or not self.allows(host, local, any_loopback_port=True):
            raise ForbiddenError(
                f"Host '{raw_host[:100]}' is not a name of this gateway: state-changing calls "
                "are answered only under a loopback name, server.external_url's host or one "
                "of server.allowed_hosts"
            )
        origin = request.headers.get("origin")
        if origin is not None:
            parts = urlsplit(origin.strip())
            found = (
                split_host(parts.netloc, _DEFAULT_PORTS.get(parts.scheme, 80))
                if parts.scheme in ("http", "https") and not parts.path.strip("/")
                else None
            )
            if found is None or not self.allows(found, local):
                raise ForbiddenError(
                    f"Origin '{origin[:100]}' is not this gateway: state-changing calls from "
                    "web pages of other sites are refused"
                )

    def refuse_non_json(self, request: Request) -> None:
        """415 for a state-changing call whose body is not declared JSON."""
        if request.method in SAFE_METHODS:
            return
        media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media_type != "application/json":
            raise UnsupportedMediaType(
                "state-changing calls take a JSON body: send 'content-type: application/json' "
                "(and '{}' when there is nothing to say)"
            )
