"""The experiments pages (admins only), drawn from the JSON of `GET /admin/experiments/{route}`.

    GET /ui/experiments            every route with an experiment: running or not, its arms
    GET /ui/experiments/{route}    one experiment: arms and their models, weights, metrics, each
                                   arm's lifts with their intervals, the decision in words,
                                   the sample-ratio check, events and warnings

The console reads experiments through an `ExperimentSource` (the app's wiring hands over the
admin API's own answer); a gateway without one runs no experiments and the page says so.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' dependencies from their
# annotations.

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Protocol
from urllib.parse import quote

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from proxy.store import StoreUnavailableError

from .auth import Principal
from .layout import esc, page
from .parts import ConsoleParts, admin_page, console_parts
from .refusal import ConsoleRefusal
from .rollout_page import when


class ExperimentSource(Protocol):
    """Where the console reads experiments."""

    def routes(self) -> Sequence[str]:
        """The routes with an experiment in the running configuration."""
        ...

    async def status(self, route: str) -> Mapping[str, Any]:
        """The answer of `GET /admin/experiments/{route}` for a route of `routes()`."""
        ...


def _link(route: str) -> str:
    return "/ui/experiments/" + quote(route, safe="")


def _number(value: Any, pattern: str = ".3g") -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    return format(value, pattern)


def _lift(value: Any, scale: str) -> str:
    """A lift in its scale: points for shares (+2.1 pt), percent for the rest (-41 %)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    return f"{value * 100:+.1f} pt" if scale == "points" else f"{value * 100:+.1f} %"


def _lifts(lifts: Sequence[Mapping[str, Any]]) -> str:
    if not lifts:
        return '<p class="note">No lifts yet.</p>'
    rows = "".join(
        f"<tr><td>{esc(x.get('metric'))}</td>"
        f"<td>{esc(_number(x.get('control_value')))}</td><td>{esc(_number(x.get('arm_value')))}</td>"
        f"<td>{esc(_lift(x.get('estimate'), str(x.get('scale'))))}</td>"
        f"<td>{esc(_lift(x.get('low'), str(x.get('scale'))))} to "
        f"{esc(_lift(x.get('high'), str(x.get('scale'))))}</td>"
        f"<td>{esc(x.get('better'))}</td>"
        f"<td>{esc(x.get('n_control'))} / {esc(x.get('n_arm'))}</td></tr>"
        for x in lifts
        if isinstance(x, Mapping)
    )
    return (
        '<div class="table-box"><table><caption>Lifts against control, with always-valid '
        'intervals</caption><thead><tr><th scope="col">Metric</th><th scope="col">Control</th>'
        '<th scope="col">Arm</th><th scope="col">Lift</th><th scope="col">Interval</th>'
        '<th scope="col">Better</th><th scope="col">Units (control / arm)</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )


def _decision(decision: Mapping[str, Any] | None) -> str:
    if not decision:
        return (
            '<section aria-labelledby="decision"><h2 id="decision">Decision</h2>'
            '<p class="empty">The decider has not looked at this experiment yet.</p></section>'
        )
    parts = [
        '<section aria-labelledby="decision"><h2 id="decision">Decision</h2>',
        f"<p>{esc(decision.get('text'))} <span class='note'>({when(decision.get('at'))}; "
        f"primary metric {esc(decision.get('primary_metric'))}, guardrails "
        f"{esc(', '.join(map(str, decision.get('guardrails') or [])) or 'none')}, minimum "
        f"detectable effect {esc(_number(decision.get('minimum_detectable_effect')))})</span></p>",
    ]
    for arm in decision.get("arms") or []:
        if not isinstance(arm, Mapping):
            continue
        verdict = str(arm.get("verdict") or "")
        css = {"ship": "pass", "worse": "fail", "stopped": "fail"}.get(verdict, "inconclusive")
        breached = ", ".join(map(str, arm.get("breached") or []))
        parts.append(
            f"<h3>Arm {esc(arm.get('arm'))} · {esc(arm.get('model'))}: "
            f'<span class="{css}">{esc(verdict.replace("_", " "))}</span></h3>'
            f"<p>{esc(arm.get('text'))}</p>"
            '<dl class="facts">'
            f"<dt>Units</dt><dd>{esc(arm.get('units'))} ({esc(arm.get('operations'))} "
            "operations)</dd>"
            f"<dt>Needs</dt><dd>{esc(arm.get('needs') if arm.get('needs') is not None else '—')}"
            f"</dd><dt>ETA</dt><dd>{esc(_duration(arm.get('eta_s')))}</dd>"
            + (f"<dt>Guardrails breached</dt><dd>{esc(breached)}</dd>" if breached else "")
            + "</dl>"
            + _lifts(arm.get("lifts") or [])
        )
    srm = decision.get("srm")
    if isinstance(srm, Mapping):
        flagged = bool(srm.get("flagged"))
        parts.append(
            f'<p class="{"problem" if flagged else "note"}">Sample ratio: '
            + ("the split does not follow the weights" if flagged else "as the weights say")
            + f" (p = {esc(_number(srm.get('p_value')))}).</p>"
        )
    parts.append("</section>")
    return "".join(parts)


def _duration(seconds: Any) -> str:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return "—"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def experiment_body(status: Mapping[str, Any]) -> str:
    """One experiment's page from its status JSON (every value escaped)."""
    config = status.get("config") or {}
    state = status.get("experiment") or {}
    serving = status.get("serving") or {}
    parts = []
    for warning in status.get("warnings") or []:
        parts.append(f'<p class="problem" role="alert">{esc(warning)}</p>')
    arms = config.get("arms") if isinstance(config, Mapping) else None
    weights = serving.get("weights_percent") or state.get("weights_percent") or {}
    stopped = set(state.get("stopped_arms") or [])
    control = status.get("control")

    def arm_row(name: str, arm: Any) -> str:
        model = arm.get("model") if isinstance(arm, Mapping) else ""
        role = "stopped" if name in stopped else ("control" if name == control else "running")
        weight = _number(weights.get(name), "g")
        return (
            f"<tr><td>{esc(name)}</td><td>{esc(model)}</td><td>{esc(weight)}%</td>"
            f"<td>{esc(role)}</td></tr>"
        )

    rows = "".join(
        arm_row(str(name), arm) for name, arm in (arms.items() if isinstance(arms, Mapping) else [])
    )
    guardrails = ", ".join(map(str, config.get("guardrails") or [])) or "none"
    started = f"{when(state.get('started_at'))} by {esc(state.get('actor') or '—')}"
    parts.append(
        '<section aria-labelledby="arms"><h2 id="arms">Arms</h2><dl class="facts">'
        f"<dt>State</dt><dd>{esc(state.get('state') or 'not started')}</dd>"
        f"<dt>Unit</dt><dd>{esc(config.get('unit'))}</dd>"
        f"<dt>Primary metric</dt><dd>{esc(config.get('primary_metric'))}</dd>"
        f"<dt>Guardrails</dt><dd>{esc(guardrails)}</dd>"
        f"<dt>Started</dt><dd>{started}</dd>"
        f"<dt>Reason</dt><dd>{esc(state.get('reason') or '—')}</dd></dl>"
        '<div class="table-box"><table><thead><tr><th scope="col">Arm</th>'
        '<th scope="col">Model</th><th scope="col">Weight</th><th scope="col">Status</th>'
        f"</tr></thead><tbody>{rows}</tbody></table></div></section>"
    )
    parts.append(_decision(status.get("decision")))
    events = status.get("events") or []
    if events:
        items = "".join(
            f"<tr><td>{when(e.get('at'))}</td><td>{esc(e.get('kind'))}</td>"
            f"<td>{esc(e.get('arm') or '')}</td><td>{esc(e.get('metric') or '')}</td>"
            f"<td>{esc(e.get('actor') or '')}</td>"
            f"<td>{esc(e.get('detail') or '')}</td></tr>"
            for e in events
            if isinstance(e, Mapping)
        )
        parts.append(
            '<section aria-labelledby="events"><h2 id="events">Events</h2><div class="table-box">'
            '<table><thead><tr><th scope="col">When</th><th scope="col">What</th>'
            '<th scope="col">Arm</th><th scope="col">Metric</th><th scope="col">Actor</th>'
            f'<th scope="col">Detail</th></tr></thead><tbody>{items}</tbody></table></div>'
            "</section>"
        )
    return "".join(parts)


experiments_router = APIRouter(prefix="/ui/experiments")


@experiments_router.get("")
async def every_experiment(
    principal: Annotated[Principal, Depends(admin_page)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
) -> HTMLResponse:
    source = parts.experiments
    routes = list(source.routes()) if source is not None else []
    if not routes:
        body = '<p class="empty">This gateway runs no experiments.</p>'
    else:
        cards = []
        for route in routes:
            status = await source.status(route) if source is not None else {}
            state = status.get("experiment") or {}
            arms = (status.get("config") or {}).get("arms") or {}
            cards.append(
                f'<section class="card"><h2><a href="{esc(_link(route))}">{esc(route)}</a></h2>'
                f"<p>{esc(state.get('state') or 'not started')} · arms "
                f"{esc(', '.join(map(str, arms)))}</p></section>"
            )
        body = f'<div class="cards">{"".join(cards)}</div>'
    return page(
        title="Experiments",
        principal=principal,
        csrf=parts.auth.csrf_token(principal),
        active="experiments",
        body=body,
    )


@experiments_router.get("/{route}")
async def one_experiment(
    route: str,
    principal: Annotated[Principal, Depends(admin_page)],
    parts: Annotated[ConsoleParts, Depends(console_parts)],
) -> HTMLResponse:
    source = parts.experiments
    if source is None or route not in source.routes():
        raise ConsoleRefusal(404, f"no experiment on route '{route[:200]}'")
    try:
        status = await source.status(route)
    except StoreUnavailableError as exc:
        raise ConsoleRefusal(503, f"the store cannot be reached: {exc}") from exc
    return page(
        title=f"Experiment on {route}",
        principal=principal,
        csrf=parts.auth.csrf_token(principal),
        active="experiments",
        body=experiment_body(status),
    )
