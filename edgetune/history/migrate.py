"""Explicit, versioned schema upgrades of a tuning history (``edgetune db upgrade``).

The steps are Alembic revisions in ``history/migrations/versions``; revision
``000N`` brings a history to schema version N. Opening a history never changes
its schema: an older one is refused with a message naming this command, so a
shared PostgreSQL history is upgraded once, on purpose, by whoever owns it.
Histories written before Alembic was used have no ``alembic_version`` table;
their ``meta.schema_version`` says where they stand, and they are stamped at
that revision before upgrading.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from edgetune.errors import HistoryError
from edgetune.history.schema import SCHEMA_VERSION, meta, revision_of
from edgetune.history.sql import one_line

MIGRATIONS = Path(__file__).with_name("migrations")


@dataclass
class UpgradeResult:
    history: str  # name used in messages (password masked)
    before: int
    after: int

    @property
    def changed(self) -> bool:
        return self.before != self.after


def stored_version(conn: Connection, name: str) -> int:
    """The schema version ``meta`` records; a missing or garbled one is a HistoryError."""
    value = conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).scalar_one_or_none()
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise HistoryError(f"{name}: tuning history without a valid schema version ({value!r})") from None


def _alembic_config(conn: Connection):
    try:
        from alembic.config import Config
    except ImportError as err:  # a declared dependency; a broken install says so
        raise HistoryError(f"schema upgrades need alembic ({err}); reinstall edgetune") from None
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    return config


def _lock(conn: Connection) -> None:
    """One upgrader at a time; the others wait, then find the history already upgraded."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("LOCK TABLE meta IN EXCLUSIVE MODE")
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def upgrade_history(url_or_path: str) -> UpgradeResult:
    """Bring the history at ``url_or_path`` to this edgetune's schema version, in one transaction."""
    from alembic import command

    from edgetune.history.sql_engine import connect_engine

    engine, name = connect_engine(url_or_path, must_exist=True)
    try:
        with engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
            if "meta" not in tables:
                raise HistoryError(f"{name}: no edgetune tuning history here, nothing to upgrade")
            _lock(conn)
            before = stored_version(conn, name)
            if before > SCHEMA_VERSION:
                raise HistoryError(
                    f"{name}: history schema version {before} is newer than this edgetune's "
                    f"({SCHEMA_VERSION}); upgrade edgetune instead"
                )
            if before < SCHEMA_VERSION:
                config = _alembic_config(conn)
                if "alembic_version" not in tables:
                    command.stamp(config, revision_of(before))
                command.upgrade(config, revision_of(SCHEMA_VERSION))
                after = stored_version(conn, name)
            else:
                after = before
            conn.commit()
    except SQLAlchemyError as err:
        raise HistoryError(f"{name}: cannot upgrade the tuning history: {one_line(err)}") from None
    finally:
        engine.dispose()
    return UpgradeResult(name, before, after)
