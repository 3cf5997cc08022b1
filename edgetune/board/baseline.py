"""The runtime a user already has, timed against the delivered model: same machine, threads and input.

A deployment engineer tunes only if the tuned model beats what they run
today. :func:`compare_with_baseline` loads the delivered ``model.so`` and the
same model file in the baseline runtime (ONNX Runtime for an ONNX model,
LiteRT with its XNNPACK CPU kernels for a ``.tflite`` one) in one process,
compares their outputs on the same input, and times them with one protocol,
the one every comparison edgetune makes uses (``tune --baseline``, ``deploy
--baseline``, the benchmarks):

* each runtime as its user runs it: ONNX Runtime with its default session
  options (its intra-op threads spin after a run), LiteRT with its defaults
  (XNNPACK), both with the profile's thread count;
* each timed alone, in blocks (:func:`time_in_blocks`): a pause of
  :data:`BLOCK_PAUSE_SEC` before every block, so that the other runtime's
  threads have stopped spinning and the cores are idle, then untimed calls for
  :data:`WARMUP_SEC` (:func:`warm_up`) and ``number`` timed ones;
* the rounds alternate which runtime goes first; medians over rounds.

Before, ONNX Runtime's spinning was turned off so that interleaved rounds did
not slow TVM's; that slowed ONNX Runtime itself by 1.5-1.8x on 2 cores and
flattered the tuned model (benchmarks/baseline_protocol.py measures both
against each runtime timed alone in its own process). And a block began with
one untimed call: on a 2-vCPU VM, LiteRT's second thread stayed slow for the
whole block after a pause in about half the blocks (MobileNetV2 1.7-1.8 ms
back to back, 3.3-4.3 ms in those blocks, its one-thread time), so the
verdict swung by 2x between runs; 50 ms of calls brought it back every time.

On a provisioned board the same file runs as a script (``python baseline.py
RUNTIME --artifact model.so --model FILE --input NAME=x.npy``, printing the
result as JSON): it imports only the standard library at its top, and numpy,
TVM's runtime and the baseline runtime when it runs, so the board times both
models with this very loop (see :mod:`edgetune.provision.baseline`).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

#: the relative output difference (max |ours - theirs| / max |theirs|) under which outputs agree
OUTPUT_RTOL = 1e-4
#: integer (quantized) outputs agree when at least this share of values is identical and the rest one quantum off:
#: two int8 runtimes round a requantization's ties and multipliers each their own way (issue 54's goal)
INTEGER_IDENTICAL = 0.99
#: seconds before each timed block: the other runtime's threads stop spinning and the cores go idle
BLOCK_PAUSE_SEC = 0.5
#: a block lasts at least this long (s): a fast model is called more than ``number`` times
MIN_BLOCK_SEC = 0.02
#: seconds of untimed calls after the pause, before a block is timed: a runtime's threads back at full speed
WARMUP_SEC = 0.1
#: a runtime whose blocks spread more than this share of its median (max - min) is called unsteady in the verdict
UNSTEADY_SPREAD = 0.3


@dataclass
class BaselineResult:
    """One baseline runtime against the delivered model, timed side by side (milliseconds)."""

    runtime: str
    version: str = ""
    baseline_ms: float | None = None
    tuned_ms: float | None = None
    baseline_spread_ms: tuple[float, float] | None = None
    tuned_spread_ms: tuple[float, float] | None = None
    max_rel_diff: float | None = None
    outputs_match: bool | None = None
    identical: float | None = None  # integer outputs: the share of values identical to the baseline's
    protocol: str = ""
    error: str | None = None  # why no comparison could be made (the tune's own results are kept)

    @property
    def speedup(self) -> float | None:
        """Baseline over tuned: above 1, the tuned model is faster."""
        if not self.baseline_ms or not self.tuned_ms:
            return None
        return self.baseline_ms / self.tuned_ms

    def line(self) -> str:
        """``tuned 2.1 ms; ONNX Runtime 3.4 ms on this board: 1.6x faster``, or why there is no comparison."""
        name = RUNTIME_NAMES.get(self.runtime, self.runtime)
        if self.error is not None:
            return f"baseline {name}: {self.error}"
        speedup = self.speedup
        verdict = f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"
        agree = "" if self.outputs_match else f"; outputs DIFFER (max rel diff {self.max_rel_diff:.2g})"
        if self.identical == 1:
            agree = "; all outputs identical"
        elif self.identical is not None:
            agree = f"; {self.identical:.1%} of outputs identical" + (", the rest within one quantum" if
                                                                      self.outputs_match else agree)
        return (f"tuned {self.tuned_ms:.3f} ms; {name} {self.baseline_ms:.3f} ms on this board: {verdict}{agree}"
                + self._unsteady(name))

    def _unsteady(self, name: str) -> str:
        """``; unsteady timings (...)`` where a runtime's blocks spread wide: the board was busy, the ratio is rough."""
        wide = [
            f"{label} {spread[0]:.3f}-{spread[1]:.3f} ms"
            for label, median, spread in (("tuned", self.tuned_ms, self.tuned_spread_ms),
                                          (name, self.baseline_ms, self.baseline_spread_ms))
            if spread is not None and median and (spread[1] - spread[0]) > UNSTEADY_SPREAD * median
        ]
        return f"; unsteady timings ({', '.join(wide)}): time again on an idle board" if wide else ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BaselineResult":
        """The inverse of :meth:`to_dict` (JSON turns the spreads into lists)."""
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        for name in ("baseline_spread_ms", "tuned_spread_ms"):
            if known.get(name) is not None:
                known[name] = tuple(known[name])
        return cls(**known)


#: how each baseline runtime is named to a user
RUNTIME_NAMES = {"onnxruntime": "ONNX Runtime", "litert": "LiteRT"}
#: the model file each runtime runs (a :class:`~edgetune.tasks.models.LoadedModel`'s ``format``)
RUNTIME_FORMATS = {"onnxruntime": "onnx", "litert": "tflite"}
#: how a model format is named to a user
FORMAT_NAMES = {"onnx": "an ONNX file", "tflite": "a .tflite file", "pt2": "a PyTorch program (.pt2)"}
_INSTALL = {"onnxruntime": "pip install onnxruntime", "litert": "pip install ai-edge-litert"}


def load_module_fresh(artifact: str | os.PathLike[str]) -> Any:
    """``tvm.runtime.load_module`` of what ``artifact`` holds now, through a copy under a name of its own.

    The dynamic loader hands back the library it already loaded under the same path, even after the file was
    rewritten: a process that timed a tune's ``model.so`` and then resumed the tune timed the old model again.
    """
    import shutil
    import tempfile

    import tvm

    with tempfile.TemporaryDirectory(prefix="edgetune-module-") as tmp:  # loaded, the copy may go
        copy = Path(tmp) / Path(artifact).name
        shutil.copyfile(artifact, copy)
        return tvm.runtime.load_module(str(copy))


def time_in_blocks(
    blocks: Mapping[str, Callable[[], float]], rounds: int, pause_sec: float = BLOCK_PAUSE_SEC,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, list[float]]:
    """Each runtime timed alone: per round one block of each, a pause before every block, the first one alternating.

    ``blocks`` maps a runtime's name to a function that runs one block and returns its milliseconds per call.
    Round ``r`` runs them in the given order for even ``r`` and reversed for odd ``r``, so neither always
    follows the other. Returns each runtime's milliseconds per call, one value per round.
    """
    names = list(blocks)
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            sleep(pause_sec)
            times[name].append(blocks[name]())
    return times


def warm_up(call: Callable[[], Any], seconds: float = WARMUP_SEC,
            clock: Callable[[], float] = time.perf_counter) -> int:
    """Call ``call`` until ``seconds`` have passed (at least once); returns how many calls that took.

    One call after an idle pause is not enough: a thread pool's workers can take tens of milliseconds to come
    back to full speed, and a block timed during that measures the runtime on fewer cores than it has.
    """
    started = clock()
    calls = 0
    while True:
        call()
        calls += 1
        if clock() - started >= seconds:
            return calls


def compare_with_baseline(
    runtime: str,
    artifact: str | os.PathLike[str],
    model_bytes: bytes | None,
    inputs: Mapping[str, Any],
    threads: int,
    *,
    rounds: int = 15,
    number: int = 10,
    allow_spinning: bool | None = None,
    pause_sec: float = BLOCK_PAUSE_SEC,
    warmup_sec: float = WARMUP_SEC,
    given_as: str = "",
) -> BaselineResult:
    """Time ``artifact`` (a compiled Relax module) and ``runtime`` on the same ``inputs``, each alone in blocks.

    ``model_bytes`` is the model file in the runtime's format (:data:`RUNTIME_FORMATS`; None: the model was
    given in another, named by ``given_as``, and could not be converted; bytes with another ``given_as``:
    converted from it, which the protocol says). ``allow_spinning``: None keeps ONNX Runtime's default (its
    threads spin); True or False sets it, for the benchmark that compares protocols, as ``warmup_sec=0`` (one
    untimed call per block) is the protocol before :func:`warm_up`. Never raises for a
    missing runtime or model: the result's ``error`` says why.
    """
    if runtime not in RUNTIME_NAMES:
        return BaselineResult(runtime, error=f"must be one of {', '.join(RUNTIME_NAMES)}, got {runtime!r} instead")
    if model_bytes is None:
        given = f"; this model was given as {FORMAT_NAMES.get(given_as, given_as)}" if given_as else ""
        return BaselineResult(runtime, error=f"runs {FORMAT_NAMES[RUNTIME_FORMATS[runtime]]}{given}")
    loaded = _load(runtime, model_bytes, threads, allow_spinning)
    if isinstance(loaded, BaselineResult):
        return loaded
    version, run = loaded
    import numpy as np
    import tvm
    from tvm import relax

    os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # before TVM's thread pool starts in this process
    feed = {name: np.asarray(value) for name, value in inputs.items()}
    vm = relax.VirtualMachine(load_module_fresh(artifact), tvm.cpu())
    args = [tvm.runtime.tensor(value) for value in feed.values()]
    out = vm["main"](*args)
    ours = (out if hasattr(out, "numpy") else out[0]).numpy()  # a tensor, or a tuple of them
    theirs = run(feed)
    rel, identical, match = output_agreement(ours, theirs, output_quantum(model_bytes, runtime))
    calls = max(number, _calls_for(lambda: vm["main"](*args)), _calls_for(lambda: run(feed)))
    timer = vm.time_evaluator("main", tvm.cpu(), number=calls, repeat=1)

    def tuned_block() -> float:
        warm_up(lambda: vm["main"](*args), warmup_sec)  # untimed: TVM's thread pool back at full speed
        return float(timer(*args).mean) * 1e3

    def baseline_block() -> float:
        warm_up(lambda: run(feed), warmup_sec)  # untimed: the runtime's threads back at full speed
        started = time.perf_counter()
        for _ in range(calls):
            run(feed)
        return (time.perf_counter() - started) / calls * 1e3

    times = time_in_blocks({"tuned": tuned_block, runtime: baseline_block}, rounds, pause_sec)
    tuned_ms, baseline_ms = times["tuned"], times[runtime]
    if runtime == "onnxruntime":
        spinning = "default (threads spinning)" if allow_spinning is None else ("on" if allow_spinning else "off")
        settings = f"; ONNX Runtime default session options, spinning {spinning}"
    else:
        settings = "; LiteRT defaults (XNNPACK)"
    return BaselineResult(
        runtime, version,
        baseline_ms=statistics.median(baseline_ms), tuned_ms=statistics.median(tuned_ms),
        baseline_spread_ms=(min(baseline_ms), max(baseline_ms)), tuned_spread_ms=(min(tuned_ms), max(tuned_ms)),
        max_rel_diff=rel, outputs_match=match, identical=identical,
        protocol=f"each runtime alone: {rounds} alternating rounds of one {calls}-call block each, "
        f"{pause_sec:g} s pause and {warmup_sec:g} s of untimed calls before every block, {threads} threads, median"
        + settings
        + (f"; the model exported from {FORMAT_NAMES.get(given_as, given_as)}"
           if given_as and given_as != RUNTIME_FORMATS[runtime] else ""),
    )


def output_agreement(ours: Any, theirs: Any, quantum: float | None = None) -> tuple[float, float | None, bool]:
    """(max relative difference, share of identical values or None, whether they agree) of two outputs.

    Float outputs agree within :data:`OUTPUT_RTOL`. Integer outputs (a quantized model's) are compared as int64,
    not in their own type, where ``-128 - 127`` wraps; they agree as :data:`INTEGER_IDENTICAL` says. Float
    outputs of a quantized graph (a QDQ model's last ``DequantizeLinear``, ``quantum`` its scale) are counted
    in quanta and agree the integer way: a one-quantum tie rounded the other way is 0.7% of a ResNet-18's range.
    """
    import numpy as np

    ours, theirs = np.asarray(ours), np.asarray(theirs)
    integer = np.issubdtype(ours.dtype, np.integer) and np.issubdtype(theirs.dtype, np.integer)
    if integer:
        ours, theirs = ours.astype(np.int64), theirs.astype(np.int64)
    diff = np.abs(ours - theirs)
    rel = float(diff.max() / max(float(np.abs(theirs).max()), 1e-30))
    if not integer and (quantum is None or quantum <= 0 or rel <= OUTPUT_RTOL):
        return rel, None, rel <= OUTPUT_RTOL
    quanta = np.rint(diff / quantum).astype(np.int64) if not integer else diff
    identical = float(np.mean(quanta == 0))
    return rel, identical, identical >= INTEGER_IDENTICAL and int(quanta.max()) <= 1


#: operators that move an output's values without changing them: a dequantized output read through them keeps its quantum
_VALUE_PRESERVING = frozenset({"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze", "Transpose"})


def output_quantum(model_bytes: bytes | None, runtime: str) -> float | None:
    """The quantum of an ONNX model's first output where a per-tensor ``DequantizeLinear`` makes it, else None."""
    if runtime != "onnxruntime" or not model_bytes:
        return None
    try:
        import onnx
        from onnx import numpy_helper

        graph = onnx.load_model_from_string(model_bytes).graph
    except Exception:  # noqa: BLE001 - not a model ONNX reads: compared as floats
        return None
    producers = {out: node for node in graph.node for out in node.output}
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    constants.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in graph.node
                      if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    node = producers.get(graph.output[0].name) if graph.output else None
    while node is not None and node.op_type in _VALUE_PRESERVING:
        node = producers.get(node.input[0])
    if node is None or node.op_type != "DequantizeLinear" or len(node.input) < 2:
        return None
    scale = constants.get(node.input[1])
    return float(scale.reshape(-1)[0]) if scale is not None and scale.size == 1 else None


def _calls_for(call: Callable[[], Any]) -> int:
    """Calls of ``call`` that fill :data:`MIN_BLOCK_SEC` (timed from two warm-up calls)."""
    call()
    started = time.perf_counter()
    call()
    seconds = max(time.perf_counter() - started, 1e-6)
    return max(1, math.ceil(MIN_BLOCK_SEC / seconds))


def _load(runtime: str, model_bytes: bytes, threads: int, allow_spinning: bool | None) -> tuple[str, Any] | BaselineResult:
    """(version, run(feed) -> first output) of the model in ``runtime``, or the result saying why it cannot run."""
    import numpy as np

    try:
        if runtime == "onnxruntime":
            import onnxruntime as engine
        else:
            import ai_edge_litert as engine
            from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return BaselineResult(runtime, error=f"not installed here ({_INSTALL[runtime]})")
    version = str(getattr(engine, "__version__", ""))
    try:
        if runtime == "onnxruntime":
            options = engine.SessionOptions()  # its defaults, as a user runs it: only the thread count is the profile's
            options.intra_op_num_threads = threads
            if allow_spinning is not None:
                spinning = "1" if allow_spinning else "0"
                options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
                options.add_session_config_entry("session.inter_op.allow_spinning", spinning)
            session = engine.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
            names = [given.name for given in session.get_inputs()]  # fed by position: an export may rename
            return version, lambda feed: session.run(None, dict(zip(names, feed.values())))[0]
        interpreter = Interpreter(model_content=model_bytes, num_threads=threads)
        interpreter.allocate_tensors()
    except Exception as error:  # noqa: BLE001 - the runtime's own errors: an operator it lacks, a bad file
        return BaselineResult(runtime, version, error=f"cannot load the model: {str(error).strip().splitlines()[0]}")
    slots = {detail["name"]: detail["index"] for detail in interpreter.get_input_details()}
    output = interpreter.get_output_details()[0]["index"]

    def invoke(feed: Mapping[str, Any]) -> Any:
        for name, value in feed.items():
            interpreter.set_tensor(slots[name], np.asarray(value))
        interpreter.invoke()
        return interpreter.get_tensor(output)

    return version, invoke


def main(argv: list[str] | None = None) -> int:
    """The board side: time RUNTIME beside ARTIFACT on the given inputs and print the result as one JSON line."""
    import argparse
    import json

    import numpy as np

    parser = argparse.ArgumentParser(description="time a baseline runtime beside a compiled Relax module")
    parser.add_argument("runtime", choices=sorted(RUNTIME_NAMES))
    parser.add_argument("--artifact", required=True, help="the compiled model (model.so)")
    parser.add_argument("--model", required=True, help="the model file in the runtime's format")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=NPY", help="one per model input, in order")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=10)
    parser.add_argument("--given-as", default="", help="the format the user gave the model in")
    args = parser.parse_args(argv)
    inputs = {}
    for item in args.input:
        name, _, path = item.rpartition("=")
        inputs[name] = np.load(path)
    with open(args.model, "rb") as handle:
        model_bytes = handle.read()
    result = compare_with_baseline(args.runtime, args.artifact, model_bytes, inputs, args.threads,
                                   rounds=args.rounds, number=args.number, given_as=args.given_as)
    print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
