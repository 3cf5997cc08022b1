"""MetaTune's network and its MAML training, in PyTorch (the ``edgetune[meta]`` extra).

The only edgetune module that imports torch (tests/test_lint.py checks it).
The network is written functionally, on a dictionary of parameter tensors, so
that MAML's inner loop can run on copies of the parameters:

* embedding: two GCN layers (Kipf & Welling) over the template graph, ReLU,
  then a gated weighted sum and a max over the used nodes (MetaTune §4);
* head: three fully connected layers with ReLU, one output (the candidate's
  throughput relative to its task's best).

Meta-training adapts the head only, the embedding frozen after supervised
pre-training, as the paper does; so during tuning a candidate's embedding is
computed once and adaptation is a few steps of a 3-layer MLP.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

EMBEDDING = ("gcn1_w", "gcn1_b", "gcn2_w", "gcn2_b", "gate_w")
HEAD = ("fc1_w", "fc1_b", "fc2_w", "fc2_b", "fc3_w", "fc3_b")

Params = dict[str, torch.Tensor]


def init_params(num_features: int, hidden: int, seed: int) -> dict[str, np.ndarray]:
    """Glorot-uniform weights, zero biases."""
    rng = np.random.default_rng(seed)

    def glorot(rows: int, cols: int) -> np.ndarray:
        bound = np.sqrt(6.0 / (rows + cols))
        return rng.uniform(-bound, bound, size=(rows, cols)).astype(np.float32)

    return {
        "gcn1_w": glorot(num_features, hidden), "gcn1_b": np.zeros(hidden, np.float32),
        "gcn2_w": glorot(hidden, hidden), "gcn2_b": np.zeros(hidden, np.float32),
        "gate_w": glorot(hidden, 1),
        **init_head(2 * hidden, hidden, rng),
    }


def init_head(num_inputs: int, hidden: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A freshly initialised regression head (also the random start MAML is compared with)."""

    def glorot(rows: int, cols: int) -> np.ndarray:
        bound = np.sqrt(6.0 / (rows + cols))
        return rng.uniform(-bound, bound, size=(rows, cols)).astype(np.float32)

    return {
        "fc1_w": glorot(num_inputs, hidden), "fc1_b": np.zeros(hidden, np.float32),
        "fc2_w": glorot(hidden, hidden), "fc2_b": np.zeros(hidden, np.float32),
        "fc3_w": glorot(hidden, 1), "fc3_b": np.zeros(1, np.float32),
    }


def to_torch(params: dict[str, np.ndarray], names: tuple[str, ...] | None = None) -> Params:
    return {k: torch.tensor(v, dtype=torch.float32, requires_grad=True) for k, v in params.items() if names is None or k in names}


def to_numpy(params: Params) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in params.items()}


def embed(params: Params, nodes: torch.Tensor, adjacency: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(B, 2*hidden)`` graph embeddings from scaled node features, normalised adjacency and masks."""
    m = mask.unsqueeze(-1)
    h = torch.relu(adjacency @ (nodes @ params["gcn1_w"]) + params["gcn1_b"]) * m
    h = torch.relu(adjacency @ (h @ params["gcn2_w"]) + params["gcn2_b"]) * m
    gate = torch.sigmoid(h @ params["gate_w"]) * m
    weighted = (gate * h).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)
    largest = (h - (1.0 - m) * 1e6).max(dim=1).values.clamp(min=0.0)
    return torch.cat([weighted, largest], dim=1)


def head(params: Params, z: torch.Tensor) -> torch.Tensor:
    """``(B,)`` predictions from embeddings."""
    h = torch.relu(z @ params["fc1_w"] + params["fc1_b"])
    h = torch.relu(h @ params["fc2_w"] + params["fc2_b"])
    return (h @ params["fc3_w"] + params["fc3_b"]).squeeze(-1)


def adapt(params: Params, z: torch.Tensor, y: torch.Tensor, *, steps: int, lr: float) -> Params:
    """MAML's inner loop: ``steps`` of gradient descent on the head's MSE, from ``params``; returns new tensors."""
    fast = {k: v.detach().clone().requires_grad_(True) for k, v in params.items() if k in HEAD}
    for _ in range(steps):
        loss = torch.mean((head(fast, z) - y) ** 2)
        grads = torch.autograd.grad(loss, list(fast.values()))
        fast = {k: (v - lr * g).detach().requires_grad_(True) for (k, v), g in zip(fast.items(), grads)}
    return fast


Task = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # support z, support y, query z, query y


def meta_train_head(
    params: Params,
    sample_tasks: Callable[[np.random.Generator], Iterator[Task]],
    *,
    iterations: int,
    inner_steps: int,
    inner_lr: float,
    outer_lr: float,
    seed: int,
) -> list[float]:
    """First-order MAML on the head (Finn et al. 2017, FOMAML): per meta-batch, adapt to each task's
    support set, take the query loss's gradient at the adapted weights, and move the start along their
    mean (Adam). Updates ``params`` in place; returns the mean query loss of each iteration."""
    rng = np.random.default_rng(seed)
    start = {k: params[k] for k in HEAD}
    optimizer = torch.optim.Adam(list(start.values()), lr=outer_lr)
    losses = []
    for _ in range(iterations):
        grads = {k: torch.zeros_like(v) for k, v in start.items()}
        total, count = 0.0, 0
        for support_z, support_y, query_z, query_y in sample_tasks(rng):
            fast = adapt(start, support_z, support_y, steps=inner_steps, lr=inner_lr)
            loss = torch.mean((head(fast, query_z) - query_y) ** 2)
            for (k, v), g in zip(fast.items(), torch.autograd.grad(loss, list(fast.values()))):
                grads[k] += g
            total, count = total + float(loss.detach()), count + 1
        if count == 0:
            break
        optimizer.zero_grad()
        for k, v in start.items():
            v.grad = grads[k] / count
        optimizer.step()
        losses.append(total / count)
    return losses


def supervised(
    params: Params,
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    targets: torch.Tensor,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
) -> list[float]:
    """Algorithm 1, lines 1-6: supervised pre-training of the whole network (Adam, minibatches); in place."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(list(params.values()), lr=lr)
    nodes, adjacency, mask = inputs
    losses = []
    for _ in range(epochs):
        order = torch.randperm(len(targets), generator=generator)
        total = 0.0
        for begin in range(0, len(order), batch_size):
            index = order[begin:begin + batch_size]
            loss = torch.mean((head(params, embed(params, nodes[index], adjacency[index], mask[index])) - targets[index]) ** 2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(index)
        losses.append(total / max(len(targets), 1))
    return losses


def embeddings(params: Params, inputs: tuple[np.ndarray, np.ndarray, np.ndarray], batch_size: int = 256) -> torch.Tensor:
    """Embeddings of many graphs without gradients (the embedding is frozen once pre-trained)."""
    nodes, adjacency, mask = (torch.as_tensor(a, dtype=torch.float32) for a in inputs)
    with torch.no_grad():
        parts = [embed(params, nodes[i:i + batch_size], adjacency[i:i + batch_size], mask[i:i + batch_size])
                 for i in range(0, len(nodes), batch_size)]
    return torch.cat(parts) if parts else torch.zeros((0, 2 * params["gcn1_w"].shape[1]))


def predict(params: Params, z: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return head(params, z).cpu().numpy().astype(np.float64)


def clone(params: Params) -> Params:
    return copy.deepcopy({k: v.detach() for k, v in params.items()})


def set_threads(count: int) -> Any:
    """Keep torch to ``count`` threads: the host also builds candidates and runs the board."""
    torch.set_num_threads(max(1, count))


__all__ = ["EMBEDDING", "HEAD", "adapt", "embed", "embeddings", "head", "init_head", "init_params", "meta_train_head",
           "predict", "supervised", "to_numpy", "to_torch"]
