"""TensorFlow Lite models in (`--model net.tflite`) and LiteRT as their baseline (issue 29).

The models are written by the tests themselves (tests/tflite_models.py, no
TensorFlow, no downloads); LiteRT running them is the check that they are valid.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from conftest import run_cli
from tflite_models import write_model


def one_error_line(result) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("edgetune: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_a_tflite_model_loads_with_its_inputs_and_computes_what_litert_does(tmp_path: Path) -> None:
    import tvm
    from ai_edge_litert.interpreter import Interpreter
    from tvm import relax

    from edgetune.tasks import load_model

    path = write_model(tmp_path / "net.tflite")
    model = load_model(str(path))
    assert model.format == "tflite" and model.bytes_for("tflite") == path.read_bytes() and model.bytes_for("onnx") is None
    assert [(i.name, i.shape, i.dtype) for i in model.inputs] == [("input", (1, 16, 16, 3), "float32")]
    x = model.random_inputs(seed=0)["input"]
    with tvm.transform.PassContext(opt_level=3):
        vm = relax.VirtualMachine(relax.build(model.mod, target="llvm"), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    theirs = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert ours.shape == theirs.shape == (1, 10)
    assert np.abs(ours - theirs).max() <= 1e-4 * np.abs(theirs).max()


def test_a_tflite_model_tunes_and_is_compared_with_litert(tmp_path: Path) -> None:
    """On the embedded board: tuned, delivered, and timed beside LiteRT; ONNX Runtime says in one line it cannot."""
    path = write_model(tmp_path / "net.tflite")
    out = tmp_path / "run"
    result = run_cli("tune", "--profile", "host", "--model", str(path), "--trials", "6", "--out", str(out),
                     "--baseline", "onnxruntime,litert", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["end_to_end"]["outputs_match"]
    onnx, litert = summary["end_to_end"]["baselines"]
    assert onnx["runtime"] == "onnxruntime" and onnx["error"] == "runs an ONNX file; this model was given as a .tflite file"
    assert litert["runtime"] == "litert" and litert["error"] is None, litert
    assert litert["outputs_match"] and litert["max_rel_diff"] <= 1e-4 and litert["baseline_ms"] > 0 and litert["tuned_ms"] > 0
    last = result.stdout.strip().splitlines()[-2:]
    assert last[0] == "baseline ONNX Runtime: runs an ONNX file; this model was given as a .tflite file"
    assert last[1].startswith("tuned ") and "LiteRT" in last[1] and "on this board" in last[1], last
    # report.html draws the comparison: untuned, LiteRT, tuned
    from test_report import assert_meaningful_png

    page = (out / "report.html").read_text()
    assert "Against what you would run instead" in page and "report/baselines.png" in page
    assert_meaningful_png(out / "report" / "baselines.png", min_size=(480, 300))


def test_an_unsupported_tflite_operator_or_a_damaged_file_is_one_line(tmp_path: Path) -> None:
    bad = write_model(tmp_path / "custom.tflite", unsupported=True)
    error = one_error_line(run_cli("tune", "--profile", "host", "--model", str(bad), "--trials", "2", "--out", str(tmp_path / "a")))
    assert "custom.tflite" in error and "cannot import the TensorFlow Lite model" in error and "Custom operators" in error
    damaged = tmp_path / "damaged.tflite"
    damaged.write_bytes(write_model(tmp_path / "ok.tflite").read_bytes()[:100])
    error = one_error_line(run_cli("tune", "--profile", "host", "--model", str(damaged), "--trials", "2", "--out", str(tmp_path / "b")))
    assert "damaged.tflite" in error and "TensorFlow Lite" in error
    other = tmp_path / "other.tflite"
    other.write_bytes(b"not a flatbuffer at all" * 4)
    error = one_error_line(run_cli("tune", "--profile", "host", "--model", str(other), "--trials", "2", "--out", str(tmp_path / "c")))
    assert "is not a TensorFlow Lite model" in error


def test_litert_missing_is_one_line(monkeypatch, tmp_path: Path) -> None:
    from edgetune.board.baseline import compare_with_baseline

    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)  # import ai_edge_litert now fails
    missing = compare_with_baseline("litert", tmp_path / "model.so", b"TFL3", {}, 1)
    assert missing.line() == "baseline LiteRT: not installed here (pip install ai-edge-litert)"


def test_a_baseline_list_is_checked_in_one_line(tmp_path: Path) -> None:
    error = one_error_line(run_cli("tune", "--profile", "host", "--model", "demo:tiny-cnn", "--baseline", "onnxruntime,litrt",
                                   "--out", str(tmp_path)))
    assert "onnxruntime,litrt" in error and "did you mean 'litert'?" in error
