"""Parsing the inbound Alertmanager webhook (payload version "4") into frozen `InboundAlert`s.

Everything is validated here, once: a malformed payload raises `PayloadError` naming the field
(`alerts[1].startsAt`), and the HTTP layer answers 400 with nothing changed. Limits, so a hostile or
broken sender cannot make the gateway parse without bound: `MAX_PAYLOAD_BYTES` of body,
`MAX_ALERTS` alerts, `MAX_LABELS` labels/annotations per map, `MAX_VALUE_CHARS` per string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from alerts.errors import PayloadError

MAX_PAYLOAD_BYTES = 1_048_576
MAX_ALERTS = 1000
MAX_LABELS = 128
MAX_VALUE_CHARS = 16_384
SUPPORTED_VERSION = "4"
# Go's zero time: Alertmanager sends it as endsAt of an alert that has no end yet.
GO_ZERO_TIME_YEAR = 1

Status = Literal["firing", "resolved"]
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class InboundAlert:
    """One alert of an Alertmanager notification."""

    status: Status
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: datetime
    """Timezone-aware; with `fingerprint` it identifies one firing of the alert."""
    ends_at: datetime | None
    """None while firing with no end (Alertmanager sends Go's zero time `0001-01-01T00:00:00Z`)."""
    generator_url: str
    fingerprint: str
    """Alertmanager's hash of the label set (16 hex digits)."""

    @property
    def alertname(self) -> str:
        return self.labels.get("alertname", "")


@dataclass(frozen=True, slots=True)
class AlertmanagerPayload:
    """A whole webhook notification: the group and its alerts."""

    version: str
    group_key: str
    status: Status
    receiver: str
    group_labels: Mapping[str, str]
    common_labels: Mapping[str, str]
    common_annotations: Mapping[str, str]
    external_url: str
    alerts: tuple[InboundAlert, ...]
    truncated_alerts: int
    """How many alerts Alertmanager left out (its `max_alerts`); they are not seen here."""


def parse_payload(body: bytes | str) -> AlertmanagerPayload:
    """Parse and validate a raw request body; raise `PayloadError` naming the bad field."""
    raw = body.encode() if isinstance(body, str) else body
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise PayloadError("body", f"{len(raw)} bytes is over the limit of {MAX_PAYLOAD_BYTES}")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError("body", f"not valid JSON: {exc}") from exc
    except RecursionError:  # the parser recurses once per level of nesting
        raise PayloadError(
            "body", "JSON nested too deeply (an Alertmanager payload is flat)"
        ) from None
    return parse_document(doc)


def parse_document(doc: Any) -> AlertmanagerPayload:
    """Validate an already decoded JSON document."""
    if not isinstance(doc, dict):
        raise PayloadError("body", f"must be a JSON object, got {_type(doc)}")
    version = _string(doc, "version", "version", required=True)
    if version != SUPPORTED_VERSION:
        raise PayloadError("version", f"must be {SUPPORTED_VERSION!r}, got {version!r}")
    alerts_doc = doc.get("alerts")
    if alerts_doc is None:
        raise PayloadError("alerts", "is required")
    if not isinstance(alerts_doc, list):
        raise PayloadError("alerts", f"must be a list, got {_type(alerts_doc)}")
    if len(alerts_doc) > MAX_ALERTS:
        raise PayloadError("alerts", f"{len(alerts_doc)} alerts is over the limit of {MAX_ALERTS}")
    truncated = doc.get("truncatedAlerts", 0)
    if not isinstance(truncated, int) or isinstance(truncated, bool) or truncated < 0:
        raise PayloadError("truncatedAlerts", f"must be a non-negative integer, got {truncated!r}")
    return AlertmanagerPayload(
        version=version,
        group_key=_string(doc, "groupKey", "groupKey"),
        status=_status(doc, "status"),
        receiver=_string(doc, "receiver", "receiver"),
        group_labels=_label_map(doc, "groupLabels", "groupLabels"),
        common_labels=_label_map(doc, "commonLabels", "commonLabels"),
        common_annotations=_label_map(doc, "commonAnnotations", "commonAnnotations"),
        external_url=_string(doc, "externalURL", "externalURL"),
        alerts=tuple(_alert(item, f"alerts[{i}]") for i, item in enumerate(alerts_doc)),
        truncated_alerts=truncated,
    )


def _alert(item: Any, path: str) -> InboundAlert:
    if not isinstance(item, dict):
        raise PayloadError(path, f"must be an object, got {_type(item)}")
    fingerprint = _string(item, "fingerprint", f"{path}.fingerprint", required=True)
    if not fingerprint:
        raise PayloadError(f"{path}.fingerprint", "must not be empty")
    if "labels" not in item:
        raise PayloadError(f"{path}.labels", "is required")
    starts_at = _time(item, "startsAt", f"{path}.startsAt", required=True)
    if starts_at is None:  # unreachable: required=True raises instead; narrows the type
        raise PayloadError(f"{path}.startsAt", "is required")
    return InboundAlert(
        status=_status(item, f"{path}.status"),
        labels=_label_map(item, "labels", f"{path}.labels"),
        annotations=_label_map(item, "annotations", f"{path}.annotations"),
        starts_at=starts_at,
        ends_at=_time(item, "endsAt", f"{path}.endsAt"),
        generator_url=_string(item, "generatorURL", f"{path}.generatorURL"),
        fingerprint=fingerprint,
    )


def _type(value: Any) -> str:
    names = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    return names.get(
        type(value), "number" if isinstance(value, int | float) else type(value).__name__
    )


def _string(doc: dict[str, Any], key: str, path: str, *, required: bool = False) -> str:
    value = doc.get(key)
    if value is None:
        if required:
            raise PayloadError(path, "is required")
        return ""
    if not isinstance(value, str):
        raise PayloadError(path, f"must be a string, got {_type(value)}")
    if len(value) > MAX_VALUE_CHARS:
        raise PayloadError(path, f"is longer than {MAX_VALUE_CHARS} characters")
    return _encodable(value)


def _encodable(text: str) -> str:
    """`text` with lone surrogates (which the JSON parser lets through from `"\\ud800"`, and no
    UTF-8 encoder takes) replaced by U+FFFD, so that a reason made of it can be answered,
    logged and stored."""
    return _LONE_SURROGATE.sub("\ufffd", text) if not text.isascii() else text


def _status(doc: dict[str, Any], path: str) -> Status:
    value = _string(doc, "status", path, required=True)
    if value == "firing":
        return "firing"
    if value == "resolved":
        return "resolved"
    raise PayloadError(path, f"must be 'firing' or 'resolved', got {value!r}")


def _label_map(doc: dict[str, Any], key: str, path: str) -> Mapping[str, str]:
    value = doc.get(key)
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, dict):
        raise PayloadError(path, f"must be an object, got {_type(value)}")
    if len(value) > MAX_LABELS:
        raise PayloadError(path, f"{len(value)} entries is over the limit of {MAX_LABELS}")
    for name, item in value.items():
        if not isinstance(item, str):
            raise PayloadError(f"{path}.{name}", f"must be a string, got {_type(item)}")
        if len(item) > MAX_VALUE_CHARS:
            raise PayloadError(f"{path}.{name}", f"is longer than {MAX_VALUE_CHARS} characters")
    return MappingProxyType({_encodable(k): _encodable(v) for k, v in value.items()})


def _time(doc: dict[str, Any], key: str, path: str, *, required: bool = False) -> datetime | None:
    text = _string(doc, key, path, required=required)
    if not text:
        if required:
            raise PayloadError(path, "must not be empty")
        return None
    try:
        # Go's RFC 3339 has up to 9 fractional digits; Python keeps microseconds.
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise PayloadError(path, f"must be an RFC 3339 time, got {text!r}") from exc
    if moment.tzinfo is None:
        raise PayloadError(path, f"must carry a timezone, got {text!r}")
    if moment.year == GO_ZERO_TIME_YEAR:
        if required:
            raise PayloadError(path, "must be a real time, got the zero time")
        return None
    return moment
