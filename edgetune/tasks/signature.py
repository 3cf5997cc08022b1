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


#: operators computed by the same loop nest as another: a grouped blocked convolution's whole-block groups
#: (:func:`edgetune.tasks.blocked_computes.group_conv2d_nchwc`) are an ordinary blocked convolution's loops
SAME_LOOP_NEST = {"group_conv2d_NCHWc": "conv2d_NCHWc"}


def is_padding(block: str) -> bool:
    """Whether a block only pads an operator's input (``data_pad``, ``pad_temp``)."""
    return block == "pad_temp" or block.endswith("_pad")


def anchor_block(signature: tuple[str, ...] | list[str]) -> str | None:
    """The block that computes the operator, as its workload names it: the first that is not padding (None: none).

    Unlike :func:`anchor_signature`, a grouped convolution keeps its own name: what ``schedules build --operator``
    selects by and lists.
    """
    return next((name for name in signature if not is_padding(name)), None)


def anchor_signature(signature: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The operator without its epilogue: the blocks up to the first that is not padding.

    A convolution followed by a bias and hard-swish and the same convolution
    followed by a bias and ReLU share ``('conv2d_NCHWc',)``; with a padded input,
    ``('data_pad', 'conv2d_NCHWc')``; a grouped blocked convolution is named as the
    ordinary one (:data:`SAME_LOOP_NEST`). Their multi-level tiling draws the same
    decisions, so a schedule of one seeds the other
    (:func:`edgetune.search.transfer.transfer_decisions`).
    """
    blocks = tuple(signature)
    for i, name in enumerate(blocks):
        if not is_padding(name):
            return (*blocks[:i], SAME_LOOP_NEST.get(name, name))
    return blocks
