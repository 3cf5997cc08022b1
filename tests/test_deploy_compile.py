"""Whole-model compile and export for a board: cross-compiled, and correct when run."""

from __future__ import annotations

import numpy as np

from conftest import require_tool
from edgetune.artifact.compile import compare_outputs, compile_model, export_model, run_on_board
from edgetune.profile import load_profile
from edgetune.tasks import load_model


def test_untuned_model_cross_compiles_to_aarch64(tmp_path):
    require_tool("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu")
    profile = load_profile("rk3399")
    model = load_model("demo:tiny-cnn")
    path = export_model(compile_model(model.mod, profile.tvm_target()), tmp_path / "model.so", profile)
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
    assert not list(tmp_path.glob("*.so.tmp*")) and sorted(p.name for p in tmp_path.iterdir()) == ["model.so"]


def test_a_cpu_model_runs_its_vm_compiled_and_a_gpu_one_interpreted() -> None:
    """On CPUs the VM's calls are machine code in the library (``vm_tir_func``), not bytecode read per call."""
    from edgetune.artifact.compile import vm_exec_mode

    model = load_model("demo:tiny-cnn")
    for name in ("host", "rk3399"):  # x86 and a cross-compiled aarch64 board
        executable = compile_model(model.mod, load_profile(name).tvm_target())
        assert "vm_tir_func" in executable.as_text(), (name, executable.as_text()[:200])
    import tvm

    assert vm_exec_mode(tvm.target.Target({"kind": "cuda", "arch": "sm_80"})) == "bytecode"


def test_model_runs_on_the_board_and_matches_the_host_reference(tmp_path, loopback_board):
    profile = load_profile("host")
    model = load_model("demo:tiny-cnn")
    path = export_model(compile_model(model.mod, profile.tvm_target()), tmp_path / "model.so", profile)
    feeds = model.random_inputs(seed=3)
    inputs = [feeds[spec.name] for spec in model.inputs]
    run = run_on_board(loopback_board, "cpu", path, inputs, number=2, repeat=3)
    reference = model.reference_outputs(feeds)
    ok, worst = compare_outputs(reference, run.outputs)
    assert ok and worst < 1e-4
    assert run.latency.repeats == 3 and run.latency.median_ms > 0
    # a wrong answer is detected
    assert not compare_outputs(reference, [run.outputs[0] + 1.0])[0]
    assert not compare_outputs(reference, [np.zeros((2, 2), dtype="float32")])[0]
