"""Quantized models computed in integers (issue 54, point 1): the ``integer`` pass of edgetune/tasks/integer.py.

TVM 0.27 imports a full-integer ``.tflite`` or an ONNX QDQ model as float
arithmetic between dequantize and quantize. The pass rewrites its convolutions and
dense layers into int8 x int8 -> int32 kernels with the requantization fused; the
tests build what it gives and compare with LiteRT (XNNPACK's int8 kernels, its
default, and TFLite's reference kernels) and ONNX Runtime. The ``.tflite`` fixtures
in tests/data/tflite/ were written by ``benchmarks/make_tflite_fixtures.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm.s_tir.meta_schedule as ms
from tvm import relax

from edgetune.tasks import load_model, prepare_for_tuning
from edgetune.tasks.graph import prepare_graph
from edgetune.tasks.inventory import FLOAT_NOTE, kernel_inventory, precision_of
from qdq_models import INPUT, SHAPE, onnxruntime_outputs, output_scale, write_qdq_resnet

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})
DATA = Path(__file__).parent / "data" / "tflite"
#: the issue's goal: at least this share of output values identical to the reference runtime's, the rest one quantum off
IDENTICAL = 0.99


def litert(path: Path, x: np.ndarray, reference_kernels: bool = False) -> np.ndarray:
    """LiteRT's output: its default CPU path (XNNPACK's int8 kernels) or TFLite's reference kernels."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    options = {"experimental_op_resolver_type": OpResolverType.BUILTIN_REF} if reference_kernels else {}
    interpreter = Interpreter(model_path=str(path), num_threads=1, **options)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def quantized_inputs(path: Path, count: int) -> list[np.ndarray]:
    """Seeded standard-normal inputs quantized with the model's input scale and zero point (as calibrated)."""
    from ai_edge_litert.interpreter import Interpreter

    detail = Interpreter(model_path=str(path)).get_input_details()[0]
    scale, zero = detail["quantization"]
    return [np.clip(np.rint(np.random.default_rng(seed).standard_normal(detail["shape"]) / scale) + zero, -128, 127)
            .astype(np.int8) for seed in range(count)]


def build(mod: tvm.IRModule) -> relax.VirtualMachine:
    with tvm.transform.PassContext(opt_level=3):
        return relax.VirtualMachine(relax.build(mod, target=TARGET), tvm.cpu())


def assert_matches(ours: list[np.ndarray], theirs: list[np.ndarray], what: str) -> float:
    """At least :data:`IDENTICAL` of the values identical, none more than one quantum off; the identical share."""
    differences = np.concatenate([np.abs(a.astype(np.int64) - b.astype(np.int64)).ravel() for a, b in zip(ours, theirs)])
    spread = np.concatenate([b.ravel() for b in theirs])
    assert spread.max() > spread.min(), f"{what}: the reference's outputs are all one value, the comparison says nothing"
    identical = float(np.mean(differences == 0))
    assert identical >= IDENTICAL and differences.max() <= 1, (what, identical, differences.max())
    return identical


def integer_entry(model) -> object:
    (entry,) = [p for p in model.graph.passes if p.name == "integer"]
    return entry


def test_a_quantized_conv_bias_relu_becomes_one_integer_kernel_that_matches_litert() -> None:
    """int8 operands, int32 accumulation and the requantization in one task; LiteRT's outputs, both kernel sets."""
    path = DATA / "conv_relu_int8.tflite"
    model = load_model(str(path))
    prepared = prepare_graph(model, "auto", "full", TARGET)
    assert integer_entry(prepared).status == "applied" and "1 convolutions in int8" in integer_entry(prepared).detail
    fused = prepare_for_tuning(prepared.mod, TARGET)
    tasks = ms.relax_integration.extract_tasks(fused, TARGET)
    convs = [t for t in tasks if "conv2d" in t.task_name]
    assert len(convs) == 1, [t.task_name for t in tasks]
    (func,) = [f for _g, f in convs[0].dispatched[0].functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    script = func.script()
    assert precision_of(func, contraction=True) == "int8"  # int8 x int8 products summed in int32
    assert 'T.Cast("int32", pad_temp' in script and "conv2d_nhwc_intermediate" in script, script
    assert "T.nearbyint" in script and script.count('"int8"') >= 3, script  # the requantization, fused, to int8
    assert 'T.Cast("float32", pad_temp' not in script  # no float convolution left
    inventory = kernel_inventory(fused, tasks)
    assert [k.precision for k in inventory.kernels if "conv2d" in k.name] == ["int8"]

    vm = build(prepared.mod)
    inputs = quantized_inputs(path, 4)
    ours = [vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs]
    assert all(o.dtype == np.int8 for o in ours)
    assert_matches(ours, [litert(path, x) for x in inputs], "XNNPACK")
    assert_matches(ours, [litert(path, x, reference_kernels=True) for x in inputs], "reference kernels")


def test_per_channel_weights_are_handled() -> None:
    """The converter quantizes each convolution's filters per output channel: one multiplier per channel, LiteRT's output.

    Requantized with the first channel's scale for every channel (per-tensor), the outputs would differ.
    """
    from ai_edge_litert.interpreter import Interpreter

    path = DATA / "conv_relu_int8.tflite"
    details = Interpreter(model_path=str(path)).get_tensor_details()
    scales = [d["quantization_parameters"]["scales"] for d in details if len(d["shape"]) == 4 and d["shape"][0] == 16]
    assert len(scales) == 1 and len(set(scales[0].tolist())) == 16  # the fixture's filters: 16 scales, all different
    prepared = prepare_graph(load_model(str(path)), "as-is", "full", TARGET)
    multipliers = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.multiply":
            constant = expr.args[1]
            if isinstance(constant, tvm.ir.expr.Constant):
                multipliers.append(constant.value.numpy())

    relax.analysis.post_order_visit(prepared.mod["main"], visit)
    assert len(multipliers) == 1 and multipliers[0].shape == (1, 1, 1, 16)
    assert len(set(multipliers[0].ravel().tolist())) == 16
    inputs = quantized_inputs(path, 2)
    vm = build(prepared.mod)
    assert_matches([vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs], [litert(path, x) for x in inputs],
                   "per-channel")


def test_quantized_operators_without_an_integer_form_stay_in_float_and_are_said() -> None:
    """MobileNetV2's residual adds and its global average pool: left as dequantize -> float -> quantize, listed in the
    pass's detail, the graph report and the kernel inventory; the model still computes what LiteRT does."""
    path = DATA / "mobilenet_v2_int8.tflite"
    prepared = prepare_graph(load_model(str(path)), "auto", "full", TARGET)
    entry = integer_entry(prepared)
    assert entry.status == "applied", prepared.graph.describe()
    assert "17 depthwise" in entry.detail and "1 dense" in entry.detail, entry.detail
    assert "11 quantized operator(s) left in float (add x10, mean)" in entry.detail, entry.detail
    listed = prepared.graph.to_dict()["quantized_ops_in_float"]
    assert sorted({op["description"].split(" ")[0] for op in listed}) == ["add", "mean"] and len(listed) == 11
    assert all(op["reason"] for op in listed)
    fused = prepare_for_tuning(prepared.mod, TARGET)
    tasks = ms.relax_integration.extract_tasks(fused, TARGET)
    inventory = kernel_inventory(fused, tasks)
    in_float = [k for k in inventory.kernels if k.precision == "float"]
    assert any("mean" in k.name for k in in_float) and all(k.note == FLOAT_NOTE for k in in_float)
    assert "quantized operators in float: " in inventory.describe()
    inputs = quantized_inputs(path, 2)
    vm = build(prepared.mod)
    assert_matches([vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs], [litert(path, x) for x in inputs],
                   "mobilenet_v2_int8")


def test_a_layer_the_integer_form_cannot_take_stays_in_float_with_its_reason(tmp_path: Path) -> None:
    """uint8 weights with zero points (ONNX Runtime's QUInt8 for weights too) have no int8 form here: left in float,
    each with its reason, the graph as imported (its uint8 activations too), and the model computes what ONNX
    Runtime does."""
    path = write_qdq_resnet(tmp_path / "unsigned.onnx", unsigned=True)
    model = load_model(str(path))
    prepared = prepare_graph(model, "as-is", "full", TARGET)
    entry = integer_entry(prepared)
    assert entry.status == "unchanged" and entry.detail.startswith("no layer in int8; "), entry.detail
    assert "as int8" not in entry.detail, entry.detail  # nothing in integers: the uint8 activations stay as they were
    listed = prepared.graph.to_dict()["quantized_ops_in_float"]
    convs = [op for op in listed if "conv2d" in op["ops"]]
    assert len(convs) == 4 and all("a zero point other than 0" in op["reason"] for op in convs), listed
    assert "integer: no layer in int8" in prepared.graph.describe()
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    [ours] = prepared.reference_outputs({model.inputs[0].name: x})
    [theirs] = onnxruntime_outputs(path, {INPUT: x})
    assert np.abs(ours - theirs).max() <= output_scale(path) * 1.001


@pytest.mark.parametrize("fixture", ["kws_int8", "mobilenet_int8", "mobilenet_v2_int8"])
def test_int8_fixtures_end_to_end_match_litert(fixture: str) -> None:
    """load_model + prepare_graph (the host's layout) + build: LiteRT's int8 outputs, every convolution in integers."""
    path = DATA / f"{fixture}.tflite"
    assert path.stat().st_size < 200_000
    model = load_model(str(path))
    prepared = prepare_graph(model, "auto", "full", TARGET)
    entry = integer_entry(prepared)
    assert entry.status == "applied", prepared.graph.describe()
    left = [op for op in prepared.graph.in_float if "conv2d" in op.ops or "matmul" in op.ops]
    assert not left, left
    inputs = quantized_inputs(path, 3)
    vm = build(prepared.mod)
    ours = [vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs]
    assert_matches(ours, [litert(path, x) for x in inputs], fixture)


@pytest.mark.parametrize("per_channel", [True, False])
def test_an_onnx_qdq_model_end_to_end_matches_onnxruntime(tmp_path: Path, per_channel: bool) -> None:
    """A ResNet-like CNN quantized by ONNX Runtime (QDQ, int8, weights per channel or per tensor, its default):
    integer convolutions (a depthwise and a grouped one among them) and dense layer in the NCHW layout ONNX gives,
    ONNX Runtime's outputs."""
    path = write_qdq_resnet(tmp_path / "resnet_qdq.onnx", per_channel=per_channel)
    model = load_model(str(path))
    prepared = prepare_graph(model, "auto", "full", TARGET)
    entry = integer_entry(prepared)
    assert entry.status == "applied" and entry.detail.startswith("3 convolutions, 1 depthwise, 1 dense in int8"), entry.detail
    assert_matches_onnxruntime(prepared, model, path)


def assert_matches_onnxruntime(prepared, model, path: Path) -> None:
    """``prepared``'s outputs on 3 seeded inputs, in output quanta, against ONNX Runtime's (:func:`assert_matches`)."""
    scale = output_scale(path)
    # without AVX-512 VNNI, ONNX Runtime's fused int8 kernels are off by up to 4 quanta on 20% of one input's outputs
    # (AMD Zen 3, AVX2, per-channel weights; the same model with its graph optimizations off matched these exactly on
    # every input): there the reference is ONNX Runtime's unfused QDQ, as the ONNX spec reads it
    fused = _host_has("avx512_vnni", "avx512bw")
    ours, theirs = [], []
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
        ours.append(np.rint(prepared.reference_outputs({model.inputs[0].name: x})[0] / scale))
        theirs.append(np.rint(onnxruntime_outputs(path, {INPUT: x}, fused=fused)[0] / scale))
    assert_matches(ours, theirs, "ONNX Runtime")


@pytest.mark.parametrize("per_channel", [True, False])
def test_uint8_activations_are_computed_as_int8_and_the_outputs_are_onnxruntimes(tmp_path: Path, per_channel: bool) -> None:
    """ONNX Runtime's recommendation on x86-64 (U8S8: uint8 activations, int8 weights). Each uint8 activation becomes
    int8 with its zero point less 128, so every layer takes the integer form, no uint8 tensor is left, and the
    outputs are ONNX Runtime's: the same values, each shifted by 128 and back."""
    path = write_qdq_resnet(tmp_path / "u8s8.onnx", per_channel=per_channel, unsigned_activations=True)
    model = load_model(str(path))
    assert "uint8" in model.mod.script(show_meta=False)  # the fixture is what it says
    prepared = prepare_graph(model, "auto", "full", TARGET)
    entry = integer_entry(prepared)
    assert entry.status == "applied" and entry.detail.startswith("3 convolutions, 1 depthwise, 1 dense in int8"), entry.detail
    assert "uint8 activation(s) as int8 (zero points less 128)" in entry.detail, entry.detail
    assert "uint8" not in prepared.mod.script(show_meta=False)
    assert_matches_onnxruntime(prepared, model, path)


def test_a_uint8_activation_whose_dequantize_is_the_functions_output_is_made_int8_too() -> None:
    """A dequantize bound outside the dataflow block (a model whose last op it is, as torchvision's QDQ ResNet-18
    ends) is rewritten as such; each uint8 quantize read by anything else than a dequantize keeps its uint8."""
    from tvm import relax

    from edgetune.tasks.integer import signed_activations

    scale, zero = relax.const(0.05, "float32"), relax.const(130, "uint8")
    x = relax.Var("x", relax.TensorType((1, 16), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            kept = bb.emit(relax.op.quantize(x, scale, zero, axis=1, out_dtype="uint8"))
            # not a dequantize: this uint8 stays
            read_as_bytes = bb.emit(relax.op.multiply(relax.op.astype(kept, "float32"), relax.const(0.01, "float32")))
            q = bb.emit(relax.op.quantize(relax.op.add(x, read_as_bytes), scale, zero, axis=1, out_dtype="uint8"))
            out = bb.emit_output(relax.op.dequantize(q, scale, zero, axis=1))
        bb.emit_func_output(out)
    mod = bb.get()
    shifted, count = signed_activations(mod)
    assert count == 1
    returned = shifted["main"].body.body  # the function's output: still bound outside the dataflow block
    assert isinstance(returned, relax.Var) and not isinstance(returned, relax.DataflowVar), type(returned)
    quantizes = [str(call.attrs.out_dtype) for call in _calls(shifted, "relax.quantize")]
    assert sorted(quantizes) == ["int8", "uint8"], quantizes
    data = np.random.default_rng(0).uniform(-3, 3, (1, 16)).astype(np.float32)
    before, after = (relax.VirtualMachine(relax.build(m, target="llvm"), tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
                     for m in (mod, shifted))
    assert len(np.unique(before)) > 4 and np.array_equal(before, after)  # the same values, clipped where uint8 clips


def _calls(mod, op_name: str) -> list:
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(e, relax.Call)
                                    and getattr(e.op, "name", "") == op_name else None)
    return found


def test_the_blocked_layout_leaves_int8_convolutions_as_imported_and_says_so() -> None:
    """A blocked ``conv_layout`` on an integer model: no error, the layout pass says why it did nothing; with
    ``integer=False`` the same model (float between dequantize and quantize) is blocked as before."""
    model = load_model(str(DATA / "kws_int8.tflite"))
    integer = prepare_graph(model, "NCHW8c", "full", TARGET)
    (layout,) = [p for p in integer.graph.passes if p.name == "layout-NCHW8c"]
    # its 4 ordinary int8 convolutions; the depthwise one is already an int8 kernel of its own (int8-kernels)
    assert layout.status == "unchanged" and "4 int8 convolutions stay in the layout imported" in layout.detail
    assert "layout-NCHW8c: not applied" in integer.graph.describe()
    floating = prepare_graph(model, "NCHW8c", "full", TARGET, integer=False)
    assert [p.status for p in floating.graph.passes if p.name in ("integer", "layout-NCHW8c")] == ["applied"]
    x = quantized_inputs(DATA / "kws_int8.tflite", 1)[0]
    name = model.inputs[0].name
    assert np.array_equal(integer.reference_outputs({name: x})[0], floating.reference_outputs({name: x})[0])


def test_a_float_model_is_left_alone() -> None:
    model = load_model(str(DATA / "mobilenet_v2.tflite"))
    prepared = prepare_graph(model, "as-is", "none", TARGET)
    assert [(p.name, p.status, p.detail) for p in prepared.graph.passes] == [("integer", "unchanged", "")]
    assert prepared.mod.same_as(model.mod)


def test_the_profile_switch_turns_the_pass_off(tmp_path: Path) -> None:
    """``tuning.integer = false``: the tune prepares the quantized model in float, as imported."""
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions
    from edgetune.tuning.pipeline import TuningPipeline

    model = str(DATA / "conv_relu_int8.tflite")
    profile = load_profile("host")
    assert profile.tuning.integer is True
    _target, on = TuningPipeline(TuneOptions(profile=profile, model=model, out_dir=tmp_path)).check_inputs()
    off_profile = profile.with_overrides(tuning={"integer": False})
    _target, off = TuningPipeline(TuneOptions(profile=off_profile, model=model, out_dir=tmp_path)).check_inputs()
    assert integer_entry(on).status == "applied"
    assert "integer" not in [p.name for p in off.graph.passes]
    # on: int8 operands summed in int32 (a conv2d with out_dtype int32, or where the target has a dot-product
    # instruction the int8-kernels pass's compute), no dequantize left; off: the float form as imported
    on_script, off_script = on.mod.script(), off.mod.script()
    assert ('out_dtype="int32"' in on_script or "conv2d_int8" in on_script) and "R.dequantize" not in on_script
    assert 'out_dtype="int32"' not in off_script and "conv2d_int8" not in off_script and "dequantize" in off_script


def _host_has(*flags: str) -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            present = {flag for line in f if line.startswith("flags") for flag in line.split()}
    except OSError:
        return False
    return set(flags) <= present


@pytest.mark.integration
@pytest.mark.skipif(not _host_has("avx512_vnni", "avx512bw"), reason="this host's CPU has no AVX-512 VNNI")
def test_an_int8_model_tunes_end_to_end_with_vnni_and_its_artifact_matches_litert(tmp_path: Path, loopback_board) -> None:
    """``run_tune`` (the product's pipeline: builds beside the search, library, defaults, untuned and tuned builds)
    on the KWS-class CNN, its int8 kernels from the library's schedules or searched a few trials each: the summary
    says what is integer and the instruction, the delivered model.so holds VNNI's ``vpdpbusd`` (the untuned int8 code
    has none: a tune whose int8 kernels went back to float, or lost tensorization, or a library schedule that no
    longer replays its tensorization, fails here) and computes LiteRT's outputs."""
    from conftest import require_tool
    from edgetune.board.base import TrackerBoard
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune
    from edgetune.tuning.pipeline import TuningPipeline

    objdump = require_tool("objdump", "binutils")
    path = DATA / "kws_int8.tflite"
    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key}, tuning={"max_trials_per_task": 3})
    options = TuneOptions(profile=profile, model=str(path), out_dir=tmp_path, trials=15, board=TrackerBoard(loopback_board))
    # the int8 kernels (edgetune.tasks.int8 names them conv2d_int8/dense_int8): the tasks the instruction serves
    # (depthwise_conv2d_int8 is an int8 kernel no dot-product instruction takes)
    pipeline = TuningPipeline(options)
    int8_tasks = [t.task_name for t in pipeline.extract_tasks(*pipeline.check_inputs())
                  if "_int8" in t.task_name and "depthwise" not in t.task_name]
    assert int8_tasks, "no int8 kernel among the tasks"
    options.task_names = int8_tasks
    summary = run_tune(options)
    assert summary.int8_instruction == "avx512-vnni"
    assert summary.end_to_end.outputs_match and summary.end_to_end.delivered == "tuned", summary.end_to_end
    (entry,) = [p for p in summary.graph["passes"] if p["name"] == "integer"]
    assert entry["status"] == "applied" and entry["detail"] == "4 convolutions, 1 depthwise, 2 dense in int8", entry
    (kernels_pass,) = [p for p in summary.graph["passes"] if p["name"] == "int8-kernels"]
    assert kernels_pass["detail"].startswith(f"{len(int8_tasks)} int8 kernels for avx512-vnni"), kernels_pass
    kernels = summary.graph["kernels"]["kernels"]  # of the tasks tuned
    assert sorted(k["name"] for k in kernels if k["precision"] == "int8") == sorted(int8_tasks), kernels
    # each int8 kernel started from the shipped library's VNNI schedule (which holds this fixture's), or measured its
    # default and at least one searched candidate: either way its code below must be tensorized
    trials = {t.name: t.trials_this_run for t in summary.tasks}
    from_library = {t.name for t in summary.tasks if t.library_latency_us is not None}
    assert all(name in from_library or trials[name] >= 2 for name in int8_tasks), (trials, from_library)
    assert from_library & set(int8_tasks), "the shipped library holds the fixture's int8 kernels"
    code = subprocess.run([objdump, "-d", str(summary.artifact)], capture_output=True, text=True, check=True).stdout
    assert code.count("vpdpbusd") >= len(int8_tasks), code.count("vpdpbusd")
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(summary.artifact)), tvm.cpu())
    inputs = quantized_inputs(path, 4)
    assert_matches([vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs], [litert(path, x) for x in inputs],
                   "the tuned artifact")


def test_deploy_builds_the_graph_its_history_was_tuned_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`deploy --model M --db H`: H tuned with the integer pass: int8 kernels; H tuned in float (``--no-integer``, or
    before the pass): the float graph, whose kernels H holds, not an untuned integer one."""
    from edgetune.artifact import compile as artifact_compile
    from edgetune.deployment.workflow import source_from_model
    from edgetune.profile import load_profile
    from test_graph import _history_of

    path = DATA / "conv_relu_int8.tflite"
    target = load_profile("host").tvm_target()
    loaded = load_model(str(path))
    compiled: list[str] = []
    real = artifact_compile.compile_model

    def spy(mod, target, history=None, prepack_weights=False):
        compiled.append(mod.script())
        return real(mod, target, history, prepack_weights=prepack_weights)

    monkeypatch.setattr(artifact_compile, "compile_model", spy)
    for name, integer in (("integer", True), ("float", False)):
        db = _history_of(tmp_path / f"{name}.db", prepare_graph(loaded, "auto", "full", target, integer=integer).mod,
                         target)
        source_from_model(str(path), "host", db, tmp_path / name)
    integer_script, float_script = compiled
    # int8 operands summed in int32: a conv2d with out_dtype int32, or the int8-kernels pass's compute (a VNNI host)
    assert ('out_dtype="int32"' in integer_script or "conv2d_int8" in integer_script)
    assert "R.dequantize" not in integer_script
    assert 'out_dtype="int32"' not in float_script and "conv2d_int8" not in float_script


@pytest.mark.parametrize("target", [TARGET, tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "icelake-server"})],
                         ids=["no-instruction", "vnni"])
def test_a_depthwise_int8_convolution_is_one_kernel_with_its_zero_point_padding_inside(target) -> None:
    """The integer form pads a depthwise convolution's input with its zero point; that pad was a kernel of its own
    (a copy of the activation between two convolutions). Now the depthwise kernel reads the zero point where a tap falls
    in the padding,
    with or without a dot-product instruction, and the outputs are still LiteRT's."""
    path = DATA / "mobilenet_v2_int8.tflite"
    model = load_model(str(path))
    prepared = prepare_graph(model, "auto", "full", target)
    (kernels,) = [p for p in prepared.graph.passes if p.name == "int8-kernels"]
    assert kernels.status == "applied" and "; 17 depthwise as one kernel with their zero-point padding" in kernels.detail, kernels
    assert "left as plain int8" not in kernels.detail, kernels.detail
    main = prepared.mod["main"]
    bound = {b.var: b.value for block in main.body.blocks for b in block.bindings}
    depthwise = [value for value in bound.values() if isinstance(value, relax.Call) and value.op.name == "relax.call_tir"
                 and value.args[0].name_hint.startswith("depthwise_conv2d_int8")]
    assert len(depthwise) == 17, len(depthwise)
    for call in depthwise:
        source = bound.get(call.args[1].fields[0])
        assert not (isinstance(source, relax.Call) and source.op.name == "relax.nn.pad"), source  # no pad kernel before it
    padded = [call for call in depthwise if "if_then_else" in prepared.mod[call.args[0]].script()]
    assert padded, "no depthwise kernel pads inside"  # MobileNetV2's 3x3 depthwise convolutions pad by one
    assert not any(isinstance(v, relax.Call) and v.op.name == "relax.nn.conv2d" and int(v.attrs.groups) > 1
                   for v in bound.values())
    # and its requantization is in the same task (an alias binding in the call's place had kept FuseOps from it)
    fused = prepare_for_tuning(prepared.mod, target)
    tasks = [gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    depthwise_tasks = [name for name in tasks if "depthwise_conv2d_int8" in name]
    assert depthwise_tasks and all("round" in name and "clip" in name for name in depthwise_tasks), depthwise_tasks
    assert not [name for name in tasks if name.startswith("fused_add") and "round" in name], tasks
    inputs = quantized_inputs(path, 2)
    vm = build(prepared.mod) if target is TARGET else _build_for(prepared.mod, target)
    assert_matches([vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs], [litert(path, x) for x in inputs],
                   "mobilenet_v2_int8")


def _build_for(mod: tvm.IRModule, target) -> relax.VirtualMachine:
    """Built for ``target`` (AVX-512 VNNI code): run only where this host has the instruction."""
    import re

    if not re.search(r"\bavx512_vnni\b", Path("/proc/cpuinfo").read_text()):
        pytest.skip("this host has no AVX-512 VNNI")
    executable = tvm.compile(mod, target=target)
    return relax.VirtualMachine(executable, tvm.cpu())
