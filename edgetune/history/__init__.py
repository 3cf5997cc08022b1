"""Tuning history: every measurement, kept in SQL and usable as a MetaSchedule database."""

from edgetune.history.database import HistoryDatabase, open_history
from edgetune.history.maintenance import (
    DedupeResult,
    GroupStats,
    ImportResult,
    PruneResult,
    dedupe,
    export_history,
    history_stats,
    import_history,
    prune,
)
from edgetune.history.schema import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "DedupeResult",
    "GroupStats",
    "HistoryDatabase",
    "ImportResult",
    "PruneResult",
    "dedupe",
    "export_history",
    "history_stats",
    "import_history",
    "open_history",
    "prune",
]
