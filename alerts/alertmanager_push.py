"""Alertmanager push sink: `POST {url}/api/v2/alerts` with a list of postable alerts.

The v2 `postableAlert` is `{labels, annotations?, startsAt?, endsAt?, generatorURL?}`.
Labels identify the alert in Alertmanager (grouping, silences, inhibition), so they come only
from config names and the closed set of kinds and severities — never from free text, which goes to
annotations. No `endsAt` is sent: Alertmanager resolves the alert after its `resolve_timeout`
unless it is pushed again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from alerts.alert import Alert
from alerts.sink import post_json
from alerts.slack import format_number

ORIGIN_LABEL = "mirrorgate_origin"
"""Set to `mirrorgate` on every pushed alert, so that the inbound webhook can recognise mirrorgate's
own alerts routed back to it and not act on them (see `alerts.alertmanager_webhook`)."""
ORIGIN_VALUE = "mirrorgate"

ALERTNAMES = {
    "rollback": "MirrorgateRollback",
    "rule_regression": "MirrorgateRuleRegression",
    "verdict_fail": "MirrorgateVerdictFail",
    "step_held": "MirrorgateStepHeld",
    "experiment_arm_stopped": "MirrorgateExperimentArmStopped",
    "experiment_srm": "MirrorgateExperimentSRM",
}


def postable_alert(alert: Alert) -> dict[str, Any]:
    """One v2 `postableAlert` for `alert`."""
    labels = {
        "alertname": ALERTNAMES[alert.kind],
        "severity": alert.severity,
        "mirrorgate_kind": alert.kind,
        "mirrorgate_route": alert.route,
        "mirrorgate_target": alert.target,
        ORIGIN_LABEL: ORIGIN_VALUE,
    }
    optional = {
        "mirrorgate_rule": alert.rule,
        "mirrorgate_rule_version": alert.rule_version,
        "mirrorgate_check": alert.check,
        # One rollout's alerts are one Alertmanager alert; the next rollout's are a new one, so a
        # second rollback of the route notifies instead of updating the first, still firing.
        "mirrorgate_rollout_id": alert.rollout_id,
        "mirrorgate_rolled_back_to": alert.rolled_back_to,
    }
    # Alertmanager treats an empty label value as an absent label; leave absent ones out.
    labels.update({k: v for k, v in optional.items() if v})
    description = [alert.summary]
    if alert.evidence:
        description.append(
            "Evidence: " + ", ".join(f"{k}={format_number(v)}" for k, v in alert.evidence.items())
        )
    if alert.example_request_ids:
        description.append("Example request ids: " + ", ".join(alert.example_request_ids))
    body: dict[str, Any] = {
        "labels": labels,
        "annotations": {
            "summary": alert.summary,
            "description": "\n".join(description),
            "mirrorgate_fingerprint": alert.fingerprint,
        },
        "startsAt": alert.starts_at.isoformat(),
    }
    if alert.generator_url:
        body["generatorURL"] = alert.generator_url
    return body


@dataclass(frozen=True, slots=True)
class AlertmanagerPushSink:
    """Pushes alerts to the Alertmanager at `url` (its base URL, e.g. `http://127.0.0.1:9093`)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    name: str = "alertmanager"

    @property
    def endpoint(self) -> str:
        return self.url.rstrip("/") + "/api/v2/alerts"

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> None:
        await post_json(client, self.name, self.endpoint, [postable_alert(alert)], self.headers)
