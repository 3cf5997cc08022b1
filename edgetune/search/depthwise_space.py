"""The search space of depthwise convolutions on CPUs: the channel lanes stay one vector, innermost.

A depthwise convolution in ``NCHW{b}c`` (:func:`edgetune.tasks.blocked_computes.depthwise_conv2d_nchwc`)
has no reduction over channels: each lane of the block is its own channel, so the lanes are the only
axis that vectorizes without a shuffle. MetaSchedule's ``MultiLevelTiling`` splits the lane axis like any
other spatial axis, into four sampled factors, and the vectorizer then takes whatever innermost loops the
tiles leave. On MnasNet's depthwise tasks the best of 8 measured candidates (adapted from the library's
other shapes) put all 16 lanes in the outermost tile: a scalar kernel, 37-71 GFLOPS where the same
convolution written with its lanes innermost runs at 150-220.

:class:`DepthwiseTiling` replaces ``MultiLevelTiling`` for these blocks (every other rule and
postprocessor is the LLVM default). It keeps the lanes whole and innermost, tiles the output's rows and
columns and the channel blocks into an outer part (parallel) and an inner register tile, and puts the
kernel's taps between them::

    n, chunks/outer, rows/outer, cols/outer, chunks/inner, taps y, taps x, rows/inner, cols/inner, lanes

so every weight vector loaded is used on ``rows/inner x cols/inner`` outputs held in registers. The three
splits are sampled (``SamplePerfectTile``), so the evolutionary search and its tile mutator still choose the
tile sizes; the fused epilogue (bias, activation) is computed at the outer columns loop, and the padded
input at one of two places (:data:`PAD_AT`), one sketch each. The traces are ordinary MetaSchedule
instructions: they replay, transfer and ship in the library as any other.

Random candidates of the two spaces on MnasNet 1.0's depthwise shapes (24 each, timed as the runner
times them, cache flushed): best 31-62 us against 92-114 for MultiLevelTiling's, median 47-256 against
269-493.

int8 depthwise convolutions (:mod:`edgetune.tasks.int8`: ``NHWC``, the zero-point padding inside, int32
sums; no dot-product instruction takes them) are the same case with the channels innermost: they are split
into vectors of int32 sums (:func:`tile_depthwise_int8`) under the same register tile. On MobileNetV2's
int8 depthwise shapes: best 9-79 us against 20-291, median 12-141 against 81-740. Side by side in the
product: RESULTS ``depthwise_space``.
"""

from __future__ import annotations

from typing import Any

#: the block name of the blocked depthwise compute (:func:`edgetune.tasks.blocked_computes.depthwise_conv2d_nchwc`)
DEPTHWISE_BLOCK = "depthwise_conv2d_NCHWc"
#: the block name of the int8 depthwise compute, NHWC with its zero-point padding inside
#: (:func:`edgetune.tasks.int8._depthwise_compute`): channels innermost, no dot-product instruction takes it
DEPTHWISE_INT8_BLOCK = "depthwise_conv2d_int8"
#: largest inner tile sampled for the output's rows, columns and the channel blocks: rows x cols accumulators
#: of one vector each fit the 16-32 vector registers of x86 and ARM only in small tiles
MAX_INNER = {"rows": 4, "cols": 4, "chunks": 2}


def is_depthwise_workload(mod: Any) -> bool:
    """Whether ``mod`` (a task's IRModule) computes a depthwise convolution this space tiles: a blocked one of
    floats (``NCHW{b}c``) or an int8 one (``NHWC``, int32 sums)."""
    return is_depthwise_nchwc_workload(mod) or any(
        len(block.iter_vars) == 6 for block in _blocks_named(mod, DEPTHWISE_INT8_BLOCK))


def is_depthwise_nchwc_workload(mod: Any) -> bool:
    """Whether ``mod`` (a task's IRModule) computes a blocked depthwise convolution of floats."""
    return any(len(block.iter_vars) == 7 and all(_dtype(region).startswith("float") for region in block.writes)
               for block in _blocks_named(mod, DEPTHWISE_BLOCK))


def _blocks_named(mod: Any, name: str) -> list[Any]:
    """The blocks called ``name`` in ``mod``'s PrimFuncs (at most one each)."""
    import tvm
    from tvm import s_tir, tirx

    found = []
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        sch = s_tir.Schedule(tvm.IRModule({gvar.name_hint: func}))
        try:
            found.append(sch.get(sch.get_sblock(name, gvar.name_hint)))
        except Exception:  # noqa: BLE001 - TVM raises its own error for a block that is not there
            continue
    return found


def _dtype(region: Any) -> str:
    source = getattr(region, "buffer", None) or region.source
    return str(source.dtype)


#: where a sketch computes the zero-padded input: per band of output rows (the halo computed once per band),
#: or per kernel tap (a register tile's worth, recomputed per tap, cheap where the tile is small). Measured on
#: MnasNet 1.0's depthwise shapes (24 random candidates each): per band gave the best median candidate, per tap
#: the best candidate of 3 of 4 shapes; MetaSchedule's random compute location (inline included) was worse in
#: both, inline by 10-30x.
PAD_AT = ("rows", "tap")


def tile_depthwise(sch: Any, block: Any, pad_at: str = "rows") -> Any:
    """Tile ``block`` (a blocked depthwise convolution in ``sch``) as :class:`DepthwiseTiling` does; ``sch``.

    ``pad_at``: one of :data:`PAD_AT`, where the padded input (a producer block ``data_pad``) is computed.
    """
    if pad_at not in PAD_AT:
        raise ValueError(f"pad_at must be one of {', '.join(PAD_AT)}, got {pad_at!r} instead")
    n, chunks, rows, cols, lanes, tap_y, tap_x = sch.get_loops(block)
    chunks_o, chunks_i = sch.split(chunks, sch.sample_perfect_tile(chunks, n=2, max_innermost_factor=MAX_INNER["chunks"]))
    rows_o, rows_i = sch.split(rows, sch.sample_perfect_tile(rows, n=2, max_innermost_factor=MAX_INNER["rows"]))
    cols_o, cols_i = sch.split(cols, sch.sample_perfect_tile(cols, n=2, max_innermost_factor=MAX_INNER["cols"]))
    sch.reorder(n, chunks_o, rows_o, cols_o, chunks_i, tap_y, tap_x, rows_i, cols_i, lanes)
    for producer in sch.get_producers(block):
        if sch.get(producer).name_hint == "data_pad":
            sch.compute_at(producer, rows_o if pad_at == "rows" else tap_x, preserve_unit_loops=True)
    consumers = sch.get_consumers(block)
    if len(consumers) == 1:  # the fused epilogue, elementwise: written while its tile is in the cache
        sch.reverse_compute_at(consumers[0], cols_o, preserve_unit_loops=True)
    return sch


def tile_depthwise_int8(sch: Any, block: Any, lanes: int) -> Any:
    """Tile ``block`` (an int8 depthwise convolution, NHWC, in ``sch``) with its channels innermost in vectors of
    ``lanes`` int32 sums (where they divide the channels; else the channels' own sampled tile), the same register
    tile of rows x columns as :func:`tile_depthwise` and the taps around it; ``sch``."""
    n, rows, cols, channels, tap_y, tap_x = sch.get_loops(block)
    extent = int(sch.get(channels).extent)
    if extent % lanes == 0:
        chunks, vector = sch.split(channels, [None, lanes])
    else:  # no whole vectors: the tile is the search's (MultiLevelTiling's innermost split)
        chunks, vector = sch.split(channels, sch.sample_perfect_tile(channels, n=2, max_innermost_factor=64))
    chunks_o, chunks_i = sch.split(chunks, sch.sample_perfect_tile(chunks, n=2, max_innermost_factor=MAX_INNER["chunks"]))
    rows_o, rows_i = sch.split(rows, sch.sample_perfect_tile(rows, n=2, max_innermost_factor=MAX_INNER["rows"]))
    cols_o, cols_i = sch.split(cols, sch.sample_perfect_tile(cols, n=2, max_innermost_factor=MAX_INNER["cols"]))
    sch.reorder(n, chunks_o, rows_o, cols_o, chunks_i, tap_y, tap_x, rows_i, cols_i, vector)
    consumers = sch.get_consumers(block)
    if len(consumers) == 1:  # the fused requantization, elementwise
        sch.reverse_compute_at(consumers[0], cols_o, preserve_unit_loops=True)
    return sch


def _make_rule_class() -> type:
    """:class:`DepthwiseTiling`'s class, defined on first use: MetaSchedule's ``derived_object`` needs TVM loaded."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule

    @derived_object
    class _DepthwiseTiling(PyScheduleRule):
        def __init__(self, int32_lanes: int) -> None:
            super().__init__()
            self.int32_lanes = int32_lanes

        def _initialize_with_tune_context(self, context: Any) -> None:
            pass

        def apply(self, sch: Any, block: Any) -> list[Any]:
            name, loops = sch.get(block).name_hint, len(sch.get_loops(block))
            if name == DEPTHWISE_BLOCK and loops == 7:
                return [tile_depthwise(sch.copy(), block, pad_at) for pad_at in PAD_AT]
            if name == DEPTHWISE_INT8_BLOCK and loops == 6:
                return [tile_depthwise_int8(sch, block, self.int32_lanes)]
            return [sch]

        def clone(self) -> Any:
            return DepthwiseTiling(self.int32_lanes)

    return _DepthwiseTiling


_RULE_CLASS: list[type] = []


def DepthwiseTiling(int32_lanes: int = 16) -> Any:  # noqa: N802 - a schedule rule constructor, named like MetaSchedule's
    """The schedule rule that tiles depthwise convolutions with their lanes whole and innermost; ``int32_lanes``:
    the vector an int8 depthwise convolution's channels are tiled by (its sums are int32)."""
    if not _RULE_CLASS:
        _RULE_CLASS.append(_make_rule_class())
    return _RULE_CLASS[0](int32_lanes)


def depthwise_space(int32_lanes: int = 16) -> Any:
    """A ``PostOrderApply`` space for LLVM targets: the default rules with :class:`DepthwiseTiling` in place of
    ``MultiLevelTiling`` (which no block of a depthwise task needs besides the convolution itself)."""
    from tvm.s_tir import meta_schedule as ms

    rules = [DepthwiseTiling(int32_lanes) if type(rule).__name__ == "MultiLevelTiling" else rule
             for rule in ms.ScheduleRule.create("llvm")]
    return ms.space_generator.PostOrderApply(
        sch_rules=rules, postprocs=ms.Postproc.create("llvm"), mutator_probs=ms.Mutator.create("llvm"))
