"""The blocked convolutions TOPI 0.27 has no compute for, as :func:`~edgetune.tasks.blocking.lower_blocked` lowers them.

``depthwise_conv2d_nchwc``: TOPI declares the operator but registers no generic
implementation. ``group_conv2d_nchwc``: a grouped convolution whose groups are
whole blocks (unless ``tuning.block_grouped`` is off).
"""

from __future__ import annotations

from typing import Any

from tvm import te, topi


def _padded(data: te.Tensor, size: Any, kernel: Any, strides: Any, padding: Any, dilation: Any) -> tuple[Any, ...]:
    """Blocked data padded on H and W, the output's height and width, and the strides and dilation as ints."""
    (height, width), (kernel_h, kernel_w) = size, kernel
    stride_h, stride_w = (int(s) for s in strides)
    dilation_h, dilation_w = (int(d) for d in dilation)
    top, left, bottom, right = (int(p) for p in padding)
    if top or left or bottom or right:
        data = topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], name="data_pad")
    out_h = (height + top + bottom - (kernel_h - 1) * dilation_h - 1) // stride_h + 1
    out_w = (width + left + right - (kernel_w - 1) * dilation_w - 1) // stride_w + 1
    return data, (out_h, out_w), (stride_h, stride_w), (dilation_h, dilation_w)


def depthwise_conv2d_nchwc(
    data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any, dilation: Any, out_dtype: str
) -> te.Tensor:
    """Depthwise convolution, ``NCHW{b}c`` data and ``OIHW1i{b}o`` weights (channel multiplier 1)."""
    batch, chunks, height, width, lanes = data.shape
    _chunks, _one, kernel_h, kernel_w, _one_i, _lanes = kernel.shape
    data, (out_h, out_w), (stride_h, stride_w), (dilation_h, dilation_w) = _padded(
        data, (height, width), (kernel_h, kernel_w), strides, padding, dilation)
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    return te.compute(
        (batch, chunks, out_h, out_w, lanes),
        lambda n, c, y, x, v: te.sum(
            data[n, c, y * stride_h + ry * dilation_h, x * stride_w + rx * dilation_w, v].astype(out_dtype)
            * kernel[c, 0, ry, rx, 0, v].astype(out_dtype),
            axis=[ry, rx],
        ),
        name="depthwise_conv2d_NCHWc",
    )


def group_conv2d_nchwc(
    data: te.Tensor, kernel: te.Tensor, strides: Any, padding: Any, dilation: Any, groups: int, out_dtype: str
) -> te.Tensor:
    """Grouped convolution, ``NCHW{b}c`` data and ``OIHW{b}i{b}o`` weights, each group a whole number of blocks.

    ``ConvertLayout`` blocks a grouped convolution only where blocks divide each group's input and output
    channels (RegNet's and ResNeXt's wide groups); the weight's input axis is then one group's channels, so
    output block ``c`` reads the input blocks of its own group only. TOPI 0.27 has no such compute.
    """
    batch, in_chunks, height, width, lanes = data.shape
    out_chunks, group_in_chunks, kernel_h, kernel_w, _in_lanes, out_lanes = kernel.shape
    groups = int(groups)
    out_chunks_per_group = int(out_chunks) // groups
    if int(in_chunks) != groups * int(group_in_chunks) or int(out_chunks) % groups:
        raise ValueError(f"a grouped conv2d_NCHWc needs whole blocks per group, got {groups} groups of "
                         f"{data.shape} data and {kernel.shape} weights instead")
    data, (out_h, out_w), (stride_h, stride_w), (dilation_h, dilation_w) = _padded(
        data, (height, width), (kernel_h, kernel_w), strides, padding, dilation)
    # one reduction over the group's input channels, then the kernel, in TOPI's conv2d_NCHWc order: the same
    # loop nest as an ordinary blocked convolution, so that its schedules' decisions carry over
    # (edgetune.search.transfer.transfer_decisions)
    in_lanes = int(lanes)
    ic = te.reduce_axis((0, int(group_in_chunks) * in_lanes), name="ic")
    ry = te.reduce_axis((0, kernel_h), name="kh")
    rx = te.reduce_axis((0, kernel_w), name="kw")
    return te.compute(
        (batch, out_chunks, out_h, out_w, out_lanes),
        lambda n, c, y, x, v: te.sum(
            data[n, c // out_chunks_per_group * group_in_chunks + ic // in_lanes, y * stride_h + ry * dilation_h,
                 x * stride_w + rx * dilation_w, ic % in_lanes].astype(out_dtype)
            * kernel[c, ic // in_lanes, ry, rx, ic % in_lanes, v].astype(out_dtype),
            axis=[ic, ry, rx],
        ),
        name="group_conv2d_NCHWc",
    )
