"""Alembic environment: runs on the connection edgetune hands over (never a URL from an ini file)."""

from alembic import context

from edgetune.history.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
