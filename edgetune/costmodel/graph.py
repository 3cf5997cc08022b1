"""A candidate program as a graph in a shared super-graph template (MetaTune §3).

The scheduled TIR of a candidate is summarised as the paper's loop graph:

* one ``root`` node;
* one ``for`` node per loop, in pre-order (features: log2 extent, loop kind,
  depth, whether it is innermost);
* one ``interval`` node per stored buffer, carrying MetaSchedule's per-store
  features (``PerStoreFeature``: the loop-context vectors of TVM's cost
  models, one row per buffer store) for that buffer.

Edges: root to every for node (control flow), each for node to the loops
nested in it, and each interval node to the innermost loop around its store
(root when there is none). Every graph is placed in the same template of
:data:`MAX_FOR` for slots and :data:`MAX_INTERVAL` interval slots, zero-padded,
so graphs of conv2d, depthwise conv2d, dense and their fused epilogues have one
shape and slot ``i`` always means the same kind of node: the structural
similarity meta-learning needs.

Only numpy and TVM here: the encoding is also what ``costmodel pretrain`` reads
from a history, and it must not need PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: loop slots of the template (a tiled conv2d with its padding and epilogue has about 30 loops)
MAX_FOR = 40
#: interval (stored buffer) slots of the template
MAX_INTERVAL = 8
#: MetaSchedule's per-store feature width (PerStoreFeature's default, 164)
STORE_FEATURES = 164
#: for-node features: log2(extent + 1), kind one-hot (serial, parallel, vectorized, unrolled, thread), depth / 16, innermost
FOR_FEATURES = 8
#: node-type one-hot: root, for, interval
TYPE_FEATURES = 3
NODE_FEATURES = TYPE_FEATURES + FOR_FEATURES + STORE_FEATURES
NUM_NODES = 1 + MAX_FOR + MAX_INTERVAL
#: first column of each part of a node's feature row
FOR_OFFSET = TYPE_FEATURES
STORE_OFFSET = TYPE_FEATURES + FOR_FEATURES
#: first slot of each node kind
FOR_SLOT = 1
INTERVAL_SLOT = 1 + MAX_FOR

_CHILD_FIELDS = ("seq", "body", "block", "init", "then_case", "else_case")


@dataclass
class ProgramGraph:
    """One candidate in the template: node features, symmetric adjacency and which slots are used."""

    nodes: np.ndarray  # (NUM_NODES, NODE_FEATURES) float32
    adjacency: np.ndarray  # (NUM_NODES, NUM_NODES) float32, 0/1, no self loops
    mask: np.ndarray  # (NUM_NODES,) float32, 1 for a used slot
    num_for: int
    num_interval: int

    @property
    def num_edges(self) -> int:
        return int(self.adjacency.sum() // 2)


@dataclass
class _Loop:
    extent: float
    kind: int
    depth: int
    parent: int  # loop index, -1 for root
    innermost: bool = True


def _children(node: Any) -> list[Any]:
    found: list[Any] = []
    for name in _CHILD_FIELDS:
        try:
            child = getattr(node, name)
        except AttributeError:
            continue
        if child is None:
            continue
        if name == "seq":
            found.extend(child)
        else:
            found.append(child)
    return found


def loop_nest(func: Any) -> tuple[list[_Loop], list[tuple[str, int]]]:
    """The loops of a PrimFunc in pre-order, and each stored buffer (first store) with its innermost loop."""
    loops: list[_Loop] = []
    stores: dict[str, int] = {}
    stack: list[tuple[Any, int, int]] = [(func.body, -1, 0)]
    while stack:
        node, parent, depth = stack.pop()
        kind = type(node).__name__
        if kind == "For":
            if parent >= 0:
                loops[parent].innermost = False
            extent = getattr(node.extent, "value", 1)
            loops.append(_Loop(float(extent), int(node.kind), depth, parent))
            parent, depth = len(loops) - 1, depth + 1
        elif kind == "BufferStore":
            stores.setdefault(str(node.buffer.name), parent)
        stack.extend((child, parent, depth) for child in reversed(_children(node)))
    return loops, list(stores.items())


def encode(func: Any, store_features: np.ndarray) -> ProgramGraph:
    """The template graph of a scheduled PrimFunc with its ``(stores, 164)`` per-store feature matrix.

    ``PerStoreFeature`` gives one row per stored buffer in program order; row
    ``i`` goes to the interval node of the ``i``-th buffer stored. Loops and
    buffers beyond the template's slots are dropped (an interval node under a
    dropped loop hangs from its nearest kept ancestor).
    """
    loops, stores = loop_nest(func)
    nodes = np.zeros((NUM_NODES, NODE_FEATURES), dtype=np.float32)
    adjacency = np.zeros((NUM_NODES, NUM_NODES), dtype=np.float32)
    mask = np.zeros(NUM_NODES, dtype=np.float32)
    nodes[0, 0], mask[0] = 1.0, 1.0

    def slot(loop: int) -> int:
        while loop >= MAX_FOR:
            loop = loops[loop].parent
        return 0 if loop < 0 else FOR_SLOT + loop

    def link(a: int, b: int) -> None:
        adjacency[a, b] = adjacency[b, a] = 1.0

    kept = loops[:MAX_FOR]
    for index, loop in enumerate(kept):
        row = nodes[FOR_SLOT + index]
        row[1] = 1.0
        row[FOR_OFFSET] = np.log2(loop.extent + 1.0)
        row[FOR_OFFSET + 1 + min(max(loop.kind, 0), 4)] = 1.0
        row[FOR_OFFSET + 6] = loop.depth / 16.0
        row[FOR_OFFSET + 7] = float(loop.innermost)
        mask[FOR_SLOT + index] = 1.0
        link(0, FOR_SLOT + index)
        if loop.parent >= 0:
            link(slot(loop.parent), FOR_SLOT + index)
    features = np.asarray(store_features, dtype=np.float32)
    if features.ndim != 2:
        features = features.reshape(0, STORE_FEATURES)
    used = min(len(stores), MAX_INTERVAL)
    for index in range(used):
        node = INTERVAL_SLOT + index
        nodes[node, 2], mask[node] = 1.0, 1.0
        if index < len(features):
            row = features[index][:STORE_FEATURES]
            nodes[node, STORE_OFFSET:STORE_OFFSET + len(row)] = row
        link(node, slot(stores[index][1]))
    return ProgramGraph(nodes, adjacency, mask, len(kept), used)


class GraphEncoder:
    """Template graphs of MetaSchedule candidates; the feature extractor is created on first use."""

    def __init__(self) -> None:
        self._extractor: Any = None

    def __call__(self, context: Any, candidates: list[Any]) -> list[ProgramGraph]:
        if not candidates:
            return []
        if self._extractor is None:
            from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

            self._extractor = PerStoreFeature()
        features = self._extractor.extract_from(context, candidates)
        return [encode(c.sch.mod["main"], f.numpy()) for c, f in zip(candidates, features)]


def stack(graphs: list[ProgramGraph]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Node features, normalised adjacency ``D^-1/2 (A + I) D^-1/2`` and masks of a batch, as arrays."""
    nodes = np.stack([g.nodes for g in graphs]) if graphs else np.zeros((0, NUM_NODES, NODE_FEATURES), np.float32)
    masks = np.stack([g.mask for g in graphs]) if graphs else np.zeros((0, NUM_NODES), np.float32)
    adjacency = np.stack([g.adjacency for g in graphs]) if graphs else np.zeros((0, NUM_NODES, NUM_NODES), np.float32)
    adjacency = adjacency + np.eye(NUM_NODES, dtype=np.float32)[None] * masks[:, :, None]
    degree = adjacency.sum(axis=2)
    scale = np.where(degree > 0, 1.0 / np.sqrt(np.maximum(degree, 1e-12)), 0.0).astype(np.float32)
    return nodes, adjacency * scale[:, :, None] * scale[:, None, :], masks


__all__ = ["GraphEncoder", "ProgramGraph", "encode", "loop_nest", "stack"]
