"""Graph preparation: convolutions converted to NHWC compute the same, and the tuned build uses the same layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import relax

from edgetune.tasks import load_model, prepare_for_tuning
from edgetune.tasks.graph import prepare_graph

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def run(mod, x: np.ndarray) -> np.ndarray:
    with tvm.transform.PassContext(opt_level=3):
        vm = relax.VirtualMachine(relax.build(mod, target=TARGET), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_nhwc_convolutions_compute_the_same() -> None:
    model = load_model("demo:tiny-cnn")
    nhwc = prepare_graph(model, "NHWC")
    assert prepare_graph(model, "as-is", "none").mod is model.mod
    x = model.random_inputs(0)["input"]
    np.testing.assert_allclose(run(nhwc.mod, x), run(model.mod, x), rtol=1e-4, atol=1e-5)
    convs = [t for t in ms.relax_integration.extract_tasks(prepare_for_tuning(nhwc.mod, TARGET), TARGET) if "conv2d" in t.task_name]
    assert convs and all("conv2d_nhwc" in t.dispatched[0].script() for t in convs)


def test_unknown_layout_is_rejected() -> None:
    with pytest.raises(ValueError, match="conv_layout must be one of as-is, NHWC, got 'NCHW8c' instead"):
        prepare_graph(load_model("demo:tiny-cnn"), "NCHW8c")


@pytest.mark.integration
def test_nhwc_run_delivers_a_matching_model(tmp_path: Path, loopback_board) -> None:
    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key}, tuning={"conv_layout": "NHWC"})
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=8, board=TrackerBoard(loopback_board)))
    assert summary.end_to_end.outputs_match
    assert any("conv2d" in t.name for t in summary.tasks) and len(summary.tasks) >= 5  # layout transforms are tasks too
