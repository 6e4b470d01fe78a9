"""Versioned schema migrations: the database's shape, one numbered step at a time.

The table `schema_version` holds one row per applied migration. `migrate` applies the missing ones
in order, each in its own transaction together with its `schema_version` row, so a step is either
fully applied and recorded or not at all. Running it again does nothing; running it against a
database whose version is newer than the code knows raises `SchemaVersionError` and changes nothing.

Several gateway processes may start at once against one database. On PostgreSQL each step first
takes a transaction-scoped advisory lock (`pg_advisory_xact_lock`, keyed on the schema); on SQLite
the transaction starts with `BEGIN IMMEDIATE` (the engine must be built by `Store`,
whose SQLite `begin` hook honours `SQLITE_BEGIN_OPTION`). The version is read once the lock is held,
so the second process sees the first one's work and skips it.

Each migration describes the schema *as it was* when it was written, with its own `MetaData`, never
the current ORM classes: migration 1 must build the same tables in a year as it does today. Adding a
table is one function and one list entry::

    def _v2_rule_events(conn: Connection) -> None:
        table = sa.Table(
            "rule_events", sa.MetaData(),
            sa.Column("id", _ID, primary_key=True, autoincrement=True),
            sa.Column("rule", sa.String(), nullable=False),
            sa.Column("version", sa.String(), nullable=False),
            sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
            sa.Index("ix_rule_events_rule", "rule"),
        )
        table.create(conn)

    MIGRATIONS = (
        Migration(1, "exchanges table and its indexes", _v1_exchanges),
        Migration(2, "rule_events table", _v2_rule_events),
    )

Never edit or renumber a migration that has shipped; add the next one.

`migrate` and `current_version` let database errors out as SQLAlchemy's; `Store`, their only
caller, translates them (`proxy.store.errors`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .errors import SchemaVersionError

log = logging.getLogger(__name__)

SQLITE_BEGIN_OPTION = "mirrorgate_sqlite_begin"
"""Execution option read by the store's SQLite `begin` hook: `DEFERRED` (default) or `IMMEDIATE`."""

ADVISORY_LOCK_CLASS = 0x6D67_0001
"""First key of the PostgreSQL advisory lock held while migrating (the second is the schema's hash).
Other advisory locks of mirrorgate (e.g. the rollout decider's) use other class numbers."""

_ADVISORY_LOCK = sa.text(
    "SELECT pg_advisory_xact_lock(:cls, hashtext(coalesce(:name, current_schema())))"
)
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""Primary key type: BIGINT on PostgreSQL; INTEGER on SQLite (only that spelling is the rowid)."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of the schema's history."""

    version: int
    """Strictly increasing, starting at 1; recorded in `schema_version` once applied."""
    description: str
    """What the step does, for people reading `schema_version` or the logs."""
    apply: Callable[[Connection], None]
    """Performs the step inside the transaction it is given; must not commit or roll back."""


_version_table = sa.Table(
    "schema_version",
    sa.MetaData(),
    sa.Column("version", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("description", sa.Text(), nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
)


def _v1_exchanges(conn: Connection) -> None:
    table = sa.Table(
        "exchanges",
        sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("upstream_model", sa.String(), nullable=False),
        sa.Column("arm", sa.String(), nullable=False),
        sa.Column("endpoint", sa.String(), nullable=False),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("streamed", sa.Boolean(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("ttft_s", sa.Float(), nullable=True),
        sa.Column("overhead_s", sa.Float(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cached_input_tokens", sa.Integer(), nullable=False),
        sa.Column("cache_write_tokens", sa.Integer(), nullable=False),
        sa.Column("reasoning_tokens", sa.Integer(), nullable=False),
        sa.Column("usage_estimated", sa.Boolean(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("error_class", sa.String(), nullable=True),
        sa.Column("rule", sa.String(), nullable=True),
        sa.Column("rule_version", sa.String(), nullable=True),
        sa.Column("pair_id", sa.String(), nullable=True),
        sa.Column("tags", sa.Text(), nullable=False),
        sa.Column("request_body", sa.Text(), nullable=True),
        sa.Column("response_body", sa.Text(), nullable=True),
        sa.Column("response_text", sa.Text(), nullable=True),
        sa.Index("ix_exchanges_route_started_at", "route", "started_at"),
        sa.Index("ix_exchanges_started_at", "started_at"),
        sa.Index("ix_exchanges_request_id", "request_id"),
        sa.Index("ix_exchanges_pair_id", "pair_id"),
    )
    table.create(conn)


def _v2_pairs(conn: Connection) -> None:
    table = sa.Table(
        "pairs",
        sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("pair_id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("primary_target", sa.String(), nullable=False),
        sa.Column("candidate_target", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("primary_status", sa.String(), nullable=False),
        sa.Column("candidate_status", sa.String(), nullable=False),
        sa.Column("exact_equal", sa.Boolean(), nullable=False),
        sa.Column("normalized_equal", sa.Boolean(), nullable=False),
        sa.Column("json_equal", sa.Boolean(), nullable=True),
        sa.Column("json_fields", sa.Text(), nullable=False),
        sa.Column("length_ratio", sa.Float(), nullable=True),
        sa.Column("latency_delta_s", sa.Float(), nullable=True),
        sa.Column("ttft_delta_s", sa.Float(), nullable=True),
        sa.Column("cost_delta_usd", sa.Float(), nullable=True),
        sa.Index("ix_pairs_pair_id", "pair_id", unique=True),
        sa.Index("ix_pairs_route_created_at", "route", "created_at"),
        sa.Index("ix_pairs_request_id", "request_id"),
    )
    table.create(conn)


def _v3_feedback(conn: Connection) -> None:
    table = sa.Table(
        "feedback",
        sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("arm", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("corrected", sa.Boolean(), nullable=False),
        sa.Column("correction", sa.Text(), nullable=True),
        sa.Column("score", sa.Integer(), nullable=True),
        sa.Column("label", sa.String(), nullable=True),
        sa.Column("rule", sa.String(), nullable=True),
        sa.Column("rule_version", sa.String(), nullable=True),
        sa.Index("ix_feedback_request_kind", "request_id", "kind", unique=True),
        sa.Index("ix_feedback_route_created_at", "route", "created_at"),
    )
    table.create(conn)


def _v4_rule_events(conn: Connection) -> None:
    table = sa.Table(
        "rule_events",
        sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("rule", sa.String(), nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.Column("previous_version", sa.String(), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("prompt_diff", sa.Text(), nullable=True),
        sa.Index("ix_rule_events_rule_version", "rule", "version", unique=True),
    )
    table.create(conn)


def _v5_check_results(conn: Connection) -> None:
    table = sa.Table(
        "check_results",
        sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("arm", sa.String(), nullable=False),
        sa.Column("rule", sa.String(), nullable=False),
        sa.Column("rule_version", sa.String(), nullable=False),
        sa.Column("check_name", sa.String(), nullable=False),
        sa.Column("result", sa.String(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("pair_id", sa.String(), nullable=True),
        sa.Index("ix_check_results_route_created_at", "route", "created_at"),
        sa.Index("ix_check_results_rule_version", "rule", "rule_version"),
        sa.Index("ix_check_results_request_id", "request_id"),
    )
    table.create(conn)


def _v6_findings(conn: Connection) -> None:
    table = sa.Table(
        "findings",
        sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("arm", sa.String(), nullable=False),
        sa.Column("analyzer", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("label", sa.String(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("pair_id", sa.String(), nullable=True),
        sa.Index("ix_findings_route_created_at", "route", "created_at"),
        sa.Index("ix_findings_request_id", "request_id"),
    )
    table.create(conn)


def _v7_rollouts(conn: Connection) -> None:
    metadata = sa.MetaData()
    sa.Table(
        "rollouts",
        metadata,
        sa.Column("route", sa.String(), primary_key=True),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(), nullable=True),
        sa.Column("rollout_id", sa.String(), nullable=True),
        sa.Column("candidate", sa.String(), nullable=True),
        sa.Column("baseline", sa.String(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("salt", sa.String(), nullable=False),
        sa.Column("override", sa.String(), nullable=True),
        sa.Column("override_arm", sa.String(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("step_started_at", sa.DateTime(timezone=True), nullable=True),
    )
    sa.Table(
        "rollout_events",
        metadata,
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("rollout_id", sa.String(), nullable=True),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("from_phase", sa.String(), nullable=True),
        sa.Column("to_phase", sa.String(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("ix_rollout_events_route_revision", "route", "revision", unique=True),
    )
    sa.Table(
        "verdicts",
        metadata,
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("rollout_id", sa.String(), nullable=False),
        sa.Column("candidate", sa.String(), nullable=False),
        sa.Column("look", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(), nullable=False),
        sa.Column("metric", sa.String(), nullable=False),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("estimate", sa.Float(), nullable=True),
        sa.Column("low", sa.Float(), nullable=True),
        sa.Column("high", sa.Float(), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("n_primary", sa.Integer(), nullable=False),
        sa.Column("n_candidate", sa.Integer(), nullable=False),
        sa.Column("alpha", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("ix_verdicts_route_created_at", "route", "created_at"),
    )
    sa.Table(
        "alert_claims",
        metadata,
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("fingerprint", sa.String(), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("ix_alert_claims_key", "fingerprint", "starts_at", unique=True),
    )
    metadata.create_all(conn)


def _v8_decider_memory(conn: Connection) -> None:
    sa.Table(
        "decider_memory",
        sa.MetaData(),
        sa.Column("route", sa.String(), primary_key=True),
        sa.Column("rollout_id", sa.String(), nullable=False),
        sa.Column("looks", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("held_step", sa.Integer(), nullable=True),
        sa.Column("warnings", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    ).create(conn)
    conn.execute(sa.text("ALTER TABLE verdicts ADD COLUMN needs INTEGER"))
    conn.execute(sa.text("ALTER TABLE verdicts ADD COLUMN eta_s FLOAT"))


def _v9_pair_agreement(conn: Connection) -> None:
    # Rows of before stay NULL: no verdict was made for them (readers fall back, see
    # `proxy.core.pair_agreed`).
    conn.execute(sa.text("ALTER TABLE pairs ADD COLUMN agreement VARCHAR"))


def _v10_finding_severity(conn: Connection) -> None:
    conn.execute(sa.text("ALTER TABLE findings ADD COLUMN severity VARCHAR"))
    # The rollout judge joins the LLM judge's findings to their pairs at every look.
    conn.execute(sa.text("CREATE INDEX ix_findings_pair_id ON findings (pair_id)"))


def _v11_feedback_callers(conn: Connection) -> None:
    # Feedback of before stays NULL: its sender is unknown (the judge counts each such row alone).
    conn.execute(sa.text("ALTER TABLE feedback ADD COLUMN caller VARCHAR"))
    sa.Table(
        "signing_keys",
        sa.MetaData(),
        sa.Column("name", sa.String(), primary_key=True),
        sa.Column("secret", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    ).create(conn)


def _v12_probes(conn: Connection) -> None:
    sa.Table(
        "probe_results",
        sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("probe_id", sa.String(), nullable=False),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("rule", sa.String(), nullable=False),
        sa.Column("rule_version", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("original_value", sa.String(), nullable=False),
        sa.Column("asked_value", sa.String(), nullable=False),
        sa.Column("answered_value", sa.String(), nullable=True),
        sa.Column("result", sa.String(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Index("ix_probe_results_rule_created_at", "rule", "created_at"),
        sa.Index("ix_probe_results_probe_id", "probe_id", unique=True),
    ).create(conn)
    # The value of the rule's parameter in the version's system prompt (phantom-rule checks look
    # for earlier versions' values in answers); events of before stay NULL.
    conn.execute(sa.text("ALTER TABLE rule_events ADD COLUMN rule_value VARCHAR"))


def _v13_guard_decisions(conn: Connection) -> None:
    sa.Table(
        "guard_decisions",
        sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("rule", sa.String(), nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("ix_guard_decisions_route_rule_version", "route", "rule", "version", unique=True),
    ).create(conn)


def _v14_operations(conn: Connection) -> None:
    # Exchanges of before stay NULL: they belong to no operation.
    conn.execute(sa.text("ALTER TABLE exchanges ADD COLUMN operation_id VARCHAR"))
    # An operation's summary reads its exchanges; they are found by operation within a route.
    conn.execute(
        sa.text("CREATE INDEX ix_exchanges_operation_route ON exchanges (operation_id, route)")
    )
    sa.Table(
        "outcomes",
        sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("operation_id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("flag", sa.Boolean(), nullable=True),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("labels", sa.Text(), nullable=True),
        sa.Column("route", sa.String(), nullable=True),
        sa.Column("caller", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("ix_outcomes_operation_kind", "operation_id", "kind", unique=True),
        sa.Index("ix_outcomes_route_created_at", "route", "created_at"),
    ).create(conn)


def _v15_experiments(conn: Connection) -> None:
    # Exchanges of before stay NULL: they ran in no experiment.
    conn.execute(sa.text("ALTER TABLE exchanges ADD COLUMN experiment_arm VARCHAR"))
    conn.execute(sa.text("ALTER TABLE exchanges ADD COLUMN experiment_unit VARCHAR"))
    # The decider reads one route's experiment exchanges since the experiment started.
    conn.execute(
        sa.text(
            "CREATE INDEX ix_exchanges_route_experiment_arm ON exchanges (route, experiment_arm)"
        )
    )
    meta = sa.MetaData()
    sa.Table(
        "experiments",
        meta,
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("fingerprint", sa.String(), nullable=False),
        sa.Column("arms", sa.Text(), nullable=False),
        sa.Column("weights", sa.Text(), nullable=False),
        sa.Column("control", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("stopped_arms", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("decision", sa.Text(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Index("ix_experiments_route_started_at", "route", "started_at"),
    ).create(conn)
    sa.Table(
        "experiment_events",
        meta,
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("experiment_id", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("arm", sa.String(), nullable=True),
        sa.Column("metric", sa.String(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("ix_experiment_events_experiment_id", "experiment_id"),
    ).create(conn)


def _v16_reviews(conn: Connection) -> None:
    metadata = sa.MetaData()
    sa.Table(
        "review_items",
        metadata,
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("item_id", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("rule", sa.String(), nullable=True),
        sa.Column("rule_version", sa.String(), nullable=True),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("pair_id", sa.String(), nullable=False),
        sa.Column("primary_target", sa.String(), nullable=False),
        sa.Column("primary_arm", sa.String(), nullable=False),
        sa.Column("candidate_target", sa.String(), nullable=False),
        sa.Column("candidate_arm", sa.String(), nullable=False),
        sa.Column("agreement", sa.String(), nullable=True),
        sa.Column("candidate_shown_as", sa.String(1), nullable=False),
        sa.Column("wanted_reviews", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("why", sa.String(), nullable=False),
        sa.Column("exchanged_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("ix_review_items_item_id", "item_id", unique=True),
        sa.Index("ix_review_items_pair_id", "pair_id", unique=True),
        sa.Index("ix_review_items_route_version", "route", "rule_version", "created_at"),
    )
    sa.Table(
        "reviews",
        metadata,
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("item_id", sa.String(), nullable=False),
        sa.Column("reviewer_id", sa.String(), nullable=False),
        sa.Column("score_a", sa.Integer(), nullable=True),
        sa.Column("score_b", sa.Integer(), nullable=True),
        sa.Column("preference", sa.String(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("skipped", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("ix_reviews_item_reviewer", "item_id", "reviewer_id", unique=True),
        sa.Index("ix_reviews_reviewer", "reviewer_id"),
    )
    metadata.create_all(conn)


def _v17_eval_runs(conn: Connection) -> None:
    sa.Table(
        "eval_runs",
        sa.MetaData(),
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("run_group", sa.String(), nullable=False),
        sa.Column("set_name", sa.String(), nullable=False),
        sa.Column("set_version", sa.Integer(), nullable=False),
        sa.Column("set_hash", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=True),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("config_fingerprint", sa.String(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cases", sa.Integer(), nullable=False),
        sa.Column("passed", sa.Integer(), nullable=False),
        sa.Column("mean_score", sa.Float(), nullable=True),
        sa.Column("strata", sa.Text(), nullable=False),
        sa.Index("ix_eval_runs_set_model_started", "set_name", "model", "started_at"),
        sa.Index("ix_eval_runs_run_group", "run_group"),
    ).create(conn)


def _v18_review_tallies(conn: Connection) -> None:
    # Each item keeps how many reviews (not skips) it has and whether it still wants one, so that
    # the queue reads only the open items, through a partial index, instead of grouping a route's
    # whole review history at every "next" (`proxy/store/reviews.py`). A flag of its own rather
    # than `reviews_done < wanted_reviews`: PostgreSQL's statistics say how few rows are open,
    # where it guesses a third of the table for a comparison of two columns and scans it all.
    conn.execute(
        sa.text("ALTER TABLE review_items ADD COLUMN reviews_done INTEGER NOT NULL DEFAULT 0")
    )
    conn.execute(
        sa.text("ALTER TABLE review_items ADD COLUMN is_open BOOLEAN NOT NULL DEFAULT TRUE")
    )
    conn.execute(
        sa.text(
            "UPDATE review_items SET reviews_done = (SELECT count(*) FROM reviews "
            "WHERE reviews.item_id = review_items.item_id AND reviews.skipped = :no)"
        ),
        {"no": False},
    )
    conn.execute(sa.text("UPDATE review_items SET is_open = (reviews_done < wanted_reviews)"))
    items = sa.Table(
        "review_items",
        sa.MetaData(),
        sa.Column("id", _ID),
        sa.Column("route", sa.String()),
        sa.Column("is_open", sa.Boolean()),
    )
    # The condition written as the queries write it (`is_open = true` on PostgreSQL, `is_open = 1`
    # on SQLite), so that each database sees that the index answers them.
    open_ = items.c.is_open == sa.true()
    sa.Index(
        "ix_review_items_open",
        items.c.route,
        items.c.id,
        sqlite_where=open_,
        postgresql_where=open_,
    ).create(conn)


def _v19_sticky_units(conn: Connection) -> None:
    # Rows of before stay NULL: each is a unit of its own, as the judge counted them then.
    conn.execute(sa.text("ALTER TABLE exchanges ADD COLUMN sticky_unit VARCHAR"))
    # A check verdict keeps its exchange's unit, so that a rule epoch is grouped by unit without
    # joining every verdict to its exchange (a join that cost a look 8 times the plain count).
    conn.execute(sa.text("ALTER TABLE check_results ADD COLUMN sticky_unit VARCHAR"))
    conn.execute(sa.text("ALTER TABLE pairs ADD COLUMN sticky_unit VARCHAR"))  # likewise
    # Whether a window has any unit at all is asked on every look: for a route without a sticky
    # key this partial index is empty, and the answer immediate.
    conn.execute(
        sa.text(
            "CREATE INDEX ix_exchanges_route_started_sticky ON exchanges (route, started_at) "
            "WHERE sticky_unit IS NOT NULL"
        )
    )


def _v20_rule_templates(conn: Connection) -> None:
    # The templates a rule learned from its system prompts (`proxy.gateway.rule_templates`), kept
    # with each version's event so that a restarted gateway gives a prompt the same version. It
    # holds digests of words, never the words: no body text, whatever `store.bodies` says.
    conn.execute(sa.text("ALTER TABLE rule_events ADD COLUMN template TEXT"))


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "exchanges table and its indexes", _v1_exchanges),
    Migration(2, "pairs table: candidate answers compared with the primary's", _v2_pairs),
    Migration(3, "feedback table: corrections and ratings joined to exchanges", _v3_feedback),
    Migration(4, "rule_events table: the first exchange of each rule version", _v4_rule_events),
    Migration(5, "check_results table: rule check verdicts per answer", _v5_check_results),
    Migration(6, "findings table: analyzer plugins' observations", _v6_findings),
    Migration(7, "rollouts, rollout_events, verdicts and alert_claims tables", _v7_rollouts),
    Migration(8, "decider_memory table; verdicts say what each metric needs", _v8_decider_memory),
    Migration(9, "pairs.agreement: the verdict under the route's settings", _v9_pair_agreement),
    Migration(
        10,
        "findings.severity (how bad a finding is) and an index on findings.pair_id",
        _v10_finding_severity,
    ),
    Migration(
        11,
        "feedback.caller (who sent it) and signing_keys (the replicas' shared feedback key)",
        _v11_feedback_callers,
    ),
    Migration(
        12,
        "probe_results (rule-flip probes scored) and rule_events.rule_value",
        _v12_probes,
    ),
    Migration(
        13,
        "guard_decisions: the production model's guard, one decision per route and rule version",
        _v13_guard_decisions,
    ),
    Migration(
        14,
        "exchanges.operation_id (business operations) and outcomes, one per operation and kind",
        _v14_operations,
    ),
    Migration(
        15,
        "experiments and experiment_events; exchanges.experiment_arm and experiment_unit",
        _v15_experiments,
    ),
    Migration(
        16,
        "review_items (pairs queued for blind review) and reviews (one per item and reviewer)",
        _v16_reviews,
    ),
    Migration(
        17,
        "eval_runs: offline evaluation runs, scores per stratum, one row per model and run",
        _v17_eval_runs,
    ),
    Migration(
        18,
        "review_items.reviews_done and is_open (each item's reviews, kept with it) and an index "
        "of the open items",
        _v18_review_tallies,
    ),
    Migration(
        19,
        "exchanges, check_results and pairs .sticky_unit: the keyed hash of the request's "
        "sticky key, the judge's unit; an index of the exchanges that have one",
        _v19_sticky_units,
    ),
    Migration(
        20,
        "rule_events.template: each rule version's learned template (word digests and slots)",
        _v20_rule_templates,
    ),
)
"""The schema's whole history, oldest first. Append only."""


def head_version(migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """The version the database has once every migration in `migrations` is applied."""
    return migrations[-1].version if migrations else 0


def current_version(engine: Engine) -> int:
    """The version recorded in the database; 0 for a database never migrated."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table(_version_table.name):
            return 0
        return int(conn.execute(sa.select(sa.func.max(_version_table.c.version))).scalar() or 0)


def migrate(
    engine: Engine, *, schema: str | None = None, migrations: Sequence[Migration] = MIGRATIONS
) -> int:
    """Apply every migration the database lacks, in order; return the version now in place.

    `schema` is the PostgreSQL schema the engine's `search_path` points at (created if missing);
    None means the connection's current schema. Raises `SchemaVersionError` if the database is
    newer than `migrations`.
    """
    _check_sequence(migrations)
    head = head_version(migrations)
    if _at(engine, head):
        return head  # nothing to do: no lock taken, no table looked up
    while True:
        with _locked_transaction(engine, schema) as conn:
            _version_table.create(conn, checkfirst=True)
            current = int(
                conn.execute(sa.select(sa.func.max(_version_table.c.version))).scalar() or 0
            )
            if current > head:
                raise SchemaVersionError(
                    f"the database schema is at version {current} but this mirrorgate only knows "
                    f"versions up to {head}: upgrade mirrorgate (it never downgrades a schema)"
                )
            step = next((m for m in migrations if m.version > current), None)
            if step is None:
                return current
            step.apply(conn)
            conn.execute(
                _version_table.insert().values(
                    version=step.version, description=step.description, applied_at=datetime.now(UTC)
                )
            )
        log.info("schema migrated to version %d: %s", step.version, step.description)


def _at(engine: Engine, head: int) -> bool:
    """Whether the database is at version `head` already, in one plain read (every start asks,
    and usually it is). False when it cannot tell (no version table yet, a schema not made yet,
    any error): the locked path then looks again, and raises what there is to raise."""
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.select(sa.func.max(_version_table.c.version))).scalar()
    except sa.exc.DBAPIError:
        return False
    return version == head


def _check_sequence(migrations: Sequence[Migration]) -> None:
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise SchemaVersionError(f"migration versions must be 1, 2, 3, … in order; got {versions}")


@contextmanager
def _locked_transaction(engine: Engine, schema: str | None) -> Iterator[Connection]:
    """One transaction that no other migrating process can run at the same time."""
    dialect = engine.dialect.name
    with engine.connect() as conn:
        if dialect == "sqlite":
            conn.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})  # applies in place
        with conn.begin():
            if dialect == "postgresql":
                conn.execute(_ADVISORY_LOCK, {"cls": ADVISORY_LOCK_CLASS, "name": schema})
                if schema is not None:
                    conn.execute(sa.schema.CreateSchema(schema, if_not_exists=True))
            yield conn
