"""Tuning history: every measurement, kept in SQL and usable as a MetaSchedule database.

The exports are imported on first use (:mod:`edgetune.common.lazy`): the CLI builds
its ``db`` parser from this package without importing TVM.
"""

from edgetune.common.lazy import lazy_exports

_EXPORTS = {
    "HistoryDatabase": "database",
    "open_history": "database",
    "GroupStats": "maintenance",
    "dedupe": "maintenance",
    "export_history": "maintenance",
    "history_stats": "maintenance",
    "import_history": "maintenance",
    "prune": "maintenance",
    "UpgradeResult": "migrate",
    "upgrade_history": "migrate",
    "SCHEMA_VERSION": "schema",
    "BulkStore": "store",
    "ClaimStore": "store",
    "DedupeResult": "store",
    "HistoryStore": "store",
    "ImportResult": "store",
    "PruneResult": "store",
    "RecipeStore": "store",
    "RecordGroup": "store",
    "RecordSummary": "store",
    "StoredWorkload": "store",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
