"""Evaluation sets' reads and runs' archive: `EvalStore`.

Two jobs, both for the offline commands and the rollout gate:

- **Sampling** (`window_versions`, `sample`): the route's primary answers of a window, drawn in
  the database, never loaded whole. One scan of the window counts each rule version's traffic;
  a second keeps each row whose hash of its id falls under its version's rate, so every version
  gets about the rows it asked for (a rare version at a higher rate than a frequent one) and
  only those rows leave the database. The hash is `id * 2654435761 + seed` modulo a prime:
  deterministic for a seed, spread evenly over consecutive ids, and computed the same by SQLite
  and PostgreSQL. Each sampled row comes with what the build needs to choose a reference and a
  difficulty: the user's correction, whether any rule check failed on the answer, whether a
  shadow disagreed.
- **Runs** (`add_runs`, `runs`, `latest_run`, `group`): one row per model and evaluation run
  (migration 17), with its scores per stratum as JSON; models of one invocation share its
  `run_group`, so the gate compares a candidate with the primary of the same run.

Blocking: call from a worker thread. Every method raises `StoreError`s only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from proxy.core import as_utc

from .checks import checks_table
from .errors import translated
from .exchanges import Store, exchanges_table
from .feedback import feedback_table, is_correction_clause
from .pairs import pairs_table

_HASH_MULTIPLIER = 2654435761
_HASH_MODULUS = 2147483647
_CHUNK = 500
"""Request ids per `IN (...)` when joining the sampled rows to feedback, checks and pairs."""


class EvalRunRow(SQLModel, table=True):
    """One row of `eval_runs` (schema: migration 17)."""

    __tablename__ = "eval_runs"

    id: int | None = Field(
        default=None,
        sa_column=sa.Column(
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
    )
    run_group: str
    set_name: str
    set_version: int
    set_hash: str
    route: str | None = None
    model: str
    role: str
    config_fingerprint: str
    started_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    cases: int
    passed: int
    mean_score: float | None = None
    strata: str = Field(default="{}", sa_column=sa.Column(sa.Text(), nullable=False))


_runs: sa.Table = EvalRunRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class StratumScore:
    """One model's results on one stratum (`all`, `task=…`, `difficulty=…`) of a run."""

    cases: int
    passed: int
    mean_score: float | None = None
    """Mean of the cases' scores in 0..1 (JSON per field, the judge's score, 1/0 otherwise)."""
    latency_p50_s: float | None = None
    cost_usd: float = 0.0

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.cases if self.cases else None

    def as_json(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "passed": self.passed,
            "mean_score": self.mean_score,
            "latency_p50_s": self.latency_p50_s,
            "cost_usd": self.cost_usd,
        }


@dataclass(frozen=True, slots=True)
class EvalRun:
    """One model's results in one evaluation run."""

    run_group: str
    set_name: str
    set_version: int
    set_hash: str
    route: str | None
    model: str
    role: str
    """`primary` (the route's primary, run side by side) or `candidate`."""
    config_fingerprint: str
    started_at: datetime
    strata: Mapping[str, StratumScore]
    """`all` and every task and difficulty stratum of the set."""

    @property
    def overall(self) -> StratumScore:
        return self.strata.get("all") or StratumScore(0, 0)


@dataclass(frozen=True, slots=True)
class SampledExchange:
    """A primary answer drawn for an evaluation set, with its signals."""

    request_id: str
    started_at: datetime
    endpoint: str
    rule_version: str | None
    tags: tuple[str, ...]
    request_body: str | None
    response_text: str | None
    correction: str | None = None
    """The user's corrected answer (a correction's text), if any."""
    corrected: bool = False
    """A user marked the answer wrong (with or without a corrected text)."""
    checks_failed: int = 0
    checks_run: int = 0
    disagreed: bool = False
    """A shadow's answer disagreed with this one."""
    extra: Mapping[str, Any] = field(default_factory=dict)


class EvalStore:
    """Reads traffic for evaluation sets and keeps evaluation runs (`eval_runs`)."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine

    # --- sampling ---------------------------------------------------------------------------------

    def _window(self, route: str, since: datetime, until: datetime) -> list[Any]:
        c = exchanges_table.c
        return [
            c.route == route,
            c.arm == "primary",
            c.status == "ok",
            c.request_body.is_not(None),
            c.started_at >= as_utc(since),
            c.started_at < as_utc(until),
        ]

    def window_versions(self, route: str, since: datetime, until: datetime) -> dict[str, int]:
        """Answered primary requests of the window per rule version (`""`: none)."""
        c = exchanges_table.c
        version = sa.func.coalesce(c.rule_version, "")
        statement = (
            sa.select(version, sa.func.count())
            .where(*self._window(route, since, until))
            .group_by(version)
        )
        with translated("counting the window's traffic"), self._engine.connect() as conn:
            found: list[Any] = list(conn.execute(statement))
        return {str(v): int(n) for v, n in found}

    def sample(
        self,
        route: str,
        since: datetime,
        until: datetime,
        rates: Mapping[str, float],
        *,
        seed: int = 0,
    ) -> list[SampledExchange]:
        """The window's answered primary requests whose id hash falls under their rule
        version's rate (0..1; a version not in `rates` is not drawn), oldest first."""
        c = exchanges_table.c
        version = sa.func.coalesce(c.rule_version, "")
        drawn = (c.id * _HASH_MULTIPLIER + (seed % _HASH_MODULUS)) % _HASH_MODULUS
        cases = [
            (version == name, int(min(1.0, max(0.0, rate)) * _HASH_MODULUS))
            for name, rate in rates.items()
            if rate > 0
        ]
        if not cases:
            return []
        threshold = sa.case(*cases, else_=-1)
        statement = (
            sa.select(
                c.request_id,
                c.started_at,
                c.endpoint,
                c.rule_version,
                c.tags,
                c.request_body,
                c.response_text,
            )
            .where(*self._window(route, since, until), drawn < threshold)
            .order_by(c.id)
        )
        with translated("sampling the window's traffic"), self._engine.connect() as conn:
            rows = conn.execute(statement).all()
        signals = self._signals([r[0] for r in rows])
        return [
            SampledExchange(
                request_id=r[0],
                started_at=as_utc(r[1]),
                endpoint=r[2],
                rule_version=r[3],
                tags=tuple(json.loads(r[4] or "[]")),
                request_body=r[5],
                response_text=r[6],
                **signals.get(r[0], {}),
            )
            for r in rows
        ]

    def _signals(self, request_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Correction, rule-check and shadow-agreement signals of the primary answers."""
        found: dict[str, dict[str, Any]] = {}
        f, k, p = feedback_table.c, checks_table.c, pairs_table.c
        with translated("reading the sampled answers' signals"), self._engine.connect() as conn:
            for start in range(0, len(request_ids), _CHUNK):
                chunk = list(request_ids[start : start + _CHUNK])
                corrections = sa.select(f.request_id, f.correction).where(
                    f.request_id.in_(chunk), is_correction_clause()
                )
                rows: list[Any] = list(conn.execute(corrections))
                for request_id, text in rows:
                    entry = found.setdefault(request_id, {})
                    entry["corrected"] = True
                    entry["correction"] = text or None
                failing = sa.func.sum(sa.case((k.result != "pass", 1), else_=0))
                checks = (
                    sa.select(k.request_id, sa.func.count(), failing)
                    .where(k.request_id.in_(chunk), k.arm == "primary")
                    .group_by(k.request_id)
                )
                rows = list(conn.execute(checks))
                for request_id, run, failed in rows:
                    entry = found.setdefault(request_id, {})
                    entry["checks_run"] = int(run)
                    entry["checks_failed"] = int(failed or 0)
                disagreed = (
                    sa.select(p.request_id)
                    .where(p.request_id.in_(chunk), p.agreement == "disagree")
                    .distinct()
                )
                rows = list(conn.execute(disagreed))
                for (request_id,) in rows:
                    found.setdefault(request_id, {})["disagreed"] = True
        return found

    # --- runs ---------------------------------------------------------------------------------

    def add_runs(self, runs: Iterable[EvalRun]) -> int:
        """Store `runs` (one transaction); how many were stored."""
        rows = [
            {
                "run_group": run.run_group,
                "set_name": run.set_name,
                "set_version": run.set_version,
                "set_hash": run.set_hash,
                "route": run.route,
                "model": run.model,
                "role": run.role,
                "config_fingerprint": run.config_fingerprint,
                "started_at": as_utc(run.started_at),
                "cases": run.overall.cases,
                "passed": run.overall.passed,
                "mean_score": run.overall.mean_score,
                "strata": json.dumps({k: v.as_json() for k, v in run.strata.items()}),
            }
            for run in runs
        ]
        if not rows:
            return 0
        with translated("storing evaluation runs", writing=True), self._engine.begin() as conn:
            conn.execute(sa.insert(_runs), rows)
        return len(rows)

    def runs(
        self,
        *,
        set_name: str | None = None,
        model: str | None = None,
        route: str | None = None,
        limit: int = 200,
    ) -> list[EvalRun]:
        """Stored runs, oldest first (the newest `limit`)."""
        c = _runs.c
        statement = sa.select(_runs).order_by(c.started_at.desc(), c.id.desc()).limit(limit)
        if set_name is not None:
            statement = statement.where(c.set_name == set_name)
        if model is not None:
            statement = statement.where(c.model == model)
        if route is not None:
            statement = statement.where(c.route == route)
        with translated("reading evaluation runs"), self._engine.connect() as conn:
            rows = conn.execute(statement).mappings().all()
        return [_to_run(row) for row in reversed(rows)]

    def latest_run(self, set_name: str, model: str, role: str = "candidate") -> EvalRun | None:
        """The newest run of `model` on the set in that role, or None."""
        c = _runs.c
        statement = (
            sa.select(_runs)
            .where(c.set_name == set_name, c.model == model, c.role == role)
            .order_by(c.started_at.desc(), c.id.desc())
            .limit(1)
        )
        with translated("reading evaluation runs"), self._engine.connect() as conn:
            row = conn.execute(statement).mappings().first()
        return _to_run(row) if row is not None else None

    def group(self, run_group: str) -> list[EvalRun]:
        """Every model's run of one evaluation run, in the order stored."""
        c = _runs.c
        statement = sa.select(_runs).where(c.run_group == run_group).order_by(c.id)
        with translated("reading evaluation runs"), self._engine.connect() as conn:
            rows = conn.execute(statement).mappings().all()
        return [_to_run(row) for row in rows]


def _to_run(row: sa.RowMapping) -> EvalRun:
    raw = json.loads(row["strata"] or "{}")
    strata = {
        name: StratumScore(
            cases=int(v.get("cases", 0)),
            passed=int(v.get("passed", 0)),
            mean_score=v.get("mean_score"),
            latency_p50_s=v.get("latency_p50_s"),
            cost_usd=float(v.get("cost_usd") or 0.0),
        )
        for name, v in raw.items()
    }
    return EvalRun(
        run_group=row["run_group"],
        set_name=row["set_name"],
        set_version=int(row["set_version"]),
        set_hash=row["set_hash"],
        route=row["route"],
        model=row["model"],
        role=row["role"],
        config_fingerprint=row["config_fingerprint"],
        started_at=as_utc(row["started_at"]),
        strata=strata,
    )
