"""Every table and every query: the engine, migrations, the recorder (batched, bounded, off the
event loop), redaction, and one query object per domain (exchanges, pairs, checks, feedback,
rule events, rollouts). The only package that imports sqlalchemy or sqlmodel. Imports
`proxy.core` and `proxy.config`.
"""

from .checks import checks_table
from .exchanges import Store, StoreError, StoreUnavailableError, exchanges_table
from .feedback import FeedbackStore, feedback_table
from .migrations import ADVISORY_LOCK_CLASS, current_version, head_version
from .pairs import pairs_table
from .recorder import Recorder
from .redaction import apply_bodies_policy, redact
from .rollouts import RolloutStore

__all__ = [
    "ADVISORY_LOCK_CLASS",
    "FeedbackStore",
    "Recorder",
    "RolloutStore",
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
