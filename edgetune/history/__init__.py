"""Tuning history: every measurement, kept in SQL and usable as a MetaSchedule database."""

from edgetune.history.database import HistoryDatabase, open_history
from edgetune.history.maintenance import (
    GroupStats,
    dedupe,
    export_history,
    history_stats,
    import_history,
    prune,
)
from edgetune.history.migrate import UpgradeResult, upgrade_history
from edgetune.history.schema import SCHEMA_VERSION
from edgetune.history.store import (
    BulkStore,
    ClaimStore,
    DedupeResult,
    HistoryStore,
    ImportResult,
    PruneResult,
    RecordGroup,
    RecordSummary,
    StoredWorkload,
)

__all__ = [
    "SCHEMA_VERSION",
    "BulkStore",
    "ClaimStore",
    "DedupeResult",
    "GroupStats",
    "HistoryDatabase",
    "HistoryStore",
    "ImportResult",
    "PruneResult",
    "RecordGroup",
    "RecordSummary",
    "StoredWorkload",
    "UpgradeResult",
    "dedupe",
    "export_history",
    "history_stats",
    "import_history",
    "open_history",
    "prune",
    "upgrade_history",
]
