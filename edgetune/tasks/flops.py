"""A workload's floating-point work, as TVM counts it from its loops."""

from __future__ import annotations

from typing import Any


def task_flops(mod: Any) -> float:
    """FLOPs of one run of ``mod`` (TVM's ``estimate_tir_flops``); 0 where its loops cannot be counted."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001 - some fused functions have no countable loops
        return 0.0
