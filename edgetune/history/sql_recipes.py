"""Each tuned model's recipe in the history: how its graph was prepared, per model file and target.

A tune stores its :class:`~edgetune.tasks.recipe.Recipe` before it measures
anything (an interrupted run's records have theirs too), and ``edgetune deploy
--model M --db H`` reads it to build exactly what was tuned. The recipes live in
the ``meta`` key/value table, one row per (model sha256, target), so the schema
is unchanged and a history written by an older edgetune still opens: it just
holds no recipe. The last tune of a model on a target wins.

Composed into a :class:`~edgetune.history.database.HistoryDatabase` (its
``recipes``), whose engine access (``core._access``) it uses, on SQLite and
PostgreSQL alike.
"""

from __future__ import annotations

import json
import time
from typing import Any

import sqlalchemy as sa
from tvm.target import Target

from edgetune.errors import HistoryError, RecipeError
from edgetune.history.schema import meta
from edgetune.history.sql import insert_statement, sha256, target_json
from edgetune.history.store import RecipeStore
from edgetune.tasks.recipe import Recipe

#: ``meta.key`` of a recipe: this prefix and a hash of the model's sha256 and the target (64 characters in all)
PREFIX = "recipe:"


def recipe_key(model_sha256: str, target: Target) -> str:
    """The ``meta`` key of ``model_sha256``'s recipe on ``target``."""
    return PREFIX + sha256(f"{model_sha256}|{target_json(target)}")[: 64 - len(PREFIX)]


class SqlRecipes(RecipeStore):
    """Store and read recipes in the history's ``meta`` table."""

    def __init__(self, core: Any) -> None:
        self._core = core

    def store(self, model_sha256: str, target: Target, recipe: Recipe) -> None:
        """Record ``recipe`` for the model on ``target``, replacing the one a former tune recorded."""
        value = json.dumps(
            {"model_sha256": model_sha256, "target": json.loads(target_json(target)), "stored_at": time.time(),
             "recipe": recipe.to_dict()},
            sort_keys=True,
        )
        key = recipe_key(model_sha256, target)
        with self._core._access("store a recipe", write=True) as engine, engine.begin() as conn:
            stmt = insert_statement(conn, meta).values(key=key, value=value)
            conn.execute(stmt.on_conflict_do_update(index_elements=["key"], set_={"value": value}))

    def load(self, model_sha256: str, target: Target) -> Recipe | None:
        """The recipe the model was last tuned with on ``target``; None when the history holds none (an older tune)."""
        key = recipe_key(model_sha256, target)
        with self._core._access("read a recipe") as engine, engine.connect() as conn:
            value = conn.execute(sa.select(meta.c.value).where(meta.c.key == key)).scalar_one_or_none()
        if value is None:
            return None
        try:
            stored = json.loads(value)
            if stored["model_sha256"] != model_sha256:
                raise KeyError("model_sha256")
            return Recipe.from_dict(stored["recipe"])
        except (ValueError, KeyError, TypeError, RecipeError) as error:
            raise HistoryError(
                f"{self._core.url}: the recipe of model {model_sha256[:16]}... must be a recorded recipe, got "
                f"unreadable JSON instead ({error}); tune the model again to record it"
            ) from None
