"""Alembic migrations of the tuning history, one versioned step per schema version.

Run by ``edgetune db upgrade`` (see :mod:`edgetune.history.migrate`), never
implicitly. Revision ``000N`` brings a history to schema version N. A new step:
add ``versions/000N_<what>.py`` with ``revision = "000N"``, ``down_revision``
the previous one, an ``upgrade()`` that also sets ``meta.schema_version``, and
bump :data:`edgetune.history.schema.SCHEMA_VERSION`.
"""
