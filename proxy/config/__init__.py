"""Configuration: YAML in, frozen pydantic specs out, or every problem named by its key path.
`specs` holds the sections, `loader` reads YAML into them, `checks` holds one cross-check per
section, `errors` the one error. The bottom layer: imports nothing of the gateway (only
`analyzers`, for check and agreement specs).
"""

from .checks import (
    config_warnings,
    credential_warnings,
    feedback_app_tokens,
    feedback_open,
    feedback_warnings,
    model_key_problems,
    reviewer_tokens,
    rollout_warnings,
)
from .errors import ConfigError, ConfigProblem
from .loader import load_config, parse_config
from .specs import (
    CanarySpec,
    CheckSpec,
    GuardSpec,
    JudgeSpec,
    LimitsSpec,
    MirrorgateConfig,
    ModelSpec,
    PriceSpec,
    ProbesSpec,
    ProbeValue,
    RollbackTarget,
    RouteSpec,
    RuleSpec,
    ShadowSpec,
    StoreSpec,
    TelemetrySpec,
    agreement_spec,
    unavailable_evidence,
)

__all__ = [
    "CanarySpec",
    "CheckSpec",
    "ConfigError",
    "ConfigProblem",
    "GuardSpec",
    "JudgeSpec",
    "LimitsSpec",
    "MirrorgateConfig",
    "ModelSpec",
    "PriceSpec",
    "ProbeValue",
    "ProbesSpec",
    "RollbackTarget",
    "RouteSpec",
    "RuleSpec",
    "ShadowSpec",
    "StoreSpec",
    "TelemetrySpec",
    "agreement_spec",
    "config_warnings",
    "credential_warnings",
    "feedback_app_tokens",
    "feedback_open",
    "feedback_warnings",
    "load_config",
    "model_key_problems",
    "parse_config",
    "reviewer_tokens",
    "rollout_warnings",
    "unavailable_evidence",
]
