"""The recipe ``deploy --model M --db H`` builds: the one H recorded when M was tuned, never the profile's.

A history tuned before recipes were recorded holds none. Its recipe is then
inferred once, here and only here: the profile's settings, with fast-math and
the integer pass each on or off, whichever graph has more of its kernels tuned in
the history (neither pass existed when the oldest histories were tuned). The inference is said in one
warning line and stored in the history when it can be written, so that every
later deploy reads the same recipe.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..errors import DeployInputError, HistoryError
from ..tasks.models import LoadedModel
from ..tasks.recipe import Recipe, TuningSettings, prepare_model, recipe_from_settings


def recipe_of_history(
    history: Any, db: str, model: LoadedModel, target: Any, tuning: TuningSettings, conv_layout: str | None,
    log: Callable[[str], None],
) -> Recipe:
    """The recipe ``history`` recorded for ``model`` on ``target``, or one inferred (and stored) for an older history.

    ``conv_layout`` (``deploy --conv-layout``) must be the recorded layout when there is one: a recorded
    recipe is built as it is. For an older history it is the layout the inference starts from.
    """
    recorded = history.recipes.load(model.sha256, target)
    if recorded is not None:
        if conv_layout and conv_layout not in (recorded.conv_layout, recorded.conv_layout_applied):
            raise DeployInputError(
                f"--conv-layout must be the layout {model.name} was tuned in as {history.url} records it "
                f"({recorded.conv_layout_applied}), got {conv_layout} instead; drop it: deploy builds the recorded recipe"
            )
        return recorded
    recipe, kernels = infer_recipe(history, model, target, tuning, conv_layout)
    if kernels == 0:
        log(f"warning: {history.url} holds no recipe and no tuned kernel of {model.name} on this target: "
            f"built untuned as the profile asks ({recipe.describe()})")
        return recipe
    log(f"warning: {history.url} holds no recipe for {model.name} (tuned before edgetune recorded one): inferred "
        f"{recipe.describe()} from the profile and the {kernels} tuned kernels it holds; {_store(db, model, target, recipe)}")
    return recipe


def infer_recipe(
    history: Any, model: LoadedModel, target: Any, tuning: TuningSettings, conv_layout: str | None
) -> tuple[Recipe, int]:
    """The profile's recipe, with fast-math, the Winograd form and the integer pass as the history's kernels say,
    marked inferred; and how many kernels it tuned."""
    from ..schedules.use import recipe_library

    asked = recipe_from_settings(tuning, target, conv_layout, recipe_library(tuning, target))
    candidates = [asked]
    if asked.fast_math:
        # a history tuned before the fast-math pass holds the exact kernels' records
        candidates.append(asked.with_switch("fast_math", False))
    if asked.switch("winograd"):
        # a history tuned before the Winograd form was chosen from the library holds the direct convolutions' records
        candidates += [candidate.with_switch("winograd", False) for candidate in list(candidates)]
    if asked.switch("integer") and model.format in ("tflite", "onnx"):
        # a quantized model tuned before the integer pass (or with --no-integer) holds the float graph's records
        candidates += [candidate.with_switch("integer", False) for candidate in list(candidates)]
    best: tuple[Recipe, int] | None = None
    for candidate in candidates:
        prepared = prepare_model(model, candidate, target)
        kernels = tuned_kernels(prepared.mod, target, history, candidate.prepack_weights)
        if best is None or kernels > best[1]:
            best = (prepared.recipe, kernels)
    assert best is not None
    return dataclasses.replace(best[0], inferred=True), best[1]


def tuned_kernels(mod: Any, target: Any, history: Any, prepack_weights: bool) -> int:
    """How many of ``mod``'s kernels ``history`` holds a record of for ``target``."""
    import tvm.s_tir.meta_schedule as ms

    from ..tasks.models import prepare_for_tuning

    view = history.for_target(target)
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(mod, target, prepack_weights), target)
    return sum(view.query_tuning_record(task.dispatched[0], target, task.task_name) is not None for task in tasks)


def _store(db: str, model: LoadedModel, target: Any, recipe: Recipe) -> str:
    """Store the inferred recipe in the history at ``db``; what happened, for the warning line."""
    from ..history import open_history

    try:
        history = open_history(db)
        try:
            history.recipes.store(model.sha256, target, recipe)
        finally:
            history.close()
    except HistoryError as error:
        return f"not stored ({error}): every deploy infers it again"
    return "stored in the history: later deploys read it"
