"""The summary printed at the end of `mirrorgate replay`: one table, candidates side by side.

Replays: per candidate, requests sent, errors, latency p50/p95, ttft p50 (streams), cost (total
and per 1,000 requests) and agreement with the recorded answer — exact, normalised, and JSON
equality where both answers parse — over the requests both answered successfully. A `(recorded)`
row gives the same numbers for the recorded answers of the requests sent, when the store has them
(their latency counts from the gateway receiving the request, so it includes the gateway's own
overhead of a millisecond or so).

Evaluation sets: accuracy — `correct` by each item's own method (`score`: text, JSON equality or
the route's rule checks, `proxy.replay.evalscoring`), and exact / normalised against `expect` —
and latency and cost, for all items and by task and by difficulty. An item whose call failed
counts as wrong.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from analyzers.evalscore import Rate, accuracy, percentile, rate
from proxy.core import Status

from .evalscoring import EvalScorer
from .evalset import UNGROUPED, EvalSet
from .job import Reference
from .runner import Budget, JobOutcome, RunResult

RECORDED = "(recorded)"


@dataclass(frozen=True, slots=True)
class CandidateStats:
    """One candidate's numbers for a run (or for one group of an evaluation set)."""

    sent: int
    errors: int
    latency_p50_s: float | None
    latency_p95_s: float | None
    ttft_p50_s: float | None
    cost_usd: float
    exact: Rate
    normalized: Rate
    json: Rate

    @property
    def cost_per_1k_usd(self) -> float | None:
        return self.cost_usd / self.sent * 1000 if self.sent else None


def candidate_stats(outcomes: Iterable[JobOutcome]) -> CandidateStats:
    """Sum up the outcomes of one candidate."""
    done = list(outcomes)
    records = [o.record for o in done if o.record is not None]
    ok = [r for r in records if r.status is Status.OK]
    compared = [
        o.pair for o in done if o.ok and o.pair is not None and o.pair.primary_status == "ok"
    ]
    return CandidateStats(
        sent=len(records),
        errors=len(done) - len(ok),
        latency_p50_s=percentile([r.duration_s for r in ok], 50),
        latency_p95_s=percentile([r.duration_s for r in ok], 95),
        ttft_p50_s=percentile([r.ttft_s for r in ok if r.ttft_s is not None], 50),
        cost_usd=sum(r.cost_usd for r in records),
        exact=rate(p.exact_equal for p in compared),
        normalized=rate(p.normalized_equal for p in compared),
        json=rate(p.json_equal for p in compared),
    )


def render_replay(
    heading: Sequence[str],
    candidates: Sequence[str],
    result: RunResult,
    budget: Budget,
    budget_sources: Mapping[str, str],
) -> str:
    """The replay summary: `heading` lines, the table, then notes (budget, stops)."""
    rows = []
    for name in candidates:
        s = candidate_stats(o for o in result.outcomes if o.job.candidate == name)
        rows.append(
            [
                name, str(s.sent), str(s.errors), _ms(s.latency_p50_s), _ms(s.latency_p95_s),
                _ms(s.ttft_p50_s), _usd(s.cost_usd), _usd(s.cost_per_1k_usd),
                _rate(s.exact), _rate(s.normalized), _rate(s.json),
            ]
        )  # fmt: skip
    recorded = _recorded_row(result.outcomes)
    if recorded is not None:
        rows.insert(0, recorded)
    header = [
        "candidate", "sent", "errors", "p50 ms", "p95 ms", "ttft p50 ms", "cost USD",
        "USD/1k req", "exact", "normalised", "json",
    ]  # fmt: skip
    lines = [*heading, "", *_table(header, rows), ""]
    if any(o.pair is not None for o in result.outcomes):
        lines.append("agreement with the recorded answer, over requests both answered successfully")
    else:
        lines.append("agreement: no recorded answers to compare with")
    lines.extend(_error_notes(candidates, result))
    lines.extend(_notes(candidates, result, budget, budget_sources))
    return "\n".join(lines) + "\n"


def _recorded_row(outcomes: Sequence[JobOutcome]) -> list[str] | None:
    """The recorded answers of the requests sent, once each, as a row of the table."""
    seen: dict[tuple[str, str], Reference] = {}
    for outcome in outcomes:
        reference = outcome.job.reference
        if outcome.record is not None and reference is not None:
            seen[(outcome.job.route, outcome.job.request_id)] = reference
    timed = [r for r in seen.values() if r.duration_s is not None]
    if not timed:
        return None
    durations = [r.duration_s for r in timed if r.duration_s is not None]
    costs = [r.cost_usd for r in timed if r.cost_usd is not None]
    total = sum(costs)
    return [
        RECORDED, str(len(timed)), "-", _ms(percentile(durations, 50)),
        _ms(percentile(durations, 95)),
        _ms(percentile([r.ttft_s for r in timed if r.ttft_s is not None], 50)),
        _usd(total), _usd(total / len(costs) * 1000 if costs else None), "-", "-", "-",
    ]  # fmt: skip


def _error_notes(candidates: Sequence[str], result: RunResult) -> list[str]:
    notes = []
    for name in candidates:
        causes: Counter[str] = Counter()
        for outcome in result.outcomes:
            if outcome.job.candidate != name or outcome.ok:
                continue
            record = outcome.record
            if record is None:
                causes[f"not sent: {outcome.failure}"] += 1
            else:
                causes[record.error_class or record.status.value] += 1
        if causes:
            listed = ", ".join(f"{cause} ({count})" for cause, count in causes.most_common())
            notes.append(f"errors: {name}: {listed}")
    return notes


def render_eval(
    evalset: EvalSet,
    candidates: Sequence[str],
    result: RunResult,
    budget: Budget,
    budget_sources: Mapping[str, str],
    scorer: EvalScorer,
) -> str:
    """The evaluation summary: accuracy, then latency and cost, by group, side by side."""
    groups = _eval_groups(evalset)
    accuracy_header = ["group"]
    timing_header = ["group"]
    for name in candidates:
        accuracy_header += [
            f"{name} correct", f"{name} score", f"{name} exact", f"{name} normalised",
        ]  # fmt: skip
        timing_header += [f"{name} p50 ms", f"{name} p95 ms", f"{name} USD"]
    accuracy_rows, timing_rows = [], []
    for label, member in groups:
        accuracy_row, timing_row = [label], [label]
        for name in candidates:
            chosen = [
                o for o in result.outcomes if o.job.candidate == name and o.job.request_id in member
            ]
            scores = [scorer.score(o) for o in chosen]
            scored = accuracy(scores)
            values = [0.0 if s is None else s.value for s in scores]
            counted = [v for v in values if v is not None]
            accuracy_row += [
                _count(scored.correct, scored.decided)
                + (f" ({scored.unjudged} unjudged)" if scored.unjudged else ""),
                f"{sum(counted) / len(counted):.2f}" if counted else "-",
                _count(scored.exact, scored.items),
                _count(scored.normalized, scored.items),
            ]
            stats = candidate_stats(chosen)
            timing_row += [_ms(stats.latency_p50_s), _ms(stats.latency_p95_s), _usd(stats.cost_usd)]
        accuracy_rows.append(accuracy_row)
        timing_rows.append(timing_row)
    lines = [
        f"evaluation set {evalset.name}: {len(evalset.items)} items, "
        f"{len(candidates)} candidate(s)",
        "",
        "accuracy (right/items; a failed call counts as wrong; correct: by each item's score, "
        "a judge item unjudged left out; score: mean 0..1, JSON per field, a judge item unjudged "
        "left out)",
        *_table(accuracy_header, accuracy_rows),
        "",
        "latency and cost",
        *_table(timing_header, timing_rows),
    ]
    lines.append("")
    lines.extend(_error_notes(candidates, result))
    lines.extend(_notes(candidates, result, budget, budget_sources))
    return "\n".join(lines) + "\n"


def _eval_groups(evalset: EvalSet) -> list[tuple[str, set[str]]]:
    """("all", every item id), then ("task=<t>", its ids) and ("difficulty=<d>", its ids); a
    dimension no item sets is left out."""
    groups = [("all", {item.item_id for item in evalset.items})]
    for dimension in ("task", "difficulty"):
        members: dict[str, set[str]] = {}
        for item in evalset.items:
            members.setdefault(getattr(item, dimension), set()).add(item.item_id)
        if set(members) != {UNGROUPED}:
            groups.extend((f"{dimension}={value}", members[value]) for value in sorted(members))
    return groups


def _notes(
    candidates: Sequence[str],
    result: RunResult,
    budget: Budget,
    budget_sources: Mapping[str, str],
) -> list[str]:
    notes = []
    for name in candidates:
        limit = budget.limits.get(name)
        if limit is None:
            continue
        spent = budget.spent.get(name, 0.0)
        skipped = result.over_budget[name]
        source = budget_sources.get(name, "")
        if skipped:
            notes.append(
                f"budget: {name} reached its limit of ${_usd(limit)} ({source}) having spent "
                f"${_usd(spent)}; {skipped} request(s) not sent (budget)"
            )
        else:
            notes.append(f"budget: {name} spent ${_usd(spent)} of ${_usd(limit)} ({source})")
    if result.store_error is not None:
        notes.append(
            f"store error: {result.store_error} — the answers of that batch were not stored and "
            "will be replayed again by the next run"
        )
    if result.stopped_by is not None and result.stopped_by != "store failure":
        not_sent = sum(result.not_sent.values())
        abandoned = sum(result.abandoned.values())
        text = f"interrupted ({result.stopped_by}): {not_sent} request(s) not sent"
        if abandoned:
            text += f", {abandoned} cancelled in flight"
        notes.append(text + "; run the same command again to send the rest")
    return notes


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    return [line(header), *(line(row) for row in rows)]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _usd(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.4f}" if value >= 0.01 else f"{value:.6f}"


def _rate(value: Rate) -> str:
    return _count(value.hits, value.total)


def _count(hits: int, total: int) -> str:
    return "-" if not total else f"{hits}/{total} {hits / total:.0%}"
