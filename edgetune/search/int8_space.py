"""The search space of int8 kernels: tiles that map onto the target's dot-product instruction.

An int8 convolution or dense layer (``int8 x int8 -> int32``, the integer
operators of a quantized model, :mod:`edgetune.tasks.int8`) is searched with
MetaSchedule's ``MultiLevelTilingWithIntrin`` for the instruction of the
target (:mod:`edgetune.common.int8_isa`): its innermost tile becomes one call
of the intrinsic, and ``RewriteTensorize`` replaces it after the search. Every
other rule and postprocessor is the LLVM default, so the epilogue (requantize)
fused into the kernel is scheduled as before, and a workload the intrinsic
cannot map (channels not a multiple of 4, a float kernel) is tiled as usual.

Two things TVM 0.27 does not do by itself, done here:

* ``RewriteParallelVectorizeUnroll`` vectorizes the innermost loop outside a
  tensorized block as it does any other; the intrinsic's body then cannot be
  vectorized again and the candidate fails to build ("Cannot broadcast lanes=4
  ... to 16": every candidate on ARM). :class:`UnrollAroundTensorized` unrolls
  those loops instead, before the block is tensorized.
* its VNNI intrinsic does not build with its own LLVM: edgetune registers its
  own (:data:`edgetune.builder.intrinsics.VNNI_INTRINSICS`).

The weight tile the intrinsic reads (16, 8 or 4 output channels x 4 input
channels) must be contiguous, and TVM 0.27's tensorize does not check it (a
``HWOI`` weight with more than 4 input channels tensorizes and computes wrong
sums; ``RewriteLayout`` does not rewrite a tensorized block's weight): the graph
stores int8 weights packed in exactly those tiles (:mod:`edgetune.tasks.int8`).
"""

from __future__ import annotations

from typing import Any

from ..common.int8_isa import int8_instruction

#: the tensor intrinsic each instruction tensorizes with; "none" has none
INTRINSIC_BY_INSTRUCTION: dict[str, str] = {
    "avx512-vnni": "edgetune_dot_16x4_vnni",
    "avx-vnni": "edgetune_dot_8x4_avxvnni",
    "sdot": "dot_4x4_i8i8s32_sdot",
    "neon": "dot_4x4_i8i8s32_neon",
}
#: the annotation MultiLevelTilingWithIntrin leaves on a block that RewriteTensorize is to tensorize
AUTO_TENSORIZE = "meta_schedule.auto_tensorize"


def int8_intrinsic(target: Any) -> str | None:
    """The tensor intrinsic ``target``'s int8 kernels are tensorized with, or None (plain int8 schedules)."""
    return INTRINSIC_BY_INSTRUCTION.get(int8_instruction(target))


def is_int8_workload(mod: Any) -> bool:
    """Whether ``mod`` (a task's IRModule) has an integer reduction: int8/uint8 operands summed into int32."""
    from tvm import s_tir, tirx

    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        sch = s_tir.Schedule(tvm_module(gvar.name_hint, func))
        for block in _blocks(sch, gvar.name_hint):
            node = sch.get(block)
            if not any(int(v.iter_type) == 2 for v in node.iter_vars):  # 2: a reduction axis
                continue
            writes = {_dtype(r) for r in node.writes}
            reads = {_dtype(r) for r in node.reads}
            if writes == {"int32"} and reads & {"int8", "uint8"}:
                return True
    return False


def _dtype(region: Any) -> str:
    """The element type of a block's read or write region."""
    source = getattr(region, "buffer", None) or region.source
    return str(source.dtype)


def tvm_module(name: str, func: Any) -> Any:
    import tvm

    return tvm.IRModule({name: func})


def _blocks(sch: Any, func_name: str = "main") -> list[Any]:
    """Every block of ``sch``'s function, outer before inner."""
    found = []
    pending = list(sch.get_child_blocks(sch.get_sblock("root", func_name)))
    while pending:
        block = pending.pop(0)
        found.append(block)
        pending += list(sch.get_child_blocks(block))
    return found


def int8_space(target: Any) -> Any | None:
    """A ``PostOrderApply`` space that tensorizes int8 reductions with ``target``'s intrinsic, or None (no intrinsic)."""
    intrinsic = int8_intrinsic(target)
    if intrinsic is None:
        return None
    from tvm.s_tir import meta_schedule as ms

    from ..builder.intrinsics import load_tensor_intrinsics

    load_tensor_intrinsics(target)
    rules = list(ms.ScheduleRule.create("llvm"))
    tiled = next(i for i, rule in enumerate(rules) if type(rule).__name__ == "MultiLevelTiling")
    rules.insert(tiled, ms.schedule_rule.MultiLevelTilingWithIntrin(
        intrinsic,
        structure="SSRSRS",
        tile_binds=None,
        max_innermost_factor=64,
        vector_load_lens=None,
        reuse_read=None,
        reuse_write=ms.schedule_rule.ReuseType(req="may", levels=[1, 2], scope="global"),
    ))
    postprocs = [
        ms.postproc.DisallowDynamicLoop(),
        ms.postproc.RewriteParallelVectorizeUnroll(),
        UnrollAroundTensorized(),
        ms.postproc.RewriteReductionBlock(),
        ms.postproc.RewriteTensorize(vectorize_init_loop=True),
        # no RewriteLayout: the graph already stores the weights in the tiles the intrinsic reads, and TVM 0.27's
        # tensorize does not check that a tile it reads is contiguous (a rewritten layout could make it not)
    ]
    return ms.space_generator.PostOrderApply(
        sch_rules=rules, postprocs=postprocs, mutator_probs=ms.Mutator.create("llvm")
    )


def _unroll_around_tensorized(sch: Any) -> bool:
    """Unroll every vectorized loop that encloses a block to be tensorized (see the module docstring)."""
    from tvm import tirx

    for block in _blocks(sch):
        if AUTO_TENSORIZE in sch.get(block).annotations:
            for loop in sch.get_loops(block):
                if sch.get(loop).kind == tirx.ForKind.VECTORIZED:
                    sch.unroll(loop)
    return True


def _make_postproc_class() -> type:
    """:class:`UnrollAroundTensorized`, defined on first use: MetaSchedule's ``derived_object`` needs TVM loaded."""
    from tvm.s_tir.meta_schedule.postproc import PyPostproc
    from tvm.ir.utils import derived_object

    @derived_object
    class _UnrollAroundTensorized(PyPostproc):
        def _initialize_with_tune_context(self, context: Any) -> None:
            pass

        def apply(self, sch: Any) -> bool:
            return _unroll_around_tensorized(sch)

        def clone(self) -> Any:
            return UnrollAroundTensorized()

    return _UnrollAroundTensorized


_POSTPROC_CLASS: list[type] = []


def UnrollAroundTensorized() -> Any:  # noqa: N802 - a postproc constructor, named like MetaSchedule's
    """The postproc that unrolls the vectorized loops around a block to be tensorized."""
    if not _POSTPROC_CLASS:
        _POSTPROC_CLASS.append(_make_postproc_class())
    return _POSTPROC_CLASS[0]()
