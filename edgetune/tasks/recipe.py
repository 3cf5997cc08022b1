"""How a model's graph is prepared for tuning and building: the run's recipe, decided once and recorded.

A history's records match only the workloads of the graph they were tuned on:
the convolution layout, the graph optimization level, the fast-math pass and
weight prepacking all change those workloads. So ``edgetune tune`` decides the
:class:`Recipe` from the profile once (:func:`recipe_from_settings`), prepares
the model with it (:func:`prepare_model`) and records it: ``summary.json``
(``recipe``) and the history (:mod:`edgetune.history.sql_recipes`). The untuned
build, the tuned build and ``edgetune deploy --model M --db H`` prepare the
model from that record with :func:`prepare_model` too, never from a profile's
current settings.

The passes are data: each is copied from
:attr:`GraphReport.passes <edgetune.tasks.graph.GraphReport.passes>` as it ran,
so a pass added to :func:`~edgetune.tasks.graph.prepare_graph` appears in the
recipe as it is.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import RecipeError
from .graph import prepare_graph, resolve_conv_layout
from .models import LoadedModel, prepacks_weights

#: the fields that decide what is built (the rest says how it went)
BUILD_FIELDS = ("conv_layout_applied", "graph_optimization", "fast_math", "prepack_weights")


class TuningSettings(Protocol):
    """The profile keys a recipe is decided from (a profile's ``tuning`` section)."""

    conv_layout: str
    graph_optimization: str
    fast_math: bool
    prepack_weights: bool


@dataclass(frozen=True)
class RecipePass:
    """One graph pass as it went on the model: ``status`` is "applied", "unchanged" or "skipped" (``detail`` says why)."""

    name: str
    status: str
    detail: str = ""


@dataclass(frozen=True)
class Recipe:
    """How a model was prepared: what a tune's records were extracted from, and every build of them must repeat."""

    conv_layout: str  # as asked (tuning.conv_layout, or --conv-layout)
    conv_layout_applied: str  # resolved for the target ("auto" -> "NCHWc", "as-is"...): what prepare_graph is given
    graph_optimization: str
    fast_math: bool  # whether the fast-math pass was asked for (only at graph_optimization "full")
    prepack_weights: bool  # tuning.prepack_weights as it applies to the target (CPU targets only)
    passes: tuple[RecipePass, ...] = ()  # empty until the model is prepared
    tvm_version: str = ""
    inferred: bool = False  # guessed for a history tuned before recipes were recorded

    def build_key(self) -> tuple[Any, ...]:
        """What decides the prepared graph: two recipes with one key build the same workloads."""
        return tuple(getattr(self, name) for name in BUILD_FIELDS)

    def describe(self) -> str:
        """One line: ``layout NCHWc (asked auto), graph full, fast-math on, prepacking off``."""
        asked = f" (asked {self.conv_layout})" if self.conv_layout != self.conv_layout_applied else ""
        return (f"layout {self.conv_layout_applied}{asked}, graph {self.graph_optimization}, "
                f"fast-math {'on' if self.fast_math else 'off'}, prepacking {'on' if self.prepack_weights else 'off'}")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "passes": [dataclasses.asdict(p) for p in self.passes]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> "Recipe":
        """Inverse of :meth:`to_dict`; keys a newer edgetune added are ignored, missing build fields are a RecipeError."""
        if not isinstance(data, dict):
            raise RecipeError(f"a recipe must be a JSON object, got {type(data).__name__} instead")
        missing = [name for name in ("conv_layout", *BUILD_FIELDS) if name not in data]
        if missing:
            raise RecipeError(f"a recipe must have {', '.join(missing)}, got only {', '.join(sorted(data)) or 'nothing'} instead")
        try:
            passes = tuple(RecipePass(str(p["name"]), str(p["status"]), str(p.get("detail", ""))) for p in data.get("passes", ()))
        except (TypeError, KeyError) as error:
            raise RecipeError(f"a recipe's passes must be objects with a name and a status, got {error!r} instead") from None
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in known}, "passes": passes})

    @classmethod
    def from_json(cls, text: str) -> "Recipe":
        try:
            data = json.loads(text)
        except ValueError as error:
            raise RecipeError(f"a recipe must be JSON, got unreadable text instead ({error})") from None
        return cls.from_dict(data)


def recipe_from_settings(tuning: TuningSettings, target: Any, conv_layout: str | None = None) -> Recipe:
    """The recipe a profile's ``tuning`` settings ask for on ``target`` (``conv_layout`` overrides its layout).

    Only a tune (and a deploy without a history, which has no recipe to read) calls this.
    """
    import tvm

    asked = conv_layout or tuning.conv_layout
    optimization = tuning.graph_optimization
    return Recipe(
        conv_layout=asked,
        conv_layout_applied=resolve_conv_layout(asked, target),
        graph_optimization=optimization,
        fast_math=bool(tuning.fast_math) and optimization == "full",
        prepack_weights=prepacks_weights(tuning.prepack_weights, target),
        tvm_version=tvm.__version__,
    )


def prepare_model(model: LoadedModel, recipe: Recipe, target: Any) -> LoadedModel:
    """``model`` prepared as ``recipe`` says; ``.recipe`` is the recipe with the passes as they went, ``.graph`` the report.

    Every consumer prepares a model here: the tune's task extraction, its untuned and tuned builds and
    ``deploy``. ``.recipe.prepack_weights`` is what :func:`~edgetune.tasks.models.prepare_for_tuning`
    and :func:`~edgetune.artifact.compile.compile_model` must be given.
    """
    import tvm

    prepared = prepare_graph(
        model, recipe.conv_layout_applied, recipe.graph_optimization, target, fast_math=recipe.fast_math
    )
    passes = tuple(RecipePass(p.name, p.status, p.detail) for p in prepared.graph.passes)
    done = dataclasses.replace(recipe, passes=passes, tvm_version=recipe.tvm_version or tvm.__version__)
    return dataclasses.replace(prepared, recipe=done)
