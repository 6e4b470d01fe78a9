"""The review console at `/ui`: server-rendered pages for reviewers and admins, with a little
vanilla JavaScript, served by the gateway itself (assets in `static/`, no CDN, no build step).

Sign-in and sessions (`auth`), the page shell and escaping (`layout`), the pages' routers, and
the refusals they raise (`install_console_errors` answers them). The routes are built once per
process (`console_routes`); an app serves them with its gateway's `ConsoleParts` on
`app.state.console_parts`. Imports `proxy.api` and below; only the app's wiring imports it.
"""

from .auth import ConsoleAuth, Principal
from .experiments import ExperimentSource
from .layout import esc, page
from .parts import ConsoleParts
from .refusal import ConsoleRefusal, install_console_errors
from .router import console_routes

__all__ = [
    "ConsoleAuth",
    "ConsoleParts",
    "ConsoleRefusal",
    "ExperimentSource",
    "Principal",
    "console_routes",
    "esc",
    "install_console_errors",
    "page",
]
