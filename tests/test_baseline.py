"""Baselines (issue 29): the runtime a user already has, timed beside the delivered model after a tune."""

from __future__ import annotations

import sys

import pytest

from conftest import run_cli
from edgetune.board.baseline import BaselineResult, compare_with_baseline

pytestmark = pytest.mark.integration


def test_tune_with_an_onnxruntime_baseline_on_the_embedded_board(tmp_path) -> None:
    """`edgetune tune --baseline onnxruntime`: ONNX Runtime timed beside model.so; summary and the final line say who won."""
    out = tmp_path / "run"
    done = run_cli("tune", "--profile", "host", "--model", "demo:tiny-cnn", "--trials", "3", "--out", str(out), "--quiet",
                   "--baseline", "onnxruntime", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    from edgetune.tuning import TuneSummary

    summary = TuneSummary.load(out)
    [baseline] = summary.end_to_end.baselines
    assert baseline["runtime"] == "onnxruntime" and baseline["error"] is None and baseline["version"]
    assert baseline["baseline_ms"] > 0 and baseline["tuned_ms"] > 0 and baseline["outputs_match"] is True
    assert baseline["max_rel_diff"] < 1e-4 and "default session options, spinning default" in baseline["protocol"]
    assert "each runtime alone" in baseline["protocol"] and "0.5 s pause and 0.1 s of untimed calls before every block" in baseline["protocol"]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"tuned {baseline['tuned_ms']:.3f} ms; ONNX Runtime {baseline['baseline_ms']:.3f} ms on this board: ")
    # a busy CI host may add "; unsteady timings (...): time again on an idle board" after the verdict
    assert last.split("; unsteady timings (")[0].endswith(("x faster", "x slower")), last


def test_a_baseline_off_the_embedded_board_is_one_line_and_the_tune_is_kept(tmp_path, loopback_board) -> None:
    from edgetune.board.base import TrackerBoard
    from edgetune.display import baseline_lines
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    profile = load_profile("host").with_overrides(rpc={"key": loopback_board.key}, tuning={"baseline": "onnxruntime"})
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=2,
                                   board=TrackerBoard(loopback_board)))
    assert summary.end_to_end.outputs_match and summary.end_to_end.tuned_ms > 0  # the tune's own results
    assert summary.trials.this_run >= 2 and (tmp_path / "model.so").is_file()
    [baseline] = summary.end_to_end.baselines
    assert baseline["baseline_ms"] is None and "embedded board" in baseline["error"]
    assert baseline_lines(summary) == [f"baseline ONNX Runtime: {baseline['error']}"]


def test_a_missing_runtime_or_a_model_without_onnx_is_one_line(monkeypatch, tmp_path) -> None:
    no_onnx = compare_with_baseline("onnxruntime", tmp_path / "model.so", None, {}, 1, given_as="pt2")
    assert no_onnx.error == "runs an ONNX file; this model was given as a PyTorch program (.pt2)"
    no_tflite = compare_with_baseline("litert", tmp_path / "model.so", None, {}, 1, given_as="onnx")
    assert no_tflite.line() == "baseline LiteRT: runs a .tflite file; this model was given as an ONNX file"
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now fails
    missing = compare_with_baseline("onnxruntime", tmp_path / "model.so", b"onnx", {}, 1)
    assert missing.error == "not installed here (pip install onnxruntime)" and missing.speedup is None
    assert missing.line() == "baseline ONNX Runtime: not installed here (pip install onnxruntime)"
    assert "\n" not in missing.line()


def test_the_verdict_reads_the_right_way_round() -> None:
    faster = BaselineResult("onnxruntime", baseline_ms=3.4, tuned_ms=2.0, outputs_match=True, max_rel_diff=0.0)
    slower = BaselineResult("onnxruntime", baseline_ms=1.0, tuned_ms=2.5, outputs_match=True, max_rel_diff=0.0)
    assert faster.line() == "tuned 2.000 ms; ONNX Runtime 3.400 ms on this board: 1.70x faster"
    assert slower.line() == "tuned 2.500 ms; ONNX Runtime 1.000 ms on this board: 2.50x slower"


def test_a_verdict_from_blocks_that_spread_wide_says_its_timings_were_unsteady() -> None:
    """On a busy board (or this 2-vCPU VM) one runtime's blocks can swing 2x: the user is told the ratio is rough."""
    steady = BaselineResult("litert", baseline_ms=1.8, tuned_ms=2.0, outputs_match=True, max_rel_diff=0.0,
                            baseline_spread_ms=(1.7, 1.9), tuned_spread_ms=(1.95, 2.1))
    assert "unsteady" not in steady.line()
    swinging = BaselineResult("litert", baseline_ms=1.8, tuned_ms=2.0, outputs_match=True, max_rel_diff=0.0,
                              baseline_spread_ms=(1.7, 4.2), tuned_spread_ms=(1.95, 2.1))
    assert swinging.line() == ("tuned 2.000 ms; LiteRT 1.800 ms on this board: 1.11x slower; "
                               "unsteady timings (LiteRT 1.700-4.200 ms): time again on an idle board")
    both = BaselineResult("litert", baseline_ms=1.8, tuned_ms=2.0, outputs_match=True, max_rel_diff=0.0,
                          baseline_spread_ms=(1.7, 4.2), tuned_spread_ms=(1.9, 3.6))
    assert "(tuned 1.900-3.600 ms, LiteRT 1.700-4.200 ms)" in both.line()


def test_integer_outputs_agree_as_the_int8_goal_says_and_never_wrap() -> None:
    """A quantized model's int8 outputs: compared as int64 (127 against -128 is 255 apart, not 1), and agreeing
    when 99% are identical and the rest one quantum off, as two int8 runtimes' requantizations do."""
    import numpy as np

    from edgetune.board.baseline import output_agreement

    theirs = np.arange(-128, 128).astype(np.int8)
    one_off = theirs.copy()
    one_off[10] += 1
    rel, identical, match = output_agreement(one_off, theirs)
    assert match and identical == pytest.approx(255 / 256) and rel == pytest.approx(1 / 128)
    wrapped = theirs.copy()
    wrapped[-1] = -128  # 127 in theirs: wraps to 1 apart in int8 arithmetic
    assert output_agreement(wrapped, theirs) == (pytest.approx(255 / 128), pytest.approx(255 / 256), False)
    many_off = theirs.copy()
    many_off[:5] += 1  # 98% identical
    assert not output_agreement(many_off, theirs)[2]
    assert output_agreement(np.ones(4, np.float32), np.ones(4, np.float32) * (1 + 1e-3))[1:] == (None, False)
    line = BaselineResult("litert", "2", 1.0, 2.0, max_rel_diff=rel, outputs_match=match, identical=identical).line()
    assert line.endswith("99.6% of outputs identical, the rest within one quantum"), line
    same = BaselineResult("litert", "2", 1.0, 2.0, max_rel_diff=0.0, outputs_match=True, identical=1.0).line()
    assert same.endswith("2.00x slower; all outputs identical"), same


def test_a_rewritten_model_so_is_timed_as_it_is_now(tmp_path) -> None:
    """A process that compared a tune's model.so, then resumed the tune, compares the new model.so: the dynamic
    loader hands back the library already loaded under a path, so the comparison loads a copy of its own."""
    import numpy as np
    import onnx
    import tvm
    from onnx import TensorProto, helper, numpy_helper
    from tvm.relax.frontend.onnx import from_onnx

    def add_model(value: float) -> bytes:
        graph = helper.make_graph(
            [helper.make_node("Add", ["x", "c"], ["y"])], "add",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
            [numpy_helper.from_array(np.full(4, value, dtype="float32"), "c")],
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()

    artifact = tmp_path / "model.so"
    inputs = {"x": np.arange(4, dtype="float32")}
    first, second = add_model(1.0), add_model(2.0)
    tvm.compile(from_onnx(onnx.load_from_string(first)), target="llvm").export_library(str(artifact))
    held = tvm.runtime.load_module(str(artifact))  # the process still holds the model it timed first
    before = compare_with_baseline("onnxruntime", artifact, first, inputs, 1, rounds=1, number=1)
    # the same path, rewritten, as a resumed tune rewrites its model.so
    tvm.compile(from_onnx(onnx.load_from_string(second)), target="llvm").export_library(str(artifact))
    after = compare_with_baseline("onnxruntime", artifact, second, inputs, 1, rounds=1, number=1)
    for result in (before, after):  # each the model of its own moment (x + 1 against x + 2: 0.4 apart)
        assert result.error is None and result.max_rel_diff < 1e-6, result
    assert held is not None


def test_blocks_alternate_and_each_waits_for_a_pause() -> None:
    """time_in_blocks: a pause before every block, each runtime once per round, the first of each round alternating."""
    from edgetune.board.baseline import time_in_blocks

    events: list[str] = []
    clock = iter(range(100))

    def block(name: str):
        def run() -> float:
            events.append(name)
            return float(next(clock))
        return run

    times = time_in_blocks({"tuned": block("tuned"), "onnxruntime": block("onnxruntime")}, 3, 0.25,
                           sleep=lambda sec: events.append(f"pause {sec}"))
    assert events == [
        "pause 0.25", "tuned", "pause 0.25", "onnxruntime",
        "pause 0.25", "onnxruntime", "pause 0.25", "tuned",
        "pause 0.25", "tuned", "pause 0.25", "onnxruntime",
    ]
    assert times == {"tuned": [0.0, 3.0, 4.0], "onnxruntime": [1.0, 2.0, 5.0]}


def test_a_warm_up_calls_until_its_time_has_passed_and_at_least_once() -> None:
    """After a pause a runtime's threads need tens of ms to run at full speed: one call is not a warm-up."""
    from edgetune.board.baseline import warm_up

    now = [0.0]
    calls: list[float] = []

    def call() -> None:
        calls.append(now[0])
        now[0] += 0.03  # each call takes 30 ms on the fake clock

    assert warm_up(call, 0.1, clock=lambda: now[0]) == 4  # 0.03, 0.06, 0.09, 0.12 >= 0.1
    assert calls == pytest.approx([0.0, 0.03, 0.06, 0.09])
    calls.clear()
    assert warm_up(call, 0.0, clock=lambda: now[0]) == 1  # no warm-up time: the protocol's one untimed call
    assert len(calls) == 1


def test_tune_baseline_times_each_runtime_alone_in_alternating_blocks(tmp_path, monkeypatch) -> None:
    """What `tune --baseline` runs on the embedded board: the block protocol, ONNX Runtime with its default options."""
    import onnxruntime

    import edgetune.board.baseline as baseline
    from edgetune.profile import load_profile
    from edgetune.tuning import TuneOptions, run_tune

    events: list[str] = []
    real = baseline.time_in_blocks

    def spy(blocks, rounds, pause_sec=baseline.BLOCK_PAUSE_SEC, sleep=None):
        def logged(name, run):
            def block() -> float:
                events.append(name)
                return run()
            return block

        return real({name: logged(name, run) for name, run in blocks.items()}, rounds, pause_sec,
                    sleep=lambda sec: events.append(f"pause {sec}"))

    options_made: list = []
    real_options = onnxruntime.SessionOptions

    def options() -> object:
        made = real_options()
        options_made.append(made)
        return made

    real_warm_up = baseline.warm_up

    def warm_up(call, seconds=baseline.WARMUP_SEC, clock=None):
        events.append(f"warm-up {seconds}")
        return real_warm_up(call, seconds)

    monkeypatch.setattr(baseline, "time_in_blocks", spy)
    monkeypatch.setattr(baseline, "warm_up", warm_up)
    monkeypatch.setattr(onnxruntime, "SessionOptions", options)
    profile = load_profile("host").with_overrides(tuning={"baseline": "onnxruntime"})
    summary = run_tune(TuneOptions(profile=profile, model="demo:tiny-cnn", out_dir=tmp_path, trials=2))
    [result] = summary.end_to_end.baselines
    assert result["error"] is None and result["outputs_match"], result
    # where the host's time went (issue 55): every trial measured, the components within the wall clock
    host = summary.host_time
    assert host["measured_trials"] >= summary.trials.measured_on_device >= 1
    assert 0 < host["search"] + host["build"] + host["board"] <= summary.seconds.tuning_wall + 1e-6
    assert summary.host_time_lines()[0].startswith("host time ")
    rounds = 15
    expected = []
    for index in range(rounds):
        order = ["tuned", "onnxruntime"] if index % 2 == 0 else ["onnxruntime", "tuned"]
        expected += [item for name in order
                     for item in (f"pause {baseline.BLOCK_PAUSE_SEC}", name, f"warm-up {baseline.WARMUP_SEC}")]
    assert events == expected  # every block warmed up after its pause, before it is timed
    assert f"{baseline.WARMUP_SEC:g} s of untimed calls before every block" in result["protocol"]
    # the user's defaults: no spinning switch, the profile's threads
    [made] = options_made
    assert made.intra_op_num_threads == profile.device.num_threads
    with pytest.raises(RuntimeError, match="does not have configuration"):  # never set: ONNX Runtime's default
        made.get_session_config_entry("session.intra_op.allow_spinning")


def test_a_qdq_models_float_outputs_agree_in_quanta_of_its_last_dequantize(tmp_path) -> None:
    """A QDQ model's outputs are float, but each is a quantum times an integer: ours and ONNX Runtime's QDQ ResNet-18
    differed by one quantum at a tie (0.72% of the output range), which the float rule (1e-4) called a disagreement."""
    import numpy as np

    from edgetune.board.baseline import output_agreement, output_quantum
    from qdq_models import output_scale, write_qdq_resnet

    path = write_qdq_resnet(tmp_path / "qdq.onnx")
    quantum = output_quantum(path.read_bytes(), "onnxruntime")
    assert quantum == pytest.approx(output_scale(path))
    assert output_quantum(path.read_bytes(), "litert") is None  # a .tflite's outputs are integers or floats
    assert output_quantum((tmp_path / "qdq.float.onnx").read_bytes(), "onnxruntime") is None  # a float model's
    theirs = np.arange(-50, 50, dtype=np.float32) * quantum
    one_off = theirs.copy()
    one_off[7] += quantum
    assert output_agreement(one_off, theirs)[2] is False  # as floats: 1% of the range apart
    rel, identical, match = output_agreement(one_off, theirs, quantum)
    assert match and identical == pytest.approx(0.99)
    two_off = theirs.copy()
    two_off[7] += 2 * quantum
    assert not output_agreement(two_off, theirs, quantum)[2]
    many = theirs.copy()
    many[:2] += quantum  # 98% identical
    assert not output_agreement(many, theirs, quantum)[2]
    assert output_agreement(theirs * (1 + 1e-6), theirs, quantum) == (pytest.approx(1e-6, rel=0.1), None, True)
