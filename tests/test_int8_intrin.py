"""int8 kernels tensorized with the target's dot-product instruction: VNNI here, sdot and NEON cross-compiled.

A canonical-form int8 model (tests/int8_models.py: pad, int8 conv2d to int32, bias, requantize; twice; then a
dense layer) goes through the graph pass (edgetune.tasks.int8) and task extraction; each int8 task is scheduled
from edgetune's int8 space (the first design space that builds), and the whole model is compiled from those
records as a tuned build is. The built code must contain the instruction, and on this host the outputs must
equal numpy's integer arithmetic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tvm

from edgetune.profile import load_profile
from int8_models import INPUT_SHAPE, make_layers, make_model, reference

# this CPU as the host profile resolves it: LLVM's name for the model, less the instructions this machine does not
# offer (a VM that masks AVX-512 keeps LLVM's "znver4" with "-avx512f")
HOST = {**load_profile("host").target, "num-cores": 2}
A76 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a76", "mattr": ["+neon", "+dotprod"], "num-cores": 4}
A72 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72", "mattr": ["+neon"], "num-cores": 4}


def _host_has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(flag in line.split() for line in f if line.startswith("flags"))
    except OSError:
        return False


def scheduled_build(target_json: dict, zero_point: int = -3) -> tuple[object, list[str], str]:
    """The model compiled with each int8 task scheduled from edgetune's int8 space; its int8 tasks' names and asm."""
    from tvm.s_tir import meta_schedule as ms

    from edgetune.search.int8_space import int8_space, is_int8_workload
    from edgetune.tasks.int8 import int8_kernels

    target = tvm.target.Target(target_json)
    mod, detail = int8_kernels(make_model(make_layers(), zero_point), target)
    assert detail.startswith("3 int8 kernels"), detail
    database = ms.database.MemoryDatabase()
    names, asm = [], []
    for task in ms.relax_integration.extract_tasks(mod, target):
        func_mod = task.dispatched[0]
        if not is_int8_workload(func_mod):
            continue
        names.append(task.task_name)
        context = ms.TuneContext(mod=func_mod, target=target, space_generator=int8_space(target),
                                 search_strategy="evolutionary", task_name=task.task_name, rand_state=1)
        for sch in context.space_generator.generate_design_space(context.mod):
            assert "meta_schedule.auto_tensorize" in str(sch.trace), "the space did not map the intrinsic"
            if not all(p.apply(sch) for p in context.space_generator.postprocs):
                continue
            try:
                built = tvm.compile(sch.mod, target=target)
            except Exception:  # noqa: BLE001 - a candidate that does not build is skipped, as a tune does
                continue
            asm.append(built.mod.inspect_source("asm"))
            workload = database.commit_workload(func_mod)
            database.commit_tuning_record(ms.database.TuningRecord(
                sch.trace, workload, [1e-3], target, ms.arg_info.ArgInfo.from_prim_func(func_mod["main"])))
            break
        else:
            pytest.fail(f"no candidate of {task.task_name} built")
    executable = ms.relax_integration.compile_relax(database, mod, target, params=None)
    return executable, names, "\n".join(asm)


def test_the_instruction_is_read_from_the_targets_features() -> None:
    from edgetune.common.int8_isa import int8_instruction

    assert int8_instruction(tvm.target.Target(A76)) == "sdot"
    assert int8_instruction(tvm.target.Target(A72)) == "neon"
    assert int8_instruction(tvm.target.Target({"kind": "llvm", "mcpu": "cascadelake"})) == "avx512-vnni"
    assert int8_instruction(tvm.target.Target({"kind": "llvm", "mcpu": "alderlake"})) == "avx-vnni"
    assert int8_instruction(tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})) == "none"  # AVX-512, no VNNI
    host = int8_instruction(tvm.target.Target(HOST))
    assert (host == "avx512-vnni") == (_host_has("avx512_vnni") and _host_has("avx512bw"))


def test_the_int8_space_applies_to_int8_tasks_only() -> None:
    from edgetune.search.int8_space import int8_space, is_int8_workload
    from edgetune.tasks.models import prepare_for_tuning

    target = tvm.target.Target(A76)
    fused = prepare_for_tuning(make_model(make_layers(), 0), target)
    int8 = [gv.name_hint for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
            and is_int8_workload(tvm.IRModule({"main": f}))]
    assert any("conv2d" in name for name in int8) and any("matmul" in name for name in int8), int8
    assert not any(name.startswith("fused_pad") or "reshape" in name for name in int8), int8
    assert int8_space(tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})) is None


@pytest.mark.skipif(not (_host_has("avx512_vnni") and _host_has("avx512bw")), reason="this host has no AVX-512 VNNI")
def test_vnni_schedules_tensorize_and_the_model_matches_numpy() -> None:
    executable, names, asm = scheduled_build(HOST)
    assert len(names) == 3, names
    assert "vpdpbusd" in asm
    vm = tvm.relax.VirtualMachine(executable, tvm.cpu())
    rng = np.random.default_rng(1)
    for zero_point in (-3,):
        x = rng.integers(-128, 128, INPUT_SHAPE).astype("int8")
        out = vm["main"](tvm.runtime.tensor(x)).numpy()
        expected = reference(x, make_layers(), zero_point)
        assert out.dtype == np.int8 and out.shape == expected.shape
        np.testing.assert_array_equal(out, expected)
        assert len(np.unique(out)) > 10  # not saturated: the comparison says something


def test_sdot_schedules_tensorize_for_a_dotprod_profile() -> None:
    _executable, names, asm = scheduled_build(A76)
    assert len(names) == 3
    assert "sdot" in asm


def test_a_neon_profile_uses_neon_integer_ops_and_no_sdot() -> None:
    _executable, _names, asm = scheduled_build(A72)
    assert "sdot" not in asm
    assert "smull" in asm and ("saddlp" in asm or "sadalp" in asm or "addp" in asm)


def test_the_pipelines_contexts_get_the_int8_space_and_keep_their_task_logs(tmp_path) -> None:
    """What ``make_contexts`` does: MetaSchedule's contexts, then :func:`with_task_spaces`. Only int8 tasks get the
    intrinsic's space, each still logging to its own file under the run's build logs (a TuneContext keeps no
    logger: it is found again by the name MetaSchedule gave it)."""
    import logging

    from tvm.s_tir import meta_schedule as ms

    from edgetune.builder.intrinsics import load_tensor_intrinsics
    from edgetune.search.int8_space import is_int8_workload
    from edgetune.search.spaces import task_logger, with_task_spaces
    from edgetune.tasks.int8 import int8_kernels

    target = tvm.target.Target(A76)
    load_tensor_intrinsics(target)  # as the pipeline does: not all of TVM's families (40 s)
    mod, _detail = int8_kernels(make_model(make_layers(), 0), target)
    extracted = list(ms.relax_integration.extract_tasks(mod, target))
    from edgetune.tuning.session import unnamed_handlers_aside

    unnamed = logging.NullHandler()  # as pytest's capture in a full run: a handler without a name
    logging.getLogger("tvm.s_tir.meta_schedule").addHandler(unnamed)
    try:
        with unnamed_handlers_aside():  # as make_contexts does
            contexts, _weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
                extracted, work_dir=str(tmp_path), strategy="evolutionary", num_threads=1, seed=1)
    finally:
        logging.getLogger("tvm.s_tir.meta_schedule").removeHandler(unnamed)
    swapped = with_task_spaces(list(contexts), "evolutionary")
    int8 = [i for i, c in enumerate(contexts) if is_int8_workload(c.mod)]
    assert len(int8) == 3 and len(swapped) == len(contexts)
    for i, (before, after) in enumerate(zip(contexts, swapped)):
        assert (after is before) == (i not in int8)
        assert str(after.task_name) == str(before.task_name)
    rules = [type(r).__name__ for r in swapped[int8[0]].space_generator.sch_rules]
    assert "MultiLevelTilingWithIntrin" in rules, rules
    index = int8[0]
    logger = task_logger(index, len(contexts), str(contexts[index].task_name))
    files = [Path(h.baseFilename) for h in logger.handlers if isinstance(h, logging.FileHandler)]
    assert files and files[0].parent == tmp_path / "logs" and files[0].name.endswith(f"_{contexts[index].task_name}.log")
    assert task_logger(index, len(contexts), "no_such_task") is None  # MetaSchedule's default logger then
