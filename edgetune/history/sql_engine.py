"""Where a history lives: a file path or URL parsed, and the SQLAlchemy engine for it (SQLite or PostgreSQL).

SQLite files get WAL journaling and a busy timeout so that several tunes can share one; a read-only handle
never creates the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from edgetune.errors import HistoryError


_SUPPORTED = "a file path, sqlite:///PATH or postgresql://USER@HOST/DBNAME"
_SQLITE_BUSY_TIMEOUT_MS = 30_000

def parse_location(url_or_path: str) -> tuple[URL, str]:
    """Return the SQLAlchemy URL and the name used in error messages."""
    if "://" not in url_or_path:
        path = Path(url_or_path).expanduser().resolve()
        return URL.create("sqlite", database=str(path)), url_or_path
    try:
        url = make_url(url_or_path)
    except ArgumentError:
        raise HistoryError(f"{url_or_path}: not a database URL; use {_SUPPORTED}") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        return url, url.database or ":memory:"
    if backend in ("postgresql", "postgres"):
        if "+" not in url.drivername:
            # SQLAlchemy's default PostgreSQL driver is psycopg2; edgetune ships psycopg 3.
            url = url.set(drivername="postgresql+psycopg")
        return url, url.render_as_string(hide_password=True)
    shown = url.render_as_string(hide_password=True)
    raise HistoryError(
        f"{shown}: unsupported history database '{backend}'; "
        f"supported: sqlite and postgresql ({_SUPPORTED})"
    )


def create_engine(url: URL, name: str, read_only: bool) -> Engine:
    """An engine with the SQLite pragmas the history relies on."""
    if url.get_backend_name() != "sqlite":
        try:
            return sa.create_engine(url, pool_pre_ping=True)
        except ImportError as err:
            raise HistoryError(
                f"{name}: no PostgreSQL driver ({err}); install edgetune[postgres]"
            ) from None
    if url.database in (None, "", ":memory:"):
        # One shared connection, otherwise every pooled connection is a new empty database.
        engine = sa.create_engine(
            url, poolclass=StaticPool, connect_args={"check_same_thread": False}
        )
    else:
        path = Path(url.database)
        if read_only and not path.is_file():
            raise HistoryError(f"{name}: no such tuning history file")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise HistoryError(f"{name}: cannot create its directory: {err}") from None
        engine = sa.create_engine(url)

    def set_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if not read_only:
                # Readers never block the tuner's writes, and a crash loses no commit.
                cursor.execute("PRAGMA journal_mode = WAL")
        finally:
            cursor.close()

    sa.event.listen(engine, "connect", set_pragmas)
    return engine


def connect_engine(url_or_path: str, *, must_exist: bool = False) -> tuple[Engine, str]:
    """An engine for ``url_or_path`` and the name to show in messages.

    ``must_exist``: an SQLite file that is not there is a HistoryError, not a new file.
    """
    url, name = parse_location(url_or_path)
    return create_engine(url, name, read_only=must_exist), name
