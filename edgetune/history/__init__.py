"""Tuning history: every measurement, kept in SQL and usable as a MetaSchedule database."""

from edgetune.history.database import HistoryDatabase, open_history
from edgetune.history.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "HistoryDatabase", "open_history"]
