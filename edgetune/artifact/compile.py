"""Compile a whole model (untuned, or with the history's best schedules) and run it on a board.

Measurement goes through the same tracker and key as tuning, so the end-to-end
numbers in a run's summary come from the device, not from the host.
"""

from __future__ import annotations

import gc
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..common.rpc import remote_module, unique_remote_name
from ..board.rpc_tracker import TrackerAddress, request_session
from ..builder.builder import shared_library_linker
from ..profile import DeviceProfile


@dataclass(frozen=True)
class LatencyStats:
    """End-to-end latency of one model run on the device, in milliseconds."""

    mean_ms: float
    median_ms: float
    std_ms: float
    min_ms: float
    repeats: int

    @classmethod
    def from_seconds(cls, seconds: list[float]) -> "LatencyStats":
        values = np.asarray(seconds, dtype=float) * 1e3
        return cls(
            mean_ms=float(values.mean()),
            median_ms=float(np.median(values)),
            std_ms=float(values.std()),
            min_ms=float(values.min()),
            repeats=len(values),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: how the Relax VM runs a CPU model's calls: "compiled" lowers the VM's instruction sequence into the library as
#: machine code (TVM's ``exec_mode="compiled"``), where "bytecode" interprets it at every call, about 0.13 us per
#: kernel call on a Zen 5. That is a fifth of a keyword-spotting int8 model's 11 us (16 calls; RESULTS,
#: ``vm_compiled``) and noise on a large model. Not for GPUs, whose builds go through ``compile_relax``.
CPU_VM_EXEC_MODE = "compiled"


def vm_exec_mode(target: Any) -> str:
    """The Relax VM execution mode a model for ``target`` is built in: compiled on CPUs, bytecode elsewhere."""
    return CPU_VM_EXEC_MODE if str(target.kind.name) == "llvm" else "bytecode"


def compile_model(mod: Any, target: Any, history: Any | None = None, prepack_weights: bool = False) -> Any:
    """A Relax executable: with ``history``, tuned functions use its best records.

    Without a history the default Relax pipeline builds every operator
    unscheduled: that is the "untuned" baseline a summary compares against.
    Both run the VM in :func:`vm_exec_mode` for the target.
    ``prepack_weights`` must be what the tasks were extracted with
    (:func:`edgetune.tasks.models.prepare_for_tuning`), or the records do not apply.
    """
    import tvm
    from tvm import relax

    if history is None:
        with tvm.transform.PassContext(opt_level=3):
            return relax.build(mod, target=target, exec_mode=vm_exec_mode(target))
    if str(target.kind.name) != "llvm":  # GPUs: compile_relax's DLight fallback schedules what was not tuned
        from tvm.s_tir.meta_schedule.relax_integration import compile_relax

        return compile_relax(history.for_target(target), mod, target, params=None)
    return _compile_cpu(history.for_target(target), mod, target, prepack_weights)


def _compile_cpu(database: Any, mod: Any, target: Any, prepack_weights: bool) -> Any:
    """``compile_relax``'s CPU pipeline, with concats built in place and, with ``prepack_weights``, each
    schedule's weight layout applied to the weights once, here."""
    import tvm
    from tvm import relax
    from tvm.relax.transform import MetaScheduleApplyDatabase

    from ..builder.intrinsics import load_tensor_intrinsics
    from ..tasks.models import prepare_for_tuning

    load_tensor_intrinsics(target)  # records of int8 kernels tensorize with the target's intrinsics (by name)

    @tvm.transform.module_pass(opt_level=3)
    def _pipeline(mod: Any, _ctx: Any) -> Any:
        if prepack_weights:
            mod = prepacked_module(mod, target)
        else:
            mod = MetaScheduleApplyDatabase()(prepare_for_tuning(mod, target))  # the workloads the tasks were
        return tvm.transform.Sequential(lowering_passes(target))(mod)

    with target, database, tvm.transform.PassContext(opt_level=3):
        return relax.build(mod, target=target, relax_pipeline=_pipeline, exec_mode=vm_exec_mode(target))


def prepacked_module(mod: Any, target: Any) -> Any:
    """The model with the database in scope applied, its weights rewritten into the layouts the schedules read.

    A record tuned with ``RewriteLayout`` reads its constant weights in the
    layout of its loops; ``SplitLayoutRewritePreproc`` moves that rewrite into a
    function of the weight alone and ``FoldConstant`` runs it at build time, as
    TVM's ``static_shape_tuning_pipeline(cpu_weight_prepack=True)`` does for
    weights that are constants (ours are: the importers bind them). Call it
    with the target and a MetaSchedule database entered.
    """
    import tvm
    from tvm import relax
    from tvm.relax.transform import MetaScheduleApplyDatabase

    from ..tasks.models import prepare_for_tuning

    mod = prepare_for_tuning(mod, target, prepack_weights=True)  # the workloads the tasks were
    mod = _unmarked_where_tuned_plain(mod, target)
    mod = MetaScheduleApplyDatabase()(mod)
    with tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential([relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant()])(mod)


def _unmarked_where_tuned_plain(mod: Any, target: Any) -> Any:
    """Kernels the database knows only as tuned without prepacking (a history from before it) take those records.

    Marking a kernel's weights makes it another workload to MetaSchedule; without
    this, a model deployed from such a history would build those kernels untuned.
    """
    from tvm import tirx
    from tvm.s_tir.meta_schedule.database import Database
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from ..tasks.models import LAYOUT_FREE

    database = Database.current()
    for gv, func in list(mod.functions_items()):
        if not (isinstance(func, tirx.PrimFunc) and func.attrs is not None and LAYOUT_FREE in func.attrs):
            continue
        plain = func.without_attr(LAYOUT_FREE)
        name = gv.name_hint
        if (database.query_tuning_record(_normalize_mod(func), target, name) is None
                and database.query_tuning_record(_normalize_mod(plain), target, name) is not None):
            mod[gv] = plain
    return mod


def lowering_passes(target: Any, concat_in_place: bool = True) -> list[Any]:
    """What ``compile_relax`` runs after applying the database: the target's lowering, or the generic one.

    On CPU targets, with :class:`~edgetune.artifact.concat_in_place.ConcatInPlace` after memory planning.
    """
    from tvm import relax
    from tvm.relax import pipeline as relax_pipeline

    from .concat_in_place import ConcatInPlace

    try:
        passes = [*relax_pipeline.dataflow_lower_passes(target), *relax_pipeline.finalize_passes(target)]
    except (ValueError, AttributeError):  # TVM 0.27's CPU backend registers neither (compile_relax falls back too)
        transform = relax.transform
        passes = [
            transform.RewriteDataflowReshape(), transform.ToNonDataflow(), transform.RemovePurityChecking(),
            transform.CallTIRRewrite(), transform.StaticPlanBlockMemory(), transform.LowerAllocTensor(),
            transform.KillAfterLastUse(), transform.LowerRuntimeBuiltin(), transform.ComputePrimValue(),
            transform.VMShapeLower(), transform.AttachGlobalSymbol(),
        ]
    if concat_in_place and str(target.kind.name) == "llvm":
        planned = next((i for i, p in enumerate(passes) if p.info.name == "StaticPlanBlockMemory"), None)
        if planned is not None:
            passes.insert(planned + 1, ConcatInPlace())
    return passes


def export_model(executable: Any, path: str | Path, profile: DeviceProfile) -> Path:
    """Write a shared library linked with the profile's (cross) compiler."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # write then rename: an interrupted export never leaves a half-written artifact
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        executable.export_library(
            tmp, fcompile=shared_library_linker(profile.build.cross_compiler, tuple(profile.build.cross_compiler_flags))
        )
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


@dataclass
class BoardRun:
    """Outputs and latency of one artifact run on the device."""

    outputs: list[np.ndarray]
    latency: LatencyStats


def run_on_board(
    address: TrackerAddress,
    device_type: str,
    artifact: str | Path,
    inputs: list[np.ndarray],
    *,
    number: int = 5,
    repeat: int = 5,
    min_repeat_ms: int = 0,
    session_timeout_sec: float = 300.0,
) -> BoardRun:
    """Upload ``artifact``, run ``main`` once for outputs, then time it.

    A Relax VM over RPC is driven with ``set_input`` + ``invoke_stateful``.
    """
    session = request_session(address, session_timeout_sec=session_timeout_sec)
    try:
        return _run_in_session(session, device_type, artifact, inputs, number, repeat, min_repeat_ms)
    finally:
        # The server serves one session at a time and the tracker hands the
        # device out again only once the session's last remote object is gone.
        del session
        gc.collect()


def _run_in_session(
    session: Any, device_type: str, artifact: str | Path, inputs: list[np.ndarray], number: int, repeat: int, min_repeat_ms: int
) -> BoardRun:
    import tvm
    from tvm import relax

    with remote_module(session, artifact, unique_remote_name("edgetune-model")) as rt_mod:
        device = session.device(device_type, 0)
        vm = relax.VirtualMachine(rt_mod, device)
        args = [tvm.runtime.tensor(x, device=device) for x in inputs]
        vm.set_input("main", *args)
        vm.invoke_stateful("main")
        outputs = _to_numpy(vm.get_outputs("main"))
        timer = vm.time_evaluator("invoke_stateful", device, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
        seconds = [float(r) for r in timer("main").results]
        return BoardRun(outputs=outputs, latency=LatencyStats.from_seconds(seconds))


def _to_numpy(value: Any) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    out: list[np.ndarray] = []
    for item in value:
        out.extend(_to_numpy(item))
    return out


def compare_outputs(reference: list[np.ndarray], candidate: list[np.ndarray], rtol: float = 1e-3, atol: float = 1e-4) -> tuple[bool, float]:
    """Whether two output lists agree within tolerance, and the largest absolute difference.

    ``atol`` is scaled by the magnitude of the reference so that models with
    large activations are not held to an absolute 1e-4.
    """
    if len(reference) != len(candidate):
        return False, float("inf")
    worst = 0.0
    ok = True
    for ref, got in zip(reference, candidate):
        if ref.shape != got.shape:
            return False, float("inf")
        diff = float(np.max(np.abs(ref.astype(np.float64) - got.astype(np.float64)))) if ref.size else 0.0
        worst = max(worst, diff)
        scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
        ok = ok and bool(np.allclose(got, ref, rtol=rtol, atol=atol * scale))
    return ok, worst
