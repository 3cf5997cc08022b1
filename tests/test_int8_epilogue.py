"""The requantize epilogue fused into its int8 kernel (edgetune/tasks/int8_epilogue.py, issue 54).

The int8 kernels write a blocked output; the requantization after them used to read it through the unblocking
reshape, which FuseOps does not fuse past: each epilogue was a kernel of its own (half of MobileNetV2 int8's time).
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from int8_models import INPUT_SHAPE, make_layers, make_model, reference
from test_int8_intrin import A76, HOST, _host_has

VNNI = {"kind": "llvm", "mcpu": "cascadelake", "num-cores": 2}


def _ops_reading(mod: tvm.IRModule, producers: set[str]) -> list[str]:
    """The ops of ``main`` that read a variable bound to one of ``producers``."""
    func = mod["main"]
    bound = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    readers = []
    for value in bound.values():
        if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
            continue
        for arg in value.args:
            source = bound.get(arg) if isinstance(arg, relax.Var) else None
            if isinstance(source, relax.Call) and isinstance(source.op, tvm.ir.Op) and source.op.name in producers:
                readers.append(value.op.name)
    return readers


@pytest.mark.parametrize("target", [VNNI, A76], ids=["vnni", "sdot"])
def test_the_epilogue_runs_on_the_blocked_output_and_only_the_int8_result_is_unblocked(target) -> None:
    from edgetune.tasks.int8 import int8_kernels

    mod, detail = int8_kernels(make_model(make_layers(), -3), tvm.target.Target(target))
    assert detail.startswith("3 int8 kernels") and "epilogues fused in" in detail, detail
    # before: reshape/slice/permute -> add, cast, multiply, round, add, clip, cast; now nothing elementwise reads them
    readers = _ops_reading(mod, {"relax.reshape", "relax.strided_slice", "relax.permute_dims"})
    assert not {"relax.multiply", "relax.round", "relax.clip"} & set(readers), readers
    casts = [b.value for block in mod["main"].body.blocks for b in block.bindings
             if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", "") == "relax.reshape"]
    assert casts and all(str(c.args[0].ty.dtype) in ("int8", "uint8") for c in casts), casts  # int8 unblocked


def test_each_int8_kernel_is_one_task_with_its_requantization() -> None:
    from edgetune.search.int8_space import is_int8_workload
    from edgetune.tasks.models import prepare_for_tuning

    fused = prepare_for_tuning(make_model(make_layers(), 0), tvm.target.Target(A76))
    funcs = {gv.name_hint: f for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    int8 = [name for name, f in funcs.items() if is_int8_workload(tvm.IRModule({"main": f}))]
    assert len(int8) == 3, sorted(funcs)
    assert all("round" in name and "clip" in name for name in int8), int8  # the epilogue is in the kernel
    assert not [name for name in funcs if "round" in name and name not in int8], sorted(funcs)  # and nowhere else


@pytest.mark.skipif(not (_host_has("avx512_vnni") and _host_has("avx512bw")), reason="this host has no AVX-512 VNNI")
def test_the_fused_model_still_computes_numpys_integers_untuned() -> None:
    from edgetune.tasks.int8 import int8_kernels

    mod, _detail = int8_kernels(make_model(make_layers(), -3), tvm.target.Target(HOST))
    executable = tvm.compile(mod, target=tvm.target.Target(HOST))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    x = np.random.default_rng(2).integers(-128, 128, INPUT_SHAPE).astype("int8")
    out = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(out, reference(x, make_layers(), -3))
