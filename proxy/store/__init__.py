"""Every table and every query: the engine, migrations, the recorder (batched, bounded, off the
event loop), the crash journal (`Journal`: answered exchanges on local disk until the store commits
them, replayed at start), redaction, and one query object per domain — `Store` (exchanges, pairs,
checks), `FeedbackStore`, `RuleEventStore`, `RolloutStore`, `ReviewStore` (blind review's queue and
reviews), `ExperimentStore` (A/B experiments and their per-unit evidence), `JudgeWindows` (the
rollout judge's reads), `OutcomeStore` (business operations' outcomes and the reads of their
exchanges), `ProbeStore` (rule-flip probes' results), `EvalStore` (evaluation sets' sampling and
runs), `SigningKeyStore` (keys the replicas share) and `Leadership` (the decider's advisory lock).
The only package that imports sqlalchemy or sqlmodel: the rest of mirrorgate asks these objects,
built from one `Store` by the wiring, and never holds an engine or a connection. Imports
`proxy.observability` (the recorder's metric families), `proxy.core` and `proxy.config`.

Every failure leaves the store as one of its own errors, translated from the database's in one
place (`errors.translated`) and chained to the original:

    StoreError                    the store cannot do what was asked (a bug, or a database it
    │                             does not understand: not worth retrying as is)
    ├── SchemaVersionError        the schema is newer than this code (or older, for a reader
    │                             that never migrates; or the migration list is bad)
    ├── StoreUnavailableError     transient: cannot connect, locked, timed out — the same call
    │                             may succeed later
    └── RecordRejectedError       the database refused the data itself: retrying will not help
        └── DuplicateRecordError  a unique key is already held (another replica wrote it first)

Only `StoreUnavailableError` means "wait for the store"; callers treat any other error as the bug
it is.
"""

from .errors import (
    DuplicateRecordError,
    RecordRejectedError,
    SchemaVersionError,
    StoreError,
    StoreUnavailableError,
)
from .evalsets import EvalRun, EvalStore, SampledExchange, StratumScore
from .exchanges import Store, masked_url
from .experiments import ExperimentStore, UnitTally
from .feedback import FeedbackStore
from .guard import AnswerTally, GuardDecision, GuardStore, RuleEpochs
from .journal import Journal, ReplayReport
from .judge_windows import (
    KEYLESS_PREFIX,
    ArmExchange,
    Arms,
    CheckCount,
    CheckUnitCount,
    Epoch,
    FindingCount,
    JudgeWindows,
    PairCount,
    PairUnitCount,
    UnitCount,
)
from .leadership import Leadership
from .outcomes import OutcomeStore
from .probes import ProbeStore, ProbeTally
from .recorder import Recorder
from .redaction import apply_bodies_policy, redact
from .retry import WriteRetry
from .reviews import (
    ANY_VERSION,
    REASON_MAX_CHARS,
    QueueCount,
    ReviewCandidate,
    ReviewedItem,
    ReviewItem,
    ReviewRecord,
    ReviewStore,
    ReviewTexts,
    experiment_arm_of,
    experiment_side,
)
from .rollouts import RolloutStore
from .rule_events import RuleEvent, RuleEventStore, VersionTraffic
from .signing_keys import SigningKeyStore

__all__ = [
    "ANY_VERSION",
    "KEYLESS_PREFIX",
    "REASON_MAX_CHARS",
    "AnswerTally",
    "ArmExchange",
    "Arms",
    "CheckCount",
    "CheckUnitCount",
    "DuplicateRecordError",
    "Epoch",
    "EvalRun",
    "EvalStore",
    "ExperimentStore",
    "FeedbackStore",
    "FindingCount",
    "GuardDecision",
    "GuardStore",
    "Journal",
    "JudgeWindows",
    "Leadership",
    "OutcomeStore",
    "PairCount",
    "PairUnitCount",
    "ProbeStore",
    "ProbeTally",
    "QueueCount",
    "RecordRejectedError",
    "Recorder",
    "ReplayReport",
    "ReviewCandidate",
    "ReviewItem",
    "ReviewRecord",
    "ReviewStore",
    "ReviewTexts",
    "ReviewedItem",
    "RolloutStore",
    "RuleEpochs",
    "RuleEvent",
    "RuleEventStore",
    "SampledExchange",
    "SchemaVersionError",
    "SigningKeyStore",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "StratumScore",
    "UnitCount",
    "UnitTally",
    "VersionTraffic",
    "WriteRetry",
    "apply_bodies_policy",
    "experiment_arm_of",
    "experiment_side",
    "masked_url",
    "redact",
]
