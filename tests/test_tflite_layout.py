"""NHWC models get the graph ONNX models get (issue 53, point 2): a TensorFlow Lite model's convolutions blocked.

Before, the blocked layout failed to lower on an NHWC model ("not enough values to
unpack (expected 5, got 4)") and the whole model stayed NHWC, with none of the
schedule library's workloads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import relax

from edgetune.tasks import load_model, prepare_for_tuning
from edgetune.tasks.graph import prepare_graph
from tflite_models import write_model

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def test_an_nhwc_models_convolutions_come_out_blocked_and_match_litert(tmp_path: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    path = write_model(tmp_path / "net.tflite")  # conv (ReLU6) -> depthwise conv (ReLU) -> residual add -> mean -> dense
    model = load_model(str(path))
    blocked = prepare_graph(model, "NCHW8c", "full", TARGET)
    (entry,) = [p for p in blocked.graph.passes if p.name == "layout-NCHW8c"]
    assert entry.status == "applied", blocked.graph.describe()
    assert "2 of 2 convolutions in NCHW8c (1 of 1 depthwise)" in entry.detail and "2 from NHWC" in entry.detail
    tasks = ms.relax_integration.extract_tasks(prepare_for_tuning(blocked.mod, TARGET), TARGET)
    names = [t.task_name for t in tasks]
    convs = [n for n in names if "conv2d" in n]
    assert len(convs) == 2 and all("NCHWc" in n for n in convs), names
    # bias, ReLU6 (as maximum/minimum), ReLU and the residual add fused into the convolutions, no transpose between
    assert any("conv2d_NCHWc" in n and "maximum_minimum" in n for n in names), names
    assert any("depthwise_conv2d_NCHWc" in n and n.endswith("add1") for n in names), names
    assert not any("transpose" in n and ("add" in n or "clip" in n) for n in names), names
    assert sum("transpose" in n for n in names) <= 1  # the input's, once

    x = model.random_inputs(seed=0)["input"]
    with tvm.transform.PassContext(opt_level=3):
        vm = relax.VirtualMachine(relax.build(blocked.mod, target=TARGET), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    theirs = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert np.abs(ours - theirs).max() <= 1e-4 * np.abs(theirs).max()
