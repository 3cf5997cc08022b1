"""The run's recipe recorded once: ``deploy --model M --db H`` builds what the run was tuned with (issue 56).

Each switch gets a real tune of a small CNN (a convolution, a pool, a dense
layer and a sigmoid) with one trial: every task's default schedule is measured
on the session's loopback board, so the history holds one record per kernel.
Then ``deploy`` compiles the model with a profile whose current setting of that
switch differs, and must build the recorded recipe: the same build fields, the
same passes, and every kernel it builds found in the history. Were deploy to
read the profile again, the kernels of the other graph would not be found.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgetune
import edgetune.profile
from conftest import SESSION_KEY
from edgetune.errors import HistoryError, RecipeError
from edgetune.tasks.recipe import Recipe, RecipePass

def recipe_net() -> bytes:
    """Conv + bias + ReLU, global average pool, a dense layer and a sigmoid: six tasks, in milliseconds each."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype("float32"), "w"),
        numpy_helper.from_array(rng.normal(0, 0.1, (8,)).astype("float32"), "b"),
        numpy_helper.from_array(rng.normal(0, 0.3, (10, 8)).astype("float32"), "fc"),
        numpy_helper.from_array(rng.normal(0, 0.1, (10,)).astype("float32"), "fcb"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["g"], transB=1),
        helper.make_node("Sigmoid", ["g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "recipe_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("net") / "recipe_net.onnx"
    path.write_bytes(recipe_net())
    return path


def tune(net: Path, board, out: Path, **switch):
    """One trial: each task's default schedule measured, the library off (its workloads would hide a prepacking miss)."""
    return edgetune.tune(str(net), "host", trials=1, tracker=f"{board.host}:{board.port}", key=SESSION_KEY, out=out,
                         evaluate=False, report=False, schedules="off", **switch)


@pytest.fixture(scope="module")
def fast_math_off(net: Path, loopback_board, tmp_path_factory: pytest.TempPathFactory):
    return tune(net, loopback_board, tmp_path_factory.mktemp("fast-math-off"), fast_math=False)


def deploy_build(monkeypatch, summary, out: Path, now: dict, db: str | None = None):
    """``source_from_model`` with the profile's tuning settings now ``now``: the source, what it compiled, its log."""
    from edgetune.artifact import compile as artifact_compile
    from edgetune.deployment.workflow import source_from_model

    real_profile, real_compile = edgetune.profile.load_profile, artifact_compile.compile_model
    monkeypatch.setattr(edgetune.profile, "load_profile", lambda name: real_profile(name).with_overrides(tuning=now))
    compiled = []

    def spy(mod, target, history=None, prepack_weights=False):
        compiled.append((mod, prepack_weights))
        return real_compile(mod, target, history, prepack_weights=prepack_weights)

    monkeypatch.setattr(artifact_compile, "compile_model", spy)
    lines: list[str] = []
    source = source_from_model(summary.model.source, "host", db or summary.history, out, log=lines.append)
    (built,) = compiled
    return source, built, lines


def assert_built_as_tuned(summary, source, built, lines) -> None:
    """Deploy built the tune's recipe: its fields and passes, and every kernel of the build is one the tune measured."""
    from edgetune.deployment.recorded_recipe import tuned_kernels
    from edgetune.history import open_history
    from edgetune.tasks import load_model
    from edgetune.tasks.recipe import prepare_model, recipe_from_settings

    tuned, deployed = Recipe.from_dict(summary.recipe), Recipe.from_dict(source.recipe)
    assert lines == [] and not deployed.inferred
    assert deployed.build_key() == tuned.build_key() and deployed.passes == tuned.passes
    mod, prepack = built
    assert prepack == tuned.prepack_weights
    target = edgetune.profile.load_profile("host").tvm_target()
    history = open_history(summary.history, read_only=True)
    try:
        assert history.recipes.load(summary.model.sha256, target) == tuned  # the history's run record
        assert tuned_kernels(mod, target, history, prepack) == len(summary.tasks)
        # the profile's current recipe is another graph, whose kernels the history lacks: the check can fail
        theirs = prepare_model(load_model(summary.model.source), recipe_from_settings(edgetune.profile.load_profile("host").tuning, target), target)
        assert theirs.recipe.build_key() != tuned.build_key()
        assert tuned_kernels(theirs.mod, target, history, theirs.recipe.prepack_weights) < len(summary.tasks)
    finally:
        history.close()


@pytest.mark.integration
def test_deploy_builds_a_run_tuned_with_fast_math_off(fast_math_off, monkeypatch, tmp_path: Path) -> None:
    summary = fast_math_off
    on_disk = json.loads((Path(summary.history.removeprefix("sqlite:///")).parent / "summary.json").read_text())
    assert on_disk["recipe"] == summary.recipe and summary.recipe["switches"]["fast_math"] is False
    assert "fast-math" not in [p["name"] for p in summary.recipe["passes"]]
    now = {"fast_math": True}
    source, built, lines = deploy_build(monkeypatch, summary, tmp_path, now)
    assert_built_as_tuned(summary, source, built, lines)
    assert "fast_exp" not in built[0].script()  # libm's exp, as tuned


@pytest.mark.integration
def test_deploy_builds_a_run_tuned_with_prepacking_on(net, loopback_board, monkeypatch, tmp_path: Path) -> None:
    from edgetune.artifact.compile import compare_outputs, run_on_board
    from edgetune.tasks import load_model

    summary = tune(net, loopback_board, tmp_path / "run", prepack_weights=True)
    assert summary.recipe["prepack_weights"] is True
    now = {"prepack_weights": False}
    source, built, lines = deploy_build(monkeypatch, summary, tmp_path / "deploy", now)
    assert_built_as_tuned(summary, source, built, lines)
    model = load_model(str(net))  # the weights rewritten at build time still compute the model
    feeds = model.random_inputs(seed=0)
    ran = run_on_board(loopback_board, "cpu", source.artifact, [feeds["x"]], number=1, repeat=1)
    assert compare_outputs(model.reference_outputs(feeds), ran.outputs)[0]


@pytest.mark.integration
def test_deploy_builds_a_run_tuned_with_layout_as_is(net, loopback_board, monkeypatch, tmp_path: Path) -> None:
    summary = tune(net, loopback_board, tmp_path / "run", conv_layout="as-is")
    assert (summary.recipe["conv_layout"], summary.recipe["conv_layout_applied"]) == ("as-is", "as-is")
    now = {"conv_layout": "NHWC"}  # not "auto": it resolves to as-is on CPU families not measured
    source, built, lines = deploy_build(monkeypatch, summary, tmp_path / "deploy", now)
    assert_built_as_tuned(summary, source, built, lines)
    script = built[0].script()
    assert "NHWC" not in script and "NCHW16c" not in script and "NCHW8c" not in script
    # a recorded recipe is built as it is: another layout asked of deploy is refused, not mixed in
    from edgetune.deployment.workflow import source_from_model
    from edgetune.errors import DeployInputError

    with pytest.raises(DeployInputError, match="--conv-layout must be the layout recipe_net was tuned in"):
        source_from_model(str(net), "host", summary.history, tmp_path / "other", conv_layout="NHWC")


@pytest.mark.integration
def test_a_history_without_a_recipe_gets_it_inferred_once_with_a_warning(fast_math_off, monkeypatch, tmp_path: Path) -> None:
    """A history an older edgetune tuned (no recipe): inferred from the profile and the kernels it holds, said in one
    warning line, stored; the next deploy reads it and says nothing."""
    summary = fast_math_off
    old = tmp_path / "old.db"
    shutil.copyfile(summary.history.removeprefix("sqlite:///"), old)
    with sqlite3.connect(old) as conn:  # as an older edgetune left it
        assert conn.execute("delete from meta where key like 'recipe:%'").rowcount == 1
    source, built, lines = deploy_build(monkeypatch, summary, tmp_path / "first", {}, db=str(old))
    (line,) = lines
    assert line.startswith("warning: ") and "holds no recipe for recipe_net" in line and "inferred" in line
    assert "fast-math off" in line and "stored in the history" in line
    inferred = Recipe.from_dict(source.recipe)
    assert inferred.inferred and inferred.build_key() == Recipe.from_dict(summary.recipe).build_key()
    monkeypatch.undo()
    again, _built, quiet = deploy_build(monkeypatch, summary, tmp_path / "again", {}, db=str(old))
    assert quiet == [] and again.recipe == source.recipe


@pytest.mark.integration
def test_passes_that_went_otherwise_than_when_tuned_are_one_warning(fast_math_off, monkeypatch, tmp_path: Path) -> None:
    """Another edgetune's recipe: the recorded build is built, and a pass it lists that this one did not run is said."""
    import dataclasses

    from edgetune.history import open_history

    summary, db = fast_math_off, tmp_path / "other.db"
    shutil.copyfile(summary.history.removeprefix("sqlite:///"), db)
    tuned = Recipe.from_dict(summary.recipe)
    target = edgetune.profile.load_profile("host").tvm_target()
    history = open_history(str(db))
    try:
        history.recipes.store(summary.model.sha256, target, dataclasses.replace(tuned, passes=(*tuned.passes, RecipePass("newer", "applied"))))
    finally:
        history.close()
    source, _built, lines = deploy_build(monkeypatch, summary, tmp_path / "deploy", {}, db=str(db))
    (line,) = lines
    assert line.startswith("warning: the graph's passes went otherwise") and "newer applied" in line
    assert Recipe.from_dict(source.recipe).build_key() == tuned.build_key()


def test_a_recipe_reads_back_and_a_damaged_one_is_one_line(tmp_path: Path) -> None:
    from edgetune.history import open_history
    from edgetune.profile import load_profile

    recipe = Recipe("auto", "NCHWc", "full", True, (("fast_math", False),), (RecipePass("layout-NCHWc", "skipped", "why"),), "0.27")
    assert not recipe.fast_math and recipe.describe() == "layout NCHWc (asked auto), graph full, fast-math off, prepacking on"
    assert Recipe.from_json(recipe.to_json()) == recipe
    assert Recipe.from_dict({**recipe.to_dict(), "a_newer_field": 1}) == recipe
    with pytest.raises(RecipeError, match="must have prepack_weights, switches"):
        Recipe.from_dict({"conv_layout": "auto", "conv_layout_applied": "as-is", "graph_optimization": "full"})
    target = load_profile("host").tvm_target()
    history = open_history(str(tmp_path / "h.db"))
    try:
        history.recipes.store("ab" * 32, target, recipe)
    finally:
        history.close()
    with sqlite3.connect(tmp_path / "h.db") as conn:
        conn.execute("update meta set value = '{\"recipe\": 3}' where key like 'recipe:%'")
    history = open_history(str(tmp_path / "h.db"), read_only=True)
    try:
        with pytest.raises(HistoryError, match="must be a recorded recipe, got unreadable JSON"):
            history.recipes.load("ab" * 32, target)
    finally:
        history.close()


def test_a_new_pass_and_its_switch_are_recorded_and_rebuilt_with_no_change_to_the_recipe(net: Path, monkeypatch) -> None:
    """Passes and switches are data: a keyword-only switch added to prepare_graph is read from the tuning key of its
    name, recorded and given back on rebuild; the pass it adds appears among the recipe's passes as it went."""
    import dataclasses
    import types

    from edgetune.profile import load_profile
    from edgetune.tasks import load_model, recipe as recipe_module
    from edgetune.tasks.graph import GraphPass

    real = recipe_module.prepare_graph
    seen: list[bool] = []

    def prepare_graph(model, conv_layout="auto", optimization="full", target=None, *, fast_math=True, shiny=True):
        seen.append(shiny)
        prepared = real(model, conv_layout, optimization, target, fast_math=fast_math)
        status = "applied" if shiny else "unchanged"
        return dataclasses.replace(prepared, graph=dataclasses.replace(prepared.graph, passes=[*prepared.graph.passes, GraphPass("shiny", status)]))

    monkeypatch.setattr(recipe_module, "prepare_graph", prepare_graph)
    profile = load_profile("host")
    target = profile.tvm_target()
    tuning = types.SimpleNamespace(**{**vars(profile.tuning), "shiny": False, "conv_layout": "as-is"})
    recipe = recipe_module.recipe_from_settings(tuning, target)
    assert dict(recipe.switches) == {"fast_math": True, "shiny": False}
    prepared = recipe_module.prepare_model(load_model(str(net)), Recipe.from_json(recipe.to_json()), target)
    assert seen == [False] and prepared.recipe.passes[-1] == RecipePass("shiny", "unchanged")
    assert "shiny off" in prepared.recipe.describe()
    monkeypatch.setattr(recipe_module, "prepare_graph", real)  # an edgetune without the switch refuses to guess
    with pytest.raises(RecipeError, match="got shiny instead: the model was tuned by another edgetune"):
        recipe_module.prepare_model(load_model(str(net)), recipe, target)
