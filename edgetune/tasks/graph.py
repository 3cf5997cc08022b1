"""Graph-level preparation before tasks are extracted: the layout the convolutions are tuned and built in.

ONNX models arrive in NCHW. On a CPU, a convolution whose channels are the
innermost axis (NHWC activations, OHWI weights) vectorises along channels
without gathers, which MetaSchedule's CPU rules exploit far better in a small
budget. ``tuning.conv_layout = "NHWC"`` converts every 2-D convolution with
Relax's ``ConvertLayout``; the weights are constants, so their transposes
fold away, and only the model's input and output keep a layout transform.
The same prepared module is used for task extraction, the tuned and untuned
builds and ``deploy``, so tuned records always match what is compiled.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tvm
from tvm import relax

from ..profile.schema import CONV_LAYOUTS


def prepare_graph(model: Any, conv_layout: str) -> Any:
    """``model`` (a :class:`~edgetune.tasks.models.LoadedModel`) with its Relax module in ``conv_layout``."""
    if conv_layout not in CONV_LAYOUTS:
        raise ValueError(f"conv_layout must be one of {', '.join(CONV_LAYOUTS)}, got {conv_layout!r} instead")
    if conv_layout == "as-is":
        return model
    passes = [
        relax.transform.ConvertLayout({"relax.nn.conv2d": [conv_layout, "OHWI"]}),
        relax.transform.Normalize(),
        relax.transform.FoldConstant(),
    ]
    with tvm.transform.PassContext(opt_level=3):
        mod = tvm.transform.Sequential(passes)(model.mod)
    return dataclasses.replace(model, mod=mod)
