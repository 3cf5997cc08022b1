"""Concatenations built in place (``edgetune.artifact.concat_in_place``): which ones, and the same outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from conftest import EmptyHistory
from edgetune.artifact.compile import lowering_passes
from edgetune.tasks import load_model, prepare_for_tuning
from edgetune.tasks.graph import prepare_graph

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def concat_calls(mod: tvm.IRModule, in_place: bool) -> int:
    """Concat kernels ``main`` still calls once memory is planned (and, with ``in_place``, concats built in place)."""
    passes = lowering_passes(TARGET, concat_in_place=in_place)
    names = [p.info.name for p in passes]
    upto = names.index("ConcatInPlace" if in_place else "StaticPlanBlockMemory") + 1
    with TARGET, tvm.transform.PassContext(opt_level=3):
        lowered = tvm.transform.Sequential(passes[:upto])(mod)
    return sum(line.lstrip().startswith("concatenate") for line in lowered["main"].script().splitlines())


def outputs(mod: tvm.IRModule, in_place: bool, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    passes = lowering_passes(TARGET, concat_in_place=in_place)

    @tvm.transform.module_pass(opt_level=3)
    def pipeline(mod, _ctx):
        return tvm.transform.Sequential(passes)(mod)

    with TARGET, tvm.transform.PassContext(opt_level=3):
        vm = relax.VirtualMachine(relax.build(mod, target=TARGET, relax_pipeline=pipeline), tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()])
    return [r.numpy() for r in result] if isinstance(result, (list, tuple, tvm.ir.Array)) else [result.numpy()]


def fused(model, layout: str = "as-is") -> tvm.IRModule:
    return prepare_for_tuning(prepare_graph(model, layout, "full", TARGET).mod, TARGET, prepack_weights=True)


@pytest.mark.parametrize("layout", ["as-is", "NCHWc"])
def test_squeezenet_fire_concats_are_built_in_place_with_the_same_outputs(layout: str) -> None:
    model = load_model("demo:squeezenet1.0@32")
    mod = fused(model, layout)
    assert concat_calls(mod, in_place=False) == 8  # one per fire module
    assert concat_calls(mod, in_place=True) == 0
    feeds = model.random_inputs(0)
    (built,) = outputs(mod, True, feeds)
    (copied,) = outputs(mod, False, feeds)
    np.testing.assert_array_equal(built, copied)  # the same kernels on the same values
    np.testing.assert_allclose(built, model.reference_outputs(feeds)[0], rtol=1e-4, atol=1e-4)


def conv(nodes: list, inits: list, rng: np.random.Generator, x: str, cin: int, cout: int, name: str) -> str:
    inits.append(numpy_helper.from_array(rng.normal(0, 0.3, (cout, cin, 3, 3)).astype(np.float32), f"{name}_w"))
    nodes.append(helper.make_node("Conv", [x, f"{name}_w"], [f"{name}_c"], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", [f"{name}_c"], [name]))
    return name


def concat_model(case: str) -> bytes:
    """Two (or three) convolutions of the input and a concat of them, in the way ``case`` names."""
    rng = np.random.default_rng(7)
    nodes: list = []
    inits: list = []
    a = conv(nodes, inits, rng, "x", 8, 8, "a")
    b = conv(nodes, inits, rng, "x", 8, 8, "b")
    parts, axis, channels = {
        "fire": ([a, b], 1, 16),
        "three-inputs": ([a, b, conv(nodes, inits, rng, "x", 8, 8, "c")], 1, 24),
        "same-input-twice": ([a, a], 1, 16),
        "along-height": ([a, b], 2, 8),
        "input-read-elsewhere": ([a, b], 1, 16),
        "as-the-output": ([a, b], 1, 16),
    }[case]
    nodes.append(helper.make_node("Concat", parts, ["joined"], axis=axis))
    out = "joined"
    if case != "as-the-output":
        out = conv(nodes, inits, rng, "joined", channels, 8, "y")
    if case == "input-read-elsewhere":
        nodes.append(helper.make_node("Sigmoid", [a], ["gate"]))
        nodes.append(helper.make_node("Mul", [out, "gate"], ["gated"]))
        out = "gated"
    graph = helper.make_graph(
        nodes, case, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 16, 8, 8] if case == "as-the-output" else [1, 8, 8, 8])], initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.mark.parametrize("case, in_place", [
    ("fire", 1), ("three-inputs", 1),
    # not built in place: an input twice, a slice that is not contiguous, an input another kernel also reads,
    # and a concat that is the model's output (its buffer is the caller's, not planned here)
    ("same-input-twice", 0), ("along-height", 0), ("input-read-elsewhere", 0), ("as-the-output", 0),
])
def test_only_concats_whose_inputs_can_be_slices_of_their_output_are_built_in_place(
    tmp_path: Path, case: str, in_place: int
) -> None:
    import onnxruntime as ort

    path = tmp_path / f"{case}.onnx"
    path.write_bytes(concat_model(case))
    onnx.checker.check_model(str(path))
    model = load_model(str(path))
    mod = fused(model)
    assert concat_calls(mod, in_place=False) == 1
    assert concat_calls(mod, in_place=True) == 1 - in_place
    feeds = model.random_inputs(0)
    (built,) = outputs(mod, True, feeds)
    np.testing.assert_array_equal(built, outputs(mod, False, feeds)[0])
    theirs = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(built, theirs, rtol=1e-4, atol=1e-4)


def test_concats_stay_kernels_off_the_cpu() -> None:
    """``ensure_zero_offset`` copies where the host cannot offset device pointers: there the concat stays."""
    names = [p.info.name for p in lowering_passes(tvm.target.Target({"kind": "opencl"}))]
    assert "StaticPlanBlockMemory" in names and "ConcatInPlace" not in names
    assert "ConcatInPlace" in [p.info.name for p in lowering_passes(TARGET)]


def _vm_instructions(build: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """The VM instructions ``build()`` compiles to, as text: built with the bytecode VM, whose instructions
    ``as_text`` lists (a CPU build's compiled VM is machine code); the passes before the VM's code are the same."""
    import edgetune.artifact.compile

    with monkeypatch.context() as patch:
        patch.setattr(edgetune.artifact.compile, "CPU_VM_EXEC_MODE", "bytecode")
        return build().as_text()


@pytest.mark.parametrize("prepack", [False, True])
def test_the_tuned_build_builds_concats_in_place(prepack: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``edgetune tune`` and ``deploy`` deliver: ``compile_model`` with a history, weights prepacked or not."""
    from edgetune.artifact.compile import compile_model

    model = prepare_graph(load_model("demo:squeezenet1.1@32"), "NCHWc", "full", TARGET)
    text = _vm_instructions(lambda: compile_model(model.mod, TARGET, EmptyHistory(), prepack_weights=prepack), monkeypatch)
    assert "concatenate" not in text and text.count("vm.builtin.ensure_zero_offset") >= 8, text[:2000]
    executable = compile_model(model.mod, TARGET, EmptyHistory(), prepack_weights=prepack)  # as delivered: compiled VM
    feeds = model.random_inputs(0)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    ours = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()
    np.testing.assert_allclose(ours, model.reference_outputs(feeds)[0], rtol=1e-4, atol=1e-4)


def test_an_arm_board_build_builds_concats_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """What tests/test_deploy_board.py ships to the emulated arm64 board (and verifies there) has no concat kernel."""
    from edgetune.artifact.compile import compile_model
    from edgetune.profile import load_profile

    target = load_profile("rpi4").tvm_target()
    model = load_model("demo:squeezenet1.1@32")  # as make_run_dir builds it: the graph as imported
    text = _vm_instructions(lambda: compile_model(model.mod, target, EmptyHistory()), monkeypatch)
    assert "concatenate" not in text and text.count("vm.builtin.ensure_zero_offset") >= 8
