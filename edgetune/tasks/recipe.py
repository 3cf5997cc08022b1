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

The passes and switches are data: each pass is copied from
:attr:`GraphReport.passes <edgetune.tasks.graph.GraphReport.passes>` as it ran,
so a pass added to :func:`~edgetune.tasks.graph.prepare_graph` appears in the
recipe as it is, and each keyword-only switch of ``prepare_graph``
(``fast_math``...) is read from the profile's ``tuning`` key of the same name,
recorded, and given back when the recipe is built (:func:`graph_switches`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import RecipeError
from .graph import prepare_graph, resolve_conv_layout
from .models import LoadedModel, prepacks_weights

#: the fields that decide what is built (the rest says how it went)
BUILD_FIELDS = ("conv_layout_applied", "graph_optimization", "prepack_weights", "switches")


class TuningSettings(Protocol):
    """The profile keys a recipe is decided from (a profile's ``tuning`` section); and one per :func:`graph_switches`."""

    conv_layout: str
    graph_optimization: str
    prepack_weights: bool


def graph_switches() -> dict[str, Any]:
    """:func:`~edgetune.tasks.graph.prepare_graph`'s keyword-only switches and their defaults (``fast_math``...).

    Each is read from the profile's ``tuning`` key of the same name (``tuning.fast_math``), recorded in a
    recipe and given back to ``prepare_graph`` when the recipe is built: a switch added there is recorded
    and rebuilt with nothing to change here.
    """
    parameters = inspect.signature(prepare_graph).parameters.values()
    return {p.name: p.default for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}


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
    prepack_weights: bool  # tuning.prepack_weights as it applies to the target (CPU targets only)
    #: prepare_graph's switches as asked, sorted by name: (("fast_math", True), ...); one not recorded takes its default
    switches: tuple[tuple[str, Any], ...] = ()
    passes: tuple[RecipePass, ...] = ()  # empty until the model is prepared
    tvm_version: str = ""
    inferred: bool = False  # guessed for a history tuned before recipes were recorded

    def switch(self, name: str) -> Any:
        """The recorded value of one of prepare_graph's switches, else its default."""
        return dict(self.switches).get(name, graph_switches().get(name))

    def with_switch(self, name: str, value: Any) -> "Recipe":
        return dataclasses.replace(self, switches=tuple(sorted({**dict(self.switches), name: value}.items())))

    @property
    def fast_math(self) -> bool:
        """Whether the fast-math pass was asked for: ``tuning.fast_math`` at graph optimization ``full``."""
        return bool(self.switch("fast_math")) and self.graph_optimization == "full"

    def build_key(self) -> tuple[Any, ...]:
        """What decides the prepared graph: two recipes with one key build the same workloads."""
        return tuple(getattr(self, name) for name in BUILD_FIELDS)

    def describe(self) -> str:
        """One line: ``layout NCHWc (asked auto), graph full, fast-math on, prepacking off``."""
        asked = f" (asked {self.conv_layout})" if self.conv_layout != self.conv_layout_applied else ""
        switches = [f"{name.replace('_', '-')} {_on_off(value)}" for name, value in self.switches if name != "fast_math"]
        return ", ".join([f"layout {self.conv_layout_applied}{asked}", f"graph {self.graph_optimization}",
                          f"fast-math {_on_off(self.fast_math)}", *switches, f"prepacking {_on_off(self.prepack_weights)}"])

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "switches": dict(self.switches), "passes": [dataclasses.asdict(p) for p in self.passes]}

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
            # JSON's lists back to tuples: a recipe's build key is hashed
            switches = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in dict(data["switches"]).items()))
        except (TypeError, KeyError, ValueError, AttributeError) as error:
            raise RecipeError(f"a recipe's passes and switches must be objects, got {error!r} instead") from None
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in known}, "passes": passes, "switches": switches})

    @classmethod
    def from_json(cls, text: str) -> "Recipe":
        try:
            data = json.loads(text)
        except ValueError as error:
            raise RecipeError(f"a recipe must be JSON, got unreadable text instead ({error})") from None
        return cls.from_dict(data)


def _on_off(value: Any) -> str:
    if isinstance(value, (tuple, list)):  # tuning.winograd resolved from the library: the shapes it names
        return f"{len(value)} shape(s) from the library"
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def recipe_from_settings(tuning: TuningSettings, target: Any, conv_layout: str | None = None, library: Any = None) -> Recipe:
    """The recipe a profile's ``tuning`` settings ask for on ``target`` (``conv_layout`` overrides its layout).

    Only a tune (and a deploy without a history, which has no recipe to read) calls this. ``library`` (a schedule
    library, :mod:`edgetune.schedules`) is what ``tuning.winograd = "auto"`` chooses its shapes from: None, none.
    """
    import tvm

    asked = conv_layout or tuning.conv_layout
    applied = resolve_conv_layout(asked, target)
    # a switch without a profile key of its name keeps prepare_graph's default
    switches = {name: getattr(tuning, name, default) for name, default in graph_switches().items()}
    if "winograd" in switches:
        switches["winograd"] = resolve_winograd(switches["winograd"], applied, target, library)
    return Recipe(
        conv_layout=asked,
        conv_layout_applied=applied,
        graph_optimization=tuning.graph_optimization,
        prepack_weights=prepacks_weights(tuning.prepack_weights, target),
        switches=tuple(sorted(switches.items())),
        tvm_version=tvm.__version__,
    )


def resolve_winograd(setting: Any, conv_layout_applied: str, target: Any, library: Any) -> bool | tuple[str, ...]:
    """``tuning.winograd`` as a recipe records it: ``on`` True, ``off`` False, ``auto`` the convolution shapes whose
    Winograd schedules in ``library`` (the run's schedule library, or None) beat its direct ones, sorted; False where
    there are none, the layout is not blocked or there is no library.

    Recorded resolved, a recipe builds the same graph later whatever library is installed then.
    """
    if isinstance(setting, bool):
        return setting
    if setting != "auto":
        return setting == "on"
    from ..common.cpu_family import family_of
    from .graph import is_blocked
    from .winograd import winograd_wins

    if library is None or not is_blocked(conv_layout_applied):
        return False
    return tuple(sorted(winograd_wins(library.workloads, family_of(target).mcpu))) or False


def prepare_model(model: LoadedModel, recipe: Recipe, target: Any) -> LoadedModel:
    """``model`` prepared as ``recipe`` says; ``.recipe`` is the recipe with the passes as they went, ``.graph`` the report.

    Every consumer prepares a model here: the tune's task extraction, its untuned and tuned builds and
    ``deploy``. ``.recipe.prepack_weights`` is what :func:`~edgetune.tasks.models.prepare_for_tuning`
    and :func:`~edgetune.artifact.compile.compile_model` must be given.
    """
    import tvm

    known = graph_switches()
    unknown = sorted(name for name, _value in recipe.switches if name not in known)
    if unknown:
        raise RecipeError(
            f"a recipe's switches must be among this edgetune's graph switches ({', '.join(known)}), got "
            f"{', '.join(unknown)} instead: the model was tuned by another edgetune; tune it again with this one"
        )
    prepared = prepare_graph(
        model, recipe.conv_layout_applied, recipe.graph_optimization, target, **dict(recipe.switches)
    )
    passes = tuple(RecipePass(p.name, p.status, p.detail) for p in prepared.graph.passes)
    done = dataclasses.replace(recipe, passes=passes, tvm_version=recipe.tvm_version or tvm.__version__)
    if isinstance(done.switch("winograd"), (tuple, list)) and not any(p.name == "winograd" for p in passes):
        # the library's Winograd shapes are none of this model's: recorded as off, the graph it built
        done = done.with_switch("winograd", False)
    return dataclasses.replace(prepared, recipe=done)
