"""Every table and every query: the engine, migrations, the recorder (batched, bounded, off the
event loop), redaction, and one query object per domain (exchanges, pairs, checks, feedback,
rule events, rollouts). The only package that imports sqlalchemy or sqlmodel. Imports
`proxy.core` and `proxy.config`.

Every failure leaves the store as one of its own errors, translated from the database's in one
place (`errors.translated`) and chained to the original:

    StoreError                    the store cannot do what was asked (a bug, or a database it
    │                             does not understand: not worth retrying as is)
    ├── SchemaVersionError        the database is newer than this code (or the migrations are bad)
    ├── StoreUnavailableError     transient: cannot connect, locked, timed out — the same call
    │                             may succeed later
    └── RecordRejectedError       the database refused the data itself: retrying will not help
        └── DuplicateRecordError  a unique key is already held (another replica wrote it first)

Only `StoreUnavailableError` means "wait for the store"; callers treat any other error as the bug
it is.
"""

from .checks import checks_table
from .errors import (
    DuplicateRecordError,
    RecordRejectedError,
    SchemaVersionError,
    StoreError,
    StoreUnavailableError,
)
from .exchanges import Store, exchanges_table
from .feedback import FeedbackStore, feedback_table
from .migrations import ADVISORY_LOCK_CLASS, current_version, head_version
from .pairs import pairs_table
from .recorder import Recorder
from .redaction import apply_bodies_policy, redact
from .rollouts import RolloutStore

__all__ = [
    "ADVISORY_LOCK_CLASS",
    "DuplicateRecordError",
    "FeedbackStore",
    "RecordRejectedError",
    "Recorder",
    "RolloutStore",
    "SchemaVersionError",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "apply_bodies_policy",
    "checks_table",
    "current_version",
    "exchanges_table",
    "feedback_table",
    "head_version",
    "pairs_table",
    "redact",
]
