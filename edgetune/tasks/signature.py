"""What operator a workload computes, independent of its shape: the key for "similar" tasks.

Used by the history (stats labels, warm start, suggestions) and the search
(transfer from similar workloads, settings per task type) alike, so it lives
with the tasks rather than in either of them.
"""

from __future__ import annotations

import json

import tvm


def block_names(mod: tvm.IRModule) -> list[str]:
    """Names of the module's blocks (the operators), read from its JSON graph."""
    try:
        nodes = json.loads(tvm.ir.save_json(mod))["nodes"]
        found: list[str] = []
        for node in nodes:
            if str(node.get("type", "")).endswith("Block"):
                name = nodes[node["data"]["name_hint"]]
                text = name.get("data") if isinstance(name, dict) else None
                if isinstance(text, str) and text != "root" and text not in found:
                    found.append(text)
        return found
    except Exception:  # noqa: BLE001 - a label only; never fail over it
        return []


def operator_signature(mod: tvm.IRModule) -> tuple[str, ...]:
    """The operator a workload computes, shape-free: its compute block names in order.

    ``conv2d_nchw`` + ``T_add`` + ``compute`` (relu) at 32x32 and at 64x64 give
    the same signature; a dense layer gives another.
    """
    return tuple(block_names(mod))
