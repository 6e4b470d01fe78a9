"""The errors the analyzers raise, all of them at start-up (a running check never raises):

    AnalysisError                   base of everything below
    ├── SpecError(field, message)   a spec that cannot be used; `field` is the key inside the spec
    │   └── CheckConfigError        a rule check that cannot compile (bad regex, schema, JSONPath)
    └── PluginError                 an analyzer plugin that cannot be found, loaded or built

`SpecError` is also a `ValueError`, so a pydantic validator that calls `compile_check` turns it
into an ordinary validation error; the config loader prefixes `field` with the check's key path
(`rules.shipping.versions.v2.checks[0]` + `.pattern`).

Two errors never leave the package, so the tree leaves them out: `PluginOutputError` (a
`TypeError`, in `analyzers.plugins`), raised when a plugin returns something that is not findings
and turned by `run_safely` into that plugin's `AnalyzerFailure`; and `SchemaUndecidedError`
(`analyzers.schema`), which a JSON Schema check reports as an `error` result. A `ValueError` from a
statistics function means its caller passed impossible arguments: a bug, not a case to handle.
"""

from __future__ import annotations


class AnalysisError(Exception):
    """Base class of the errors raised by `analyzers`."""


class SpecError(AnalysisError, ValueError):
    """A spec cannot be used. `field` names the key inside the spec (dotted, with `[i]` for list
    items, e.g. `schema.properties.weight.type`); empty when the spec as a whole is wrong."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class CheckConfigError(SpecError):
    """A rule check's config cannot compile."""


class PluginError(AnalysisError):
    """An analyzer named in config is unknown, or its entry point cannot be loaded or built."""
