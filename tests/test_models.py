"""Model loading: demo graphs, ONNX files, reference runs and one-line errors."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

from edgetune.errors import ModelError
from edgetune.tasks import LoadedModel, demo_model_names, load_model, prepare_for_tuning
from edgetune.tasks.demo import ZOO, build_demo
from edgetune.tasks.models import _parse_demo_spec


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return load_model("demo:tiny-cnn")


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int) -> np.ndarray:
    pad = w.shape[-1] // 2
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = sliding_window_view(xp, w.shape[-2:], axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", win, w) + b[None, :, None, None]


def _tiny_cnn_numpy(model_bytes: bytes, x: np.ndarray) -> np.ndarray:
    """The tiny CNN written out in numpy, from the weights stored in the ONNX bytes."""
    model = onnx.load_model_from_string(model_bytes)
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    y = x.astype(np.float64)
    for node, stride in zip(convs, (1, 2)):
        y = np.maximum(_conv(y, w[node.input[1]], w[node.input[2]], stride), 0.0)
    pooled = y.mean(axis=(2, 3))
    return pooled @ w[gemm.input[1]].T + w[gemm.input[2]]


def _write_single_op_model(
    path: Path, op: str, shape: list[int | str | None] | None
) -> Path:
    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [value], [out])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_demo_names() -> None:
    assert demo_model_names() == [
        "tiny-cnn", "resnet18", "mobilenetv1", "mobilenetv2", "squeezenet", "transformer",
        "resnet50", "mobilenetv3-small", "squeezenet1.0", "squeezenet1.1", "shufflenetv2", "efficientnet-b0",
        "transformer-bert",
    ]


def test_tiny_cnn_metadata(tiny: LoadedModel) -> None:
    assert tiny.name == "tiny-cnn"
    assert tiny.source == "demo:tiny-cnn"
    assert [(s.name, s.shape, s.dtype) for s in tiny.inputs] == [
        ("input", (1, 3, 32, 32), "float32")
    ]
    assert tiny.sha256 == hashlib.sha256(tiny.onnx_bytes).hexdigest()
    ops = [n.op_type for n in onnx.load_model_from_string(tiny.onnx_bytes).graph.node]
    assert ops == ["Conv", "Relu", "Conv", "Relu", "GlobalAveragePool", "Flatten", "Gemm"]
    # weights are constants: main takes only the image
    params = tiny.mod["main"].params
    assert len(params) == 1
    assert [int(d) for d in params[0].ty.shape] == [1, 3, 32, 32]
    assert params[0].ty.dtype == "float32"


def test_tiny_cnn_reference_matches_numpy(tiny: LoadedModel) -> None:
    inputs = tiny.random_inputs(seed=3)
    (out,) = tiny.reference_outputs(inputs)
    assert out.shape == (1, 10) and out.dtype == np.float32
    assert np.isfinite(out).all() and out.std() > 0.1
    expected = _tiny_cnn_numpy(tiny.onnx_bytes, inputs["input"])
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_random_inputs_and_outputs_are_deterministic(tiny: LoadedModel) -> None:
    a, b, c = tiny.random_inputs(0), tiny.random_inputs(0), tiny.random_inputs(1)
    np.testing.assert_array_equal(a["input"], b["input"])
    assert not np.array_equal(a["input"], c["input"])
    first, second = tiny.reference_outputs(a)[0], tiny.reference_outputs(b)[0]
    np.testing.assert_array_equal(first, second)
    assert not np.allclose(first, tiny.reference_outputs(c)[0])


def test_demo_bytes_are_reproducible(tiny: LoadedModel) -> None:
    again = load_model("demo:tiny-cnn@32")
    assert again.onnx_bytes == tiny.onnx_bytes and again.sha256 == tiny.sha256
    small = load_model("demo:tiny-cnn@16")
    assert small.sha256 != tiny.sha256
    assert small.inputs[0].shape == (1, 3, 16, 16)
    assert small.reference_outputs(small.random_inputs())[0].shape == (1, 10)


def test_reference_outputs_rejects_wrong_inputs(tiny: LoadedModel) -> None:
    with pytest.raises(ModelError, match="no value given for input 'input'"):
        tiny.reference_outputs({})
    with pytest.raises(ModelError, match=r"has shape \(1, 3, 16, 16\), expected \(1, 3, 32, 32\)"):
        tiny.reference_outputs({"input": np.zeros((1, 3, 16, 16), np.float32)})


@pytest.mark.parametrize(
    ("name", "convs", "depthwise"),
    [("resnet18", 20, 0), ("mobilenetv2", 52, 17), ("squeezenet", 26, 0)],
)
def test_large_demos_at_reduced_resolution(name: str, convs: int, depthwise: int) -> None:
    model = load_model(f"demo:{name}@64")
    assert model.name == name
    assert model.inputs[0].shape == (1, 3, 64, 64)
    graph = onnx.load_model_from_string(model.onnx_bytes).graph
    conv_nodes = [n for n in graph.node if n.op_type == "Conv"]
    groups = [next((a.i for a in n.attribute if a.name == "group"), 1) for n in conv_nodes]
    assert len(conv_nodes) == convs
    assert sum(g > 1 for g in groups) == depthwise
    (out,) = model.reference_outputs(model.random_inputs())
    assert out.shape == (1, 1000)
    assert np.isfinite(out).all() and 0.1 < out.std() < 1e3


def test_onnx_file_round_trip(tiny: LoadedModel, tmp_path: Path) -> None:
    path = tmp_path / "tiny.onnx"
    path.write_bytes(tiny.onnx_bytes)
    loaded = load_model(str(path))
    assert (loaded.name, loaded.source) == ("tiny", str(path))
    assert loaded.sha256 == tiny.sha256 and loaded.inputs == tiny.inputs
    inputs = tiny.random_inputs(7)
    np.testing.assert_array_equal(
        loaded.reference_outputs(inputs)[0], tiny.reference_outputs(inputs)[0]
    )


def test_onnx_file_with_external_weights(tiny: LoadedModel, tmp_path: Path) -> None:
    path = tmp_path / "ext.onnx"
    onnx.save_model(
        onnx.load_model_from_string(tiny.onnx_bytes),
        path,
        save_as_external_data=True,
        location="ext.weights",
        size_threshold=0,
    )
    loaded = load_model(str(path))
    # the bytes kept are self-contained, so they hash like the demo's
    assert loaded.sha256 == tiny.sha256
    inputs = tiny.random_inputs(1)
    np.testing.assert_array_equal(
        loaded.reference_outputs(inputs)[0], tiny.reference_outputs(inputs)[0]
    )
    (tmp_path / "ext.weights").unlink()
    with pytest.raises(ModelError, match="cannot read its external weight data"):
        load_model(str(path))


def test_two_inputs_two_outputs(tmp_path: Path) -> None:
    """Integer inputs get index-safe values; tuple results come back as a flat list."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["y"]),
            helper.make_node("Cast", ["ids"], ["z"], to=TensorProto.FLOAT),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 50]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 50]),
        ],
    )
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    model = load_model(str(path))
    assert [(s.name, s.dtype) for s in model.inputs] == [("x", "float32"), ("ids", "int64")]
    inputs = model.random_inputs(5)
    assert inputs["ids"].dtype == np.int64
    assert inputs["ids"].min() >= 0 and inputs["ids"].max() < 10
    y, z = model.reference_outputs(inputs)
    np.testing.assert_array_equal(y, np.maximum(inputs["x"], 0))
    np.testing.assert_array_equal(z, inputs["ids"].astype(np.float32))


def _error_of(spec: str) -> str:
    with pytest.raises(ModelError) as info:
        load_model(spec)
    message = str(info.value)
    assert "\n" not in message
    assert isinstance(info.value, ValueError)
    return message


def test_missing_file(tmp_path: Path) -> None:
    assert _error_of(str(tmp_path / "x.onnx")) == f"model file '{tmp_path / 'x.onnx'}' not found"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    assert _error_of(str(tmp_path)).startswith(f"cannot read model file '{tmp_path}'")


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (b"this is not a protobuf\n", "DecodeError: Error parsing message"),
        (b"", "its graph has no nodes or outputs"),
    ],
)
def test_corrupt_file(tmp_path: Path, content: bytes, detail: str) -> None:
    path = tmp_path / "x.onnx"
    path.write_bytes(content)
    message = _error_of(str(path))
    assert message.startswith(f"'{path}' is not a valid ONNX model: ")
    assert detail in message


def test_truncated_file(tiny: LoadedModel, tmp_path: Path) -> None:
    path = tmp_path / "cut.onnx"
    path.write_bytes(tiny.onnx_bytes[: len(tiny.onnx_bytes) // 2])
    assert _error_of(str(path)).startswith(f"'{path}' is not a valid ONNX model: DecodeError")


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (["batch", 4], "has a dynamic dimension 'batch' (shape [batch, 4])"),
        ([1, None], "has a dynamic dimension '?' (shape [1, ?])"),
        (None, "has no shape (unknown rank)"),
    ],
)
def test_dynamic_input(tmp_path: Path, shape: list[int | str | None] | None, expected: str) -> None:
    path = _write_single_op_model(tmp_path / "dyn.onnx", "Relu", shape)
    message = _error_of(str(path))
    assert message.startswith(f"model input 'x' of '{path}' {expected}")
    assert "edgetune needs static shapes" in message


def test_non_tensor_input(tmp_path: Path) -> None:
    seq = helper.make_tensor_sequence_value_info("x", TensorProto.FLOAT, [1, 4])
    out = helper.make_tensor_value_info("y", TensorProto.INT64, [])
    graph = helper.make_graph([helper.make_node("SequenceLength", ["x"], ["y"])], "g", [seq], [out])
    path = tmp_path / "seq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    assert _error_of(str(path)) == f"model input 'x' of '{path}' is not a tensor"


def test_op_tvm_cannot_import(tmp_path: Path) -> None:
    # Celu is standard ONNX (opset 12) but has no Relax converter in TVM 0.27
    path = _write_single_op_model(tmp_path / "celu.onnx", "Celu", [1, 4])
    message = _error_of(str(path))
    assert message.startswith(f"'{path}': TVM ")
    assert "cannot import the model: OpNotImplemented:" in message
    assert message.endswith("Celu")


def test_transformer_block_demo() -> None:
    """A pre-norm encoder block: LayerNorm, attention as MatMul + Softmax, erf-GELU MLP, residual adds."""
    model = load_model("demo:transformer@16")
    assert model.inputs[0].shape == (1, 16, 128)
    ops = [n.op_type for n in onnx.load_model_from_string(model.onnx_bytes).graph.node]
    assert ops.count("LayerNormalization") == 2 and ops.count("Softmax") == 1 and ops.count("Erf") == 1
    assert ops.count("MatMul") == 8  # q, k, v, scores, context, projection, MLP in and out
    x = model.random_inputs()
    (out,) = model.reference_outputs(x)
    assert out.shape == (1, 16, 128) and np.isfinite(out).all()
    # the residual path carries the input through
    assert np.corrcoef(out.ravel(), x["input"].ravel())[0, 1] > 0.5


@pytest.mark.parametrize(
    ("name", "res", "convs", "depthwise"),
    [
        ("resnet50", 64, 53, 0),  # stem, 16 bottlenecks of 3, 4 projections
        ("mobilenetv3-small", 64, 52, 11),
        ("squeezenet1.0", 64, 26, 0),
        ("shufflenetv2", 64, 56, 19),
        ("efficientnet-b0", 64, 81, 16),
        ("transformer-bert", 8, 0, 0),
    ],
)
def test_zoo_demo_matches_onnxruntime(name: str, res: int, convs: int, depthwise: int) -> None:
    """Each zoo demo imports into TVM, and TVM's untuned build agrees with ONNX Runtime on the same bytes."""
    ort = pytest.importorskip("onnxruntime")
    model = load_model(f"demo:{name}@{res}")
    transformer = name.startswith("transformer")
    assert model.inputs[0].shape == ((1, res, 768) if transformer else (1, 3, res, res))
    assert build_demo(name, res).SerializeToString() == model.data
    conv_nodes = [n for n in onnx.load_model_from_string(model.data).graph.node if n.op_type == "Conv"]
    groups = [next((a.i for a in n.attribute if a.name == "group"), 1) for n in conv_nodes]
    assert (len(conv_nodes), sum(g > 1 for g in groups)) == (convs, depthwise)
    inputs = model.random_inputs(0)
    (ours,) = model.reference_outputs(inputs)
    (theirs,) = ort.InferenceSession(model.data, providers=["CPUExecutionProvider"]).run(None, inputs)
    assert ours.shape == theirs.shape == ((1, res, 768) if transformer else (1, 1000))
    assert np.isfinite(ours).all() and theirs.std() > 1e-3
    assert np.abs(ours - theirs).max() / np.abs(theirs).max() < 1e-4


def test_zoo_specs_build() -> None:
    """Every spec of the schedule-library zoo names a demo at a valid size; ONNX only, no TVM import."""
    cnns = (
        "resnet18", "resnet50", "mobilenetv1", "mobilenetv2", "mobilenetv3-small",
        "squeezenet1.0", "squeezenet1.1", "shufflenetv2", "efficientnet-b0",
    )
    assert ZOO == tuple(f"demo:{n}@{r}" for n in cnns for r in (224, 128)) + (
        "demo:transformer@32", "demo:transformer@128", "demo:transformer-bert@32", "demo:transformer-bert@128",
    )
    digests = set()
    for spec in ZOO:
        name, res = _parse_demo_spec(spec)
        assert res is not None
        model = build_demo(name, res)
        dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        width = {"transformer": 128, "transformer-bert": 768}.get(name)
        assert dims == ([1, res, width] if width else [1, 3, res, res]), spec
        data = model.SerializeToString()
        digests.add(hashlib.sha256(data).hexdigest())
        if spec == "demo:squeezenet1.1@128":
            assert data == build_demo("squeezenet", 128).SerializeToString()  # an alias
    assert len(digests) == len(ZOO)


def test_unknown_demo_name() -> None:
    assert _error_of("demo:resnet19") == (
        "unknown demo model 'demo:resnet19' (did you mean 'demo:resnet18'?); "
        "available: demo:tiny-cnn, demo:resnet18, demo:mobilenetv1, demo:mobilenetv2, demo:squeezenet, demo:transformer, "
        "demo:resnet50, demo:mobilenetv3-small, demo:squeezenet1.0, demo:squeezenet1.1, demo:shufflenetv2, "
        "demo:efficientnet-b0, demo:transformer-bert"
    )
    assert "did you mean" not in _error_of("demo:xyz")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("demo:resnet18@abc", "bad resolution suffix in 'demo:resnet18@abc'"),
        ("demo:resnet18@", "bad resolution suffix in 'demo:resnet18@'"),
        ("demo:resnet18@-64", "bad resolution suffix in 'demo:resnet18@-64'"),
        (
            "demo:resnet18@100",
            "demo:resnet18 resolution 100 is invalid: it must be >= 32 and a multiple of 32",
        ),
        ("demo:mobilenetv2@0", "demo:mobilenetv2 resolution 0 is invalid"),
        ("demo:tiny-cnn@4", "demo:tiny-cnn resolution 4 is invalid: it must be >= 8"),
    ],
)
def test_bad_resolution(spec: str, expected: str) -> None:
    assert _error_of(spec).startswith(expected)


def test_prepare_for_tuning_tasks_without_tensor_intrin() -> None:
    """Task extraction on the prepared tiny CNN: a few fused tasks, no 40 s intrinsics import."""
    script = textwrap.dedent(
        """
        import sys
        from tvm.target import Target
        from tvm.s_tir.meta_schedule.relax_integration import extract_tasks
        from edgetune.tasks import load_model, prepare_for_tuning
        target = Target({"kind": "llvm", "num-cores": 2})
        mod = load_model("demo:tiny-cnn").mod
        names = sorted(t.task_name for t in extract_tasks(prepare_for_tuning(mod), target))
        with_target = sorted(
            t.task_name for t in extract_tasks(prepare_for_tuning(mod, target), target)
        )
        assert names == with_target, (names, with_target)
        print(",".join(names))
        print("tvm.s_tir.tensor_intrin" in sys.modules)
        """
    )
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    names_line, intrin_line = result.stdout.strip().splitlines()[-2:]
    names = names_line.split(",")
    assert 3 <= len(names) <= 5
    assert sum("conv2d" in n for n in names) == 2 and any("matmul" in n for n in names)
    assert intrin_line == "False"


def test_prepare_for_tuning_fuses_conv_bias_relu(tiny: LoadedModel) -> None:
    prepared = prepare_for_tuning(tiny.mod)
    names = {gv.name_hint for gv in prepared.functions}
    assert "fused_conv2d_add_relu" in names and "main" in names
    # the input module is not modified in place
    assert "fused_conv2d_add_relu" not in {gv.name_hint for gv in tiny.mod.functions}
