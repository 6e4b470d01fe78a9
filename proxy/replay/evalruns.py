"""Evaluation runs as the archive keeps them: which set (name, version, content hash), which
model in which role, the configuration it ran with, and its scores per stratum.

- `SetIdentity` / `identify`: a set built by `evalset build` is named by its manifest; a
  hand-written JSONL file by its stem, version 0 and the hash of its lines;
- `config_fingerprint`: what the run's answers depend on in the config — the model's spec (its
  key's value never) and the rule set governing the route — hashed, so two runs of "the same"
  model with another prompt or endpoint are told apart;
- `strata_scores`: pass rate, mean score, latency p50 and cost for `all`, every task and every
  difficulty.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analyzers.evalscore import percentile
from proxy.config import MirrorgateConfig
from proxy.core import Status
from proxy.store import StratumScore

from .evalbuild import CASES, HELD_OUT, MANIFEST, content_hash
from .evalscoring import EvalScorer
from .evalset import UNGROUPED, EvalSet
from .runner import JobOutcome


@dataclass(frozen=True, slots=True)
class SetIdentity:
    name: str
    version: int
    content_hash: str
    route: str | None
    cases_path: Path


class SetProblem(Exception):
    """The path does not name a usable set (exit 1)."""


def identify(path: Path) -> SetIdentity:
    """The set at `path`: a directory written by `evalset build`, its cases.jsonl, or any JSONL
    file. Refuses a set's held-out part, which no candidate run may see."""
    directory = path if path.is_dir() else path.parent
    if path.is_dir():
        path = path / CASES
    manifest_path = directory / MANIFEST
    if path.name == HELD_OUT and manifest_path.exists():
        raise SetProblem(
            f"{path} is the held-out part of a set: no candidate run reads it "
            f"(run {directory / CASES})"
        )
    if manifest_path.exists() and path.name == CASES:
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SetProblem(f"cannot read {manifest_path}: {exc}") from None
        if isinstance(manifest, dict) and isinstance(manifest.get("name"), str):
            version = manifest.get("version")
            route = manifest.get("route")
            return SetIdentity(
                name=manifest["name"],
                version=version if isinstance(version, int) else 0,
                content_hash=str(manifest.get("content_hash") or _file_hash(path)),
                route=route if isinstance(route, str) else None,
                cases_path=path,
            )
    return SetIdentity(path.stem, 0, _file_hash(path), None, path)


def _file_hash(path: Path) -> str:
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return content_hash([])


def config_fingerprint(config: MirrorgateConfig, model: str, route: str | None) -> str:
    """A short hash of the model's spec and the route's rule set."""
    spec = config.models[model].model_dump(mode="json")
    rule = config.rule_of(route) if route else None
    rules = config.rules[rule].model_dump(mode="json", by_alias=True) if rule else None
    text = json.dumps({"model": spec, "rules": rules}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def strata_scores(
    evalset: EvalSet, model: str, outcomes: Sequence[JobOutcome], scorer: EvalScorer
) -> dict[str, StratumScore]:
    """`all`, `task=<t>` and `difficulty=<d>` for `model`'s outcomes (a failed call counts as a
    case not passed, scored 0)."""
    groups: dict[str, set[str]] = {"all": {item.item_id for item in evalset.items}}
    for item in evalset.items:
        for dimension, value in (("task", item.task), ("difficulty", item.difficulty)):
            if value != UNGROUPED:
                groups.setdefault(f"{dimension}={value}", set()).add(item.item_id)
    mine = [o for o in outcomes if o.job.candidate == model]
    result: dict[str, StratumScore] = {}
    for name, members in groups.items():
        chosen = [o for o in mine if o.job.request_id in members]
        values: list[float] = []
        passed = 0
        for outcome in chosen:
            score = scorer.score(outcome)
            if score is not None and score.method == "judge" and score.correct is None:
                continue  # not judged: neither counted nor scored
            scored = score.value if score is not None else None
            values.append(scored if scored is not None else 0.0)
            passed += bool(score is not None and score.correct)
        records = [o.record for o in chosen if o.record is not None]
        ok = [r.duration_s for r in records if r.status is Status.OK]
        result[name] = StratumScore(
            cases=len(values),
            passed=passed,
            mean_score=sum(values) / len(values) if values else None,
            latency_p50_s=percentile(ok, 50),
            cost_usd=sum(r.cost_usd for r in records),
        )
    return result
