"""3x3 stride-1 convolutions in the Winograd form F(m x m, 3 x 3), on blocked (``NCHW{b}c``) tensors.

A 3x3 convolution computed by tiles of ``m x m`` outputs needs ``(m + 2)^2`` multiplies per tile, input channel and
output channel, against ``9 m^2`` directly: F(4x4, 3x3) does 36 where the direct form does 144, a quarter of the
arithmetic in exchange for transforming each input tile and each output tile (Lavin and Gray, 2015). What is left
is a batch of ``(m + 2)^2`` matrix products, which MetaSchedule tiles like any other, between two small transforms.

The compute is TOPI's NHWC Winograd (``topi.nn.conv2d_winograd_nhwc``) with its blocks, names and schedule rules
(``conv2d_nhwc_winograd_data_pack`` and ``..._inverse``, MetaSchedule's CPU rules for them), reading and writing the
blocked layouts of the rest of the graph, so no layout transform surrounds it. The weights are constants: they are
transformed once, here, on the host (``U = G g G^T`` per input and output channel), and the kernel reads them as they
are. The transform's interpolation points are TVM's (``winograd_util``: Barabasz et al.'s, chosen for accuracy); in
float32 the outputs differ from the direct convolution's by rounding only (about 1e-6 relative at F(4x4, 3x3)).

:func:`~edgetune.tasks.blocking.lower_blocked` lowers a convolution this way where :func:`winograd_applies` says so
and ``tuning.winograd`` asks. ``on`` takes every such convolution; ``auto`` (the default) only the shapes that the
schedule library holds a Winograd schedule of which ran at most :data:`WINOGRAD_MAX_SHARE` of the latency of the
library's best direct schedule of the same convolution (:func:`winograd_wins`). From the untuned code, 8 trials per
task beat the direct form on ResNet-18's 40x40 convolutions in one run and lost in another (RESULTS ``winograd``):
the form pays where a tuned schedule of it is there to start from, and only then.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

import numpy as np
from tvm import te, topi

#: output tile (m of F(m x m, 3 x 3)); TVM's CPU Winograd uses 4, whose 6x6 tiles keep the transforms in registers
TILE = 4
#: fewer channels than this on either side and the transforms cost more than the multiplies they save
MIN_CHANNELS = 16
#: fewer output tiles than this and the batched products are bound by their weights, which the transform makes 4x
#: larger ((m + 2)^2 / 9): each is used once per tile. On ResNet-18 at 160 (a Zen 4, 8 trials per task) the form beat
#: the direct convolution at 40x40 outputs (100 tiles) and lost 2-4x at 10x10 and 5x5 (9 and 4 tiles)
MIN_TILES = 36
#: ``auto`` takes the Winograd form for a convolution shape where the library's best Winograd schedule of it ran at
#: most this share of the latency of its best direct schedule: a margin over the two records' noise, so that the
#: form replaces the direct one only where the library measured it clearly faster
WINOGRAD_MAX_SHARE = 0.9
#: the tasks of the form are named after this (``primfunc_name_hint``); its blocks, after TOPI's
WINOGRAD_FUNC = "conv2d_winograd_NCHWc"
_KERNEL_LAYOUT = re.compile(r"OIHW(\d+)i(\d+)o")
_DATA_LAYOUT = re.compile(r"NCHW(\d+)c")


def transform_matrices(tile: int = TILE, kernel: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The A (output), B (input) and G (weight) transform matrices of F(tile, kernel), in float64, as TVM computes them."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    return _cook_toom_convolution(_interpolation_points(tile + kernel - 2), tile, kernel)


def winograd_applies(data_layout: str, kernel_layout: str, out_layout: str, kernel_shape: Any, strides: Any,
                     dilation: Any, groups: int, dtype: str, out_size: Any) -> bool:
    """Whether a blocked float32 convolution is a 3x3, stride-1, undilated, ungrouped one with enough channels and
    enough output tiles (``out_size``: batch, height and width of its output)."""
    blocks = _KERNEL_LAYOUT.fullmatch(kernel_layout)
    if (not blocks or not _DATA_LAYOUT.fullmatch(data_layout) or not _DATA_LAYOUT.fullmatch(out_layout or data_layout)
            or dtype != "float32" or int(groups) != 1):
        return False
    out_chunks, in_chunks, kernel_h, kernel_w, in_lanes, out_lanes = (int(d) for d in kernel_shape)
    batch, out_h, out_w = (int(d) for d in out_size)
    tiles = batch * -(-out_h // TILE) * -(-out_w // TILE)
    return ((kernel_h, kernel_w) == (3, 3) and all(int(s) == 1 for s in strides) and all(int(d) == 1 for d in dilation)
            and in_chunks * in_lanes >= MIN_CHANNELS and out_chunks * out_lanes >= MIN_CHANNELS and tiles >= MIN_TILES)


def transform_weights(kernel: np.ndarray, tile: int = TILE) -> np.ndarray:
    """Blocked 3x3 weights ``(O/o, I/i, 3, 3, i, o)`` as ``U[eps, nu, ci, co] = (G g G^T)[eps, nu]``, float32."""
    out_chunks, in_chunks, kernel_h, kernel_w, in_lanes, out_lanes = kernel.shape
    plain = kernel.astype(np.float64).transpose(0, 5, 1, 4, 2, 3).reshape(
        out_chunks * out_lanes, in_chunks * in_lanes, kernel_h, kernel_w)  # (co, ci, kh, kw)
    _a, _b, g = transform_matrices(tile, kernel_h)
    return np.einsum("ek,oikl,nl->enio", g, plain, g, optimize=True).astype(np.float32)


def conv2d_winograd_nchwc(data: te.Tensor, weights: te.Tensor, padding: Any, out_lanes: int,
                          tile: int = TILE) -> te.Tensor:
    """``data`` (``NCHW{i}c``) convolved with transformed ``weights`` (``(a, a, CI, CO)``), out in ``NCHW{out_lanes}c``."""
    from tvm.topi.utils import const_matrix

    batch, in_chunks, height, width, in_lanes = (int(d) for d in data.shape)
    alpha, _alpha, in_channels, out_channels = (int(d) for d in weights.shape)
    top, left, bottom, right = (int(p) for p in padding)
    out_h, out_w = height + top + bottom - 2, width + left + right - 2
    tiles_h, tiles_w = -(-out_h // tile), -(-out_w // tile)
    tiles = batch * tiles_h * tiles_w
    a_np, b_np, _g = transform_matrices(tile, alpha - tile + 1)
    a_matrix, b_matrix = const_matrix(a_np.astype("float32"), "A"), const_matrix(b_np.astype("float32"), "B")
    # padded so that every tile, the last ones included, reads alpha rows and columns
    data_pad = topi.nn.pad(data, [0, 0, top, left, 0],
                           [0, 0, bottom + tiles_h * tile - out_h, right + tiles_w * tile - out_w, 0],
                           name="data_pad", attrs={"schedule_rule": "None"})
    input_tile = te.compute(
        (alpha, alpha, tiles, in_channels),
        lambda eps, nu, p, ci: data_pad[
            p // (tiles_h * tiles_w), ci // in_lanes, (p // tiles_w) % tiles_h * tile + eps, p % tiles_w * tile + nu,
            ci % in_lanes],
        name="input_tile", attrs={"schedule_rule": "None"},
    )
    r_a, r_b = te.reduce_axis((0, alpha), "r_a"), te.reduce_axis((0, alpha), "r_b")
    data_pack = te.compute(
        (alpha, alpha, tiles, in_channels),
        lambda eps, nu, p, ci: te.sum(input_tile[r_a, r_b, p, ci] * b_matrix[r_a, eps] * b_matrix[r_b, nu],
                                      axis=[r_a, r_b]),
        name="data_pack", attrs={"schedule_rule": "conv2d_nhwc_winograd_data_pack"},
    )
    ci = te.reduce_axis((0, in_channels), name="ci")
    bgemm = te.compute(
        (alpha, alpha, tiles, out_channels),
        lambda eps, nu, p, co: te.sum(data_pack[eps, nu, p, ci] * weights[eps, nu, ci, co], axis=[ci]),
        name="bgemm",
    )
    r_a, r_b = te.reduce_axis((0, alpha), "r_a"), te.reduce_axis((0, alpha), "r_b")
    inverse = te.compute(
        (tile, tile, tiles, out_channels),
        lambda vh, vw, p, co: te.sum(bgemm[r_a, r_b, p, co] * a_matrix[r_a, vh] * a_matrix[r_b, vw], axis=[r_a, r_b]),
        name="inverse", attrs={"schedule_rule": "conv2d_nhwc_winograd_inverse"},
    )
    return te.compute(
        (batch, out_channels // out_lanes, out_h, out_w, out_lanes),
        lambda n, c, h, w, v: inverse[h % tile, w % tile, n * tiles_h * tiles_w + h // tile * tiles_w + w // tile,
                                      c * out_lanes + v],
        name="conv2d_winograd_NCHWc",
    )


def shape_key(data_shape: Any, out_shape: Any) -> str:
    """A blocked 3x3 stride-1 convolution's shape as ``auto`` names it: its input and output tensors
    (``NCHW{b}c``), ``1x4x56x56x16>1x4x56x56x16``; the channels are in them, and the padding in their sizes."""
    return "x".join(str(int(d)) for d in data_shape) + ">" + "x".join(str(int(d)) for d in out_shape)


def winograd_wins(workloads: Iterable[Any], mcpu: str = "") -> dict[str, tuple[float, float]]:
    """The convolution shapes whose Winograd schedules in a library beat its direct ones: key -> (Winograd us, direct us).

    ``workloads`` are a library's (:class:`~edgetune.schedules.library.LibraryWorkload`: ``signature``, ``shapes``,
    ``flops``, ``schedules``). A shape is in the answer where the library holds both forms of it (any epilogue) and
    the Winograd form's best latency is at most :data:`WINOGRAD_MAX_SHARE` of the direct form's. Latencies compare on
    the CPU model ``mcpu`` where both forms were measured on it, else across the family. Only the direct workloads
    doing a Winograd shape's arithmetic are read (their FLOPs), so a library of a thousand workloads costs little.
    """
    workloads = [w for w in workloads if w.schedules]
    winograd = {}
    for workload in workloads:
        if "bgemm" in workload.signature and "data_pack" in workload.signature and len(workload.shapes) >= 3:
            data, weights, out = workload.shapes[0], workload.shapes[1], workload.shapes[-1]
            if len(data) == 5 and len(weights) == 4 and len(out) == 5:
                flops = 2 * out[0] * out[2] * out[3] * weights[2] * weights[3] * 9  # the direct form's
                winograd.setdefault(shape_key(data, out), []).append((workload, flops))
    wins: dict[str, tuple[float, float]] = {}
    for key, entries in winograd.items():
        flops = entries[0][1]
        direct = [w for w in workloads if "conv2d_NCHWc" in w.signature and abs(w.flops - flops) <= 0.02 * flops
                  and len(w.shapes) >= 3 and len(w.shapes[1]) == 6 and tuple(w.shapes[1][2:4]) == (3, 3)
                  and shape_key(w.shapes[0], w.shapes[-1]) == key]
        if not direct:
            continue
        ours, theirs = [s for w, _f in entries for s in w.schedules], [s for w in direct for s in w.schedules]
        if mcpu and any(s.mcpu == mcpu for s in ours) and any(s.mcpu == mcpu for s in theirs):
            ours, theirs = [s for s in ours if s.mcpu == mcpu], [s for s in theirs if s.mcpu == mcpu]
        best, direct_best = min(s.latency_us for s in ours), min(s.latency_us for s in theirs)
        if best <= WINOGRAD_MAX_SHARE * direct_best:
            wins[key] = (best, direct_best)
    return wins
