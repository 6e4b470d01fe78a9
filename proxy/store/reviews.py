"""Blind review in the store: the pairs queued for review (`review_items`) and what reviewers
made of them (`reviews`), one row per (item, reviewer) — a review, or a skip (schema: migrations
16 and 18).

An item is one pair of answers to the same request, joined to both exchanges by what it stores
(the request id, the pair id, each side's target and arm): the texts are read from `exchanges`
when a reviewer is shown the item and never copied, so retention and `store.bodies` apply to
them as to every other exchange. The item also stores which side is shown as A (a fair coin per
item, drawn by the caller) so position bias can be measured, how many reviewers it wants (one,
or two for agreement), its sampling weight and why, how many reviews it has had
(`reviews_done`) and whether it still wants one (`is_open`), both kept by the transaction that
stores each review, and closed by the retention purge that deletes its exchanges
(`close_older_than`): the queue's reads go through the index of the open items, at most those of
the retention window, so a reviewer's "next" costs the same after a year of reviews as on the
first day.

None of the model, target, arm or request names an item holds ever leaves through
`ReviewItem.shown`: the page's view is built from the texts and the opaque `item_id` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa

from proxy.core import Arm, Status, as_utc

from .errors import DuplicateRecordError, translated
from .exchanges import Store, exchanges_table
from .pairs import pairs_table

Side = Literal["A", "B"]
Preference = Literal["A", "B", "tie"]
LIVE_ARMS = (Arm.PRIMARY.value, Arm.CANARY.value, Arm.FALLBACK.value)
"""Arms whose answer a client received: one side of every reviewed pair."""
REASON_MAX_CHARS = 2000
EXPERIMENT_SIDE = "experiment:"
"""How an item of source `experiment` names the experiment arm of each side in its
`primary_arm` / `candidate_arm` (`experiment:<arm>`): kept with the item, server side only."""


def experiment_side(arm: str) -> str:
    """The `primary_arm` / `candidate_arm` of an item side answered by experiment arm `arm`."""
    return f"{EXPERIMENT_SIDE}{arm}"


def experiment_arm_of(side: str) -> str | None:
    """The experiment arm an item side names (None: the side is not an experiment arm's)."""
    return side[len(EXPERIMENT_SIDE) :] if side.startswith(EXPERIMENT_SIDE) else None


def exchange_arm(side: str) -> str:
    """The `exchanges.arm` of the exchange an item side was answered by."""
    return Arm.EXPERIMENT.value if side.startswith(EXPERIMENT_SIDE) else side


_meta = sa.MetaData()
review_items_table = sa.Table(
    "review_items",
    _meta,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
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
    sa.Column("reviews_done", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("is_open", sa.Boolean(), nullable=False, server_default=sa.true()),
)
reviews_table = sa.Table(
    "reviews",
    _meta,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("item_id", sa.String(), nullable=False),
    sa.Column("reviewer_id", sa.String(), nullable=False),
    sa.Column("score_a", sa.Integer(), nullable=True),
    sa.Column("score_b", sa.Integer(), nullable=True),
    sa.Column("preference", sa.String(), nullable=True),
    sa.Column("reason", sa.Text(), nullable=True),
    sa.Column("skipped", sa.Boolean(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)
_items, _reviews, _exchanges, _pairs = (
    review_items_table,
    reviews_table,
    exchanges_table,
    pairs_table,
)
_OPEN = _items.c.is_open == sa.true()
"""An item that still wants a review (`reviews_done < wanted_reviews`) and can still be shown
(retention has not deleted its exchanges, `close_older_than`): the condition of
`ix_review_items_open` (migration 18), written as the index's so that SQLite and PostgreSQL read
the open items through it."""


@dataclass(frozen=True, slots=True)
class ReviewCandidate:
    """A pair of answers to one request that could be queued: both answered well and both texts
    are stored. `primary` is the answer the client received, `candidate` the other one."""

    source: str
    """Where the pair comes from: `shadow` (a shadow's answer beside the live one), or
    `experiment` (an experiment arm's live answer beside a shadow that is another arm's model;
    both sides then name their arm, `experiment:<arm>`)."""
    pair_id: str
    request_id: str
    route: str
    rule: str | None
    rule_version: str | None
    primary_target: str
    primary_arm: str
    candidate_target: str
    candidate_arm: str
    agreement: str | None
    """The pair's agreement verdict when it was recorded (`agree`, `disagree`, …), if any."""
    exchanged_at: datetime


@dataclass(frozen=True, slots=True)
class ReviewItem:
    """A queued pair, as the store keeps it (server side only: never sent to a page)."""

    item_id: str
    """Opaque and random: the only handle a reviewer's page holds."""
    candidate: ReviewCandidate
    candidate_shown_as: Side
    """The side the candidate's answer is shown on; the primary's is on the other."""
    wanted_reviews: int
    """1, or 2 for the share offered to a second reviewer (agreement)."""
    weight: float
    why: str
    """What made the pair likely to be drawn (`disagree`, `new_version`, `rollout`, `plain`)."""
    created_at: datetime

    def side_of(self, target_is_candidate: bool) -> Side:
        if target_is_candidate:
            return self.candidate_shown_as
        return "B" if self.candidate_shown_as == "A" else "A"


@dataclass(frozen=True, slots=True)
class ReviewTexts:
    """What a reviewer reads of an item: the request as the client sent it (JSON text) and the
    two answers by side."""

    request_body: str
    answer_a: str
    answer_b: str


@dataclass(frozen=True, slots=True)
class ReviewRecord:
    """One reviewer's verdict on one item (or a skip: no scores, no preference)."""

    item_id: str
    reviewer_id: str
    """The console's stable reviewer id (a keyed hash of the token, never the token)."""
    created_at: datetime
    score_a: int | None = None
    """1-5, of the answer shown as A."""
    score_b: int | None = None
    preference: Preference | None = None
    reason: str | None = None
    """At most `REASON_MAX_CHARS`, stored under `store.bodies` like other reasons."""
    skipped: bool = False


@dataclass(frozen=True, slots=True)
class ReviewedItem:
    """A review with its item (for progress, agreement, the judge)."""

    item: ReviewItem
    review: ReviewRecord

    @property
    def candidate_preference(self) -> float | None:
        """1.0 when the reviewer preferred the candidate's answer, 0.0 the primary's, 0.5 a
        tie; None for a skip."""
        preference = self.review.preference
        if preference is None:
            return None
        if preference == "tie":
            return 0.5
        return 1.0 if preference == self.item.candidate_shown_as else 0.0


@dataclass(frozen=True, slots=True)
class QueueCount:
    """One route and rule version's queue, as a reviewer chooses it."""

    route: str
    rule_version: str | None
    open: int
    """Items that still want a review."""
    reviews: int


ANY_VERSION = "*"
"""`rule_version` filter meaning every version (and none)."""


class ReviewStore:
    """Reads and writes `review_items` and `reviews` (blocking: call from a worker thread).
    Every method raises `StoreError`s only."""

    def __init__(self, store: Store) -> None:
        self._engine = store.engine
        self._text = store.text
        self.keeps_bodies = store.text.policy != "none"
        """False under `store.bodies: none`: no answer text is stored, so nothing can be
        reviewed."""

    # --- the sampler's side -------------------------------------------------------------------

    def candidates(
        self, route: str, rule_version: str, *, since: datetime, limit: int = 500
    ) -> list[ReviewCandidate]:
        """The newest shadow pairs of `route` (of `rule_version`, or every one for
        `ANY_VERSION`) since `since` that are not queued yet, both answered well, with the
        request and both answers stored; at most `limit`, newest first."""
        return self._pairs(route, rule_version, since=since, limit=limit, experiment=False)

    def experiment_candidates(
        self, route: str, rule_version: str, *, since: datetime, limit: int = 500
    ) -> list[ReviewCandidate]:
        """As `candidates`, of the shadow pairs whose live answer was served by an experiment
        arm (arm `experiment`): source `experiment`, `primary_arm` `experiment:<its arm>`,
        `candidate_arm` `shadow` (which arm's model the shadow is, the caller knows from the
        experiment's config)."""
        return self._pairs(route, rule_version, since=since, limit=limit, experiment=True)

    def _pairs(
        self, route: str, rule_version: str, *, since: datetime, limit: int, experiment: bool
    ) -> list[ReviewCandidate]:
        live = _exchanges.alias("live")
        shadow = _exchanges.alias("shadow")
        p = _pairs.c
        queued = sa.select(_items.c.id).where(_items.c.pair_id == p.pair_id).exists()
        statement = (
            sa.select(
                p.pair_id, p.request_id, p.route, p.primary_target, p.candidate_target,
                p.agreement, p.created_at, live.c.arm.label("primary_arm"),
                live.c.rule, live.c.rule_version, shadow.c.arm.label("candidate_arm"),
                live.c.experiment_arm,
            )
            .join(live, sa.and_(live.c.request_id == p.request_id,
                                live.c.target == p.primary_target,
                                live.c.arm == Arm.EXPERIMENT.value if experiment
                                else live.c.arm.in_(LIVE_ARMS),
                                live.c.status == Status.OK.value))
            .join(shadow, sa.and_(shadow.c.pair_id == p.pair_id,
                                  shadow.c.arm == Arm.SHADOW.value))
            .where(
                p.route == route, p.kind == "shadow", p.created_at >= as_utc(since),
                p.primary_status == Status.OK.value, p.candidate_status == Status.OK.value,
                live.c.request_body.is_not(None), live.c.response_text.is_not(None),
                shadow.c.response_text.is_not(None), ~queued,
            )
            .order_by(p.id.desc())
            .limit(limit * 2)
        )  # fmt: skip
        if rule_version != ANY_VERSION:
            statement = statement.where(live.c.rule_version == rule_version)
        if experiment:
            statement = statement.where(live.c.experiment_arm.is_not(None))
        with translated("reading pairs to review"), self._engine.connect() as conn:
            rows = conn.execute(statement).mappings().all()
        seen: set[str] = set()
        found: list[ReviewCandidate] = []
        for row in rows:  # a request answered twice (a retry) joins twice: keep one
            if row["pair_id"] in seen:
                continue
            seen.add(row["pair_id"])
            found.append(
                ReviewCandidate(
                    source="experiment" if experiment else "shadow",
                    pair_id=row["pair_id"],
                    request_id=row["request_id"],
                    route=row["route"],
                    rule=row["rule"],
                    rule_version=row["rule_version"],
                    primary_target=row["primary_target"],
                    primary_arm=(
                        experiment_side(row["experiment_arm"]) if experiment else row["primary_arm"]
                    ),
                    candidate_target=row["candidate_target"],
                    candidate_arm=row["candidate_arm"],
                    agreement=row["agreement"],
                    exchanged_at=as_utc(row["created_at"]),
                )
            )
        return found[:limit]

    def enqueue(self, items: Sequence[ReviewItem]) -> int:
        """Queue `items`; a pair already queued (by another replica, say) is left as it is.
        Returns how many were added."""
        rows = [_item_row(item) for item in items]
        try:  # the common case: none is queued yet, one transaction for all
            with translated("queuing pairs for review", writing=True), self._engine.begin() as conn:
                if rows:
                    conn.execute(sa.insert(_items), rows)
            return len(rows)
        except DuplicateRecordError:
            pass
        added = 0
        for row in rows:  # one of them is: each alone, so the others still go in
            try:
                with (
                    translated("queuing a pair for review", writing=True),
                    self._engine.begin() as conn,
                ):
                    conn.execute(sa.insert(_items), [row])
            except DuplicateRecordError:
                continue
            added += 1
        return added

    def close_older_than(self, cutoff: datetime) -> int:
        """Close the open items whose pair was recorded before `cutoff`, the retention cutoff:
        their exchanges are deleted, so no reviewer can be shown them any more. Returns how many
        were closed. Their reviews stay; so the open items are never more than those of the
        retention window, and the queue's reads stay bounded by it."""
        statement = (
            sa.update(_items)
            .where(_OPEN, _items.c.exchanged_at < as_utc(cutoff))
            .values(is_open=False)
        )
        with (
            translated("closing review items past retention", writing=True),
            self._engine.begin() as conn,
        ):
            return int(conn.execute(statement).rowcount)

    # --- the reviewer's side ------------------------------------------------------------------

    def next_item(self, route: str, rule_version: str, reviewer_id: str) -> ReviewItem | None:
        """The next item of the queue for `reviewer_id`: one that still wants a review and that
        this reviewer has neither reviewed nor skipped; items waiting for their second review
        first (so agreement can be read early), then the oldest."""
        mine = _mine(reviewer_id)
        statement = (
            _with_reviews(sa.select(_items), route)
            .where(_OPEN)
            .having(mine == 0)
            .order_by(_items.c.reviews_done.desc(), _items.c.id)
            .limit(1)
        )
        if rule_version != ANY_VERSION:
            statement = statement.where(_items.c.rule_version == rule_version)
        with translated("reading the review queue"), self._engine.connect() as conn:
            row = conn.execute(statement).mappings().first()
        return None if row is None else _item(row)

    def item(self, item_id: str) -> ReviewItem | None:
        with translated("reading a review item"), self._engine.connect() as conn:
            row = conn.execute(sa.select(_items).where(_items.c.item_id == item_id)).mappings()
            found = row.first()
        return None if found is None else _item(found)

    def texts(self, item: ReviewItem) -> ReviewTexts | None:
        """The request and both answers of `item`, by the side each is shown on; None when
        either exchange is gone (retention) or kept no text."""
        c = _exchanges.c
        c_item = item.candidate
        statement = sa.select(c.pair_id, c.arm, c.request_body, c.response_text).where(
            c.request_id == c_item.request_id,
            sa.or_(
                sa.and_(c.target == c_item.primary_target,
                        c.arm == exchange_arm(c_item.primary_arm),
                        c.status == Status.OK.value),
                c.pair_id == c_item.pair_id,
            ),
        )  # fmt: skip
        with translated("reading a review item's answers"), self._engine.connect() as conn:
            rows = conn.execute(statement).mappings().all()
        live = next((row for row in rows if row["arm"] == exchange_arm(c_item.primary_arm)), None)
        other = next((row for row in rows if row["pair_id"] == c_item.pair_id), None)
        if live is None or other is None:
            return None
        body, primary_text, candidate_text = (
            live["request_body"],
            live["response_text"],
            other["response_text"],
        )
        if body is None or primary_text is None or candidate_text is None:
            return None
        if item.candidate_shown_as == "A":
            return ReviewTexts(body, candidate_text, primary_text)
        return ReviewTexts(body, primary_text, candidate_text)

    def add(self, review: ReviewRecord) -> bool:
        """Store `review` (or a skip); False, and nothing changes, when this reviewer already
        reviewed or skipped the item."""
        row = {
            "item_id": review.item_id,
            "reviewer_id": review.reviewer_id,
            "score_a": review.score_a,
            "score_b": review.score_b,
            "preference": review.preference,
            "reason": self._text.text(review.reason),
            "skipped": review.skipped,
            "created_at": as_utc(review.created_at),
        }
        try:
            with translated("storing a review", writing=True), self._engine.begin() as conn:
                conn.execute(sa.insert(_reviews), [row])
                if not review.skipped:  # one statement: concurrent reviews each count
                    conn.execute(
                        sa.update(_items)
                        .where(_items.c.item_id == review.item_id)
                        .values(
                            reviews_done=_items.c.reviews_done + 1,
                            is_open=_items.c.reviews_done + 1 < _items.c.wanted_reviews,
                        )
                    )
        except DuplicateRecordError:
            return False
        return True

    # --- what the reviews say -----------------------------------------------------------------

    def reviewed(
        self,
        *,
        route: str | None = None,
        rule_version: str = ANY_VERSION,
        since: datetime | None = None,
        targets: tuple[str, str] | None = None,
        include_skips: bool = False,
        limit: int = 100_000,
    ) -> list[ReviewedItem]:
        """Reviews with their items, oldest review first: of `route`, of `rule_version`, of pairs
        exchanged since `since`, of items whose (primary, candidate) targets are `targets`."""
        i, r = _items.c, _reviews.c
        statement = sa.select(_items, *_review_columns()).join(_reviews, r.item_id == i.item_id)
        if route is not None:
            statement = statement.where(i.route == route)
        if rule_version != ANY_VERSION:
            statement = statement.where(i.rule_version == rule_version)
        if since is not None:
            statement = statement.where(i.exchanged_at >= as_utc(since))
        if targets is not None:
            statement = statement.where(
                i.primary_target == targets[0], i.candidate_target == targets[1]
            )
        if not include_skips:
            statement = statement.where(r.skipped == sa.false())
        statement = statement.order_by(r.created_at, r.id).limit(limit)
        with translated("reading reviews"), self._engine.connect() as conn:
            rows = conn.execute(statement).mappings().all()
        return [ReviewedItem(_item(row), _review(row)) for row in rows]

    def queues(self) -> list[QueueCount]:
        """Every route and rule version with queued items: open items and reviews."""
        i = _items.c
        statement = (
            sa.select(
                i.route,
                i.rule_version,
                sa.func.sum(sa.case((_OPEN, 1), else_=0)),
                sa.func.sum(i.reviews_done),
            )
            .group_by(i.route, i.rule_version)
            .order_by(i.route, i.rule_version)
        )
        with translated("counting review queues"), self._engine.connect() as conn:
            rows: list[tuple[Any, ...]] = [tuple(row) for row in conn.execute(statement)]
        return [
            QueueCount(str(route), version, int(open_ or 0), int(reviews or 0))
            for route, version, open_, reviews in rows
        ]

    def open_count(self, route: str, rule_version: str, reviewer_id: str) -> int:
        """Items of the queue still open for `reviewer_id` (not reviewed or skipped by them)."""
        mine = _mine(reviewer_id)
        open_ = _with_reviews(sa.select(_items.c.id), route).where(_OPEN).having(mine == 0)
        if rule_version != ANY_VERSION:
            open_ = open_.where(_items.c.rule_version == rule_version)
        statement = sa.select(sa.func.count()).select_from(open_.subquery())
        with translated("counting the review queue"), self._engine.connect() as conn:
            return int(conn.execute(statement).scalar_one())


def _item_row(item: ReviewItem) -> dict[str, Any]:
    c = item.candidate
    return {
        "item_id": item.item_id, "source": c.source, "route": c.route, "rule": c.rule,
        "rule_version": c.rule_version, "request_id": c.request_id,
        "pair_id": c.pair_id, "primary_target": c.primary_target,
        "primary_arm": c.primary_arm, "candidate_target": c.candidate_target,
        "candidate_arm": c.candidate_arm, "agreement": c.agreement,
        "candidate_shown_as": item.candidate_shown_as,
        "wanted_reviews": item.wanted_reviews, "weight": item.weight, "why": item.why,
        "exchanged_at": as_utc(c.exchanged_at), "created_at": as_utc(item.created_at),
    }  # fmt: skip


def _mine(reviewer_id: str) -> sa.ColumnElement[int]:
    """Over an item's reviews (`_with_reviews`): how many are `reviewer_id`'s (a review or a
    skip; at most one)."""
    r = _reviews.c
    return sa.func.count(sa.case((r.reviewer_id == reviewer_id, r.id)))


def _with_reviews(statement: sa.Select[Any], route: str) -> sa.Select[Any]:
    """`statement` over the items of `route`, each grouped with its reviews: one pass over the
    items it selects (the open ones, with `_OPEN`) and their reviews by
    `ix_reviews_item_reviewer`, however many reviews a reviewer has (a `NOT EXISTS` on the
    reviewer's own reviews let PostgreSQL rescan all of them for every item while its
    statistics were young)."""
    i = _items.c
    return (
        statement.select_from(_items.outerjoin(_reviews, _reviews.c.item_id == i.item_id))
        .where(i.route == route)
        .group_by(i.id)
    )


def _review_columns() -> list[sa.Label[Any]]:
    r = _reviews.c
    return [
        r.reviewer_id.label("r_reviewer_id"),
        r.score_a.label("r_score_a"),
        r.score_b.label("r_score_b"),
        r.preference.label("r_preference"),
        r.reason.label("r_reason"),
        r.skipped.label("r_skipped"),
        r.created_at.label("r_created_at"),
    ]


def _item(row: sa.RowMapping) -> ReviewItem:
    return ReviewItem(
        item_id=row["item_id"],
        candidate=ReviewCandidate(
            source=row["source"],
            pair_id=row["pair_id"],
            request_id=row["request_id"],
            route=row["route"],
            rule=row["rule"],
            rule_version=row["rule_version"],
            primary_target=row["primary_target"],
            primary_arm=row["primary_arm"],
            candidate_target=row["candidate_target"],
            candidate_arm=row["candidate_arm"],
            agreement=row["agreement"],
            exchanged_at=as_utc(row["exchanged_at"]),
        ),
        candidate_shown_as="A" if row["candidate_shown_as"] == "A" else "B",
        wanted_reviews=int(row["wanted_reviews"]),
        weight=float(row["weight"]),
        why=row["why"],
        created_at=as_utc(row["created_at"]),
    )


def _review(row: sa.RowMapping) -> ReviewRecord:
    preference = row["r_preference"]
    return ReviewRecord(
        item_id=row["item_id"],
        reviewer_id=row["r_reviewer_id"],
        created_at=as_utc(row["r_created_at"]),
        score_a=row["r_score_a"],
        score_b=row["r_score_b"],
        preference=preference if preference in ("A", "B", "tie") else None,
        reason=row["r_reason"],
        skipped=bool(row["r_skipped"]),
    )
