"""What can be wrong with a configuration: the config layer's one error and its problems.

    ConfigError              the configuration cannot be used; `.problems` lists every reason
      .problems: [ConfigProblem(path, message), ...]

Every pass of the loader and every section check adds `ConfigProblem`s instead of stopping at
the first; the loader raises one `ConfigError` with all of them, so a bad file is fixed in one go.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a configuration, at a dotted key path (`routes.bot.primary`)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


class ConfigError(Exception):
    """The configuration cannot be used; `problems` names every reason."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
