"""MetaTune as a MetaSchedule cost model: a learnt start, adapted to each task's measurements.

Before a task has any measurement the model ranks candidates with the model
file's head, meta-learned or (the bundled file) only pre-trained: the point of
MetaTune is to be useful from the first batch. After
each batch it adapts a copy of that start to the task's measurements with
MAML's inner loop (the same steps and learning rate it was meta-trained with),
so every task has its own head and none drifts from the shared start. The GCN
embedding is frozen; a candidate's embedding is computed once per prediction.

With ``handoff_samples`` (``tuning.meta_handoff_samples``) > 0, ranking is
handed over to edgetune's random forest
(:class:`~edgetune.costmodel.surrogate.RandomForestModel`, fitted on the same
measurements) as a task's measurements grow, because on the held-out
benchmark the learnt start led while a task had few measurements and the
forest caught up by 32-64. A candidate's score is then

    w * meta + (1 - w) * (forest mean + forest std),   w = h / (h + n)

with ``n`` the task's measurements and ``h`` = ``handoff_samples``: MetaTune
alone for the first batch, half and half at ``n = h``. Both models predict the
throughput relative to the task's best measured, so the scores add up on one
scale. It is off by default: measured with h = 16 and 32 it did not beat
MetaTune alone beyond the run-to-run spread (benchmarks/RESULTS.md,
``metatune_handoff``), and it costs a forest fit per batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from ..common.failure import FAILURE_THRESHOLD_SECS
from ..errors import CostModelError
from .surrogate import RandomForestModel
from . import graph
from .modelfile import ModelFile, load_model_file

EXTRA_HINT = "the meta cost model needs PyTorch: pip install 'edgetune[meta]'"


def require_torch() -> None:
    """One-line error naming the extra when PyTorch is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise CostModelError(EXTRA_HINT) from None


@dataclass
class _Task:
    """One task's measurements: embeddings and costs, and the head adapted to them."""

    z: list[Any] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    head: Any = None


@derived_object
class MetaTuneModel(PyCostModel):
    """MetaTune cost model; ``predict`` returns the predicted throughput relative to the task's best.

    Parameters
    ----------
    model_file:
        A model written by ``edgetune costmodel pretrain``; None uses the one bundled with edgetune.
    inner_steps, inner_lr:
        Adaptation to a task's measurements; None takes the values the model was meta-trained with.
    max_adapt_samples:
        Adapt on at most the newest this many measurements of a task (bounds the time per batch).
    threads:
        PyTorch threads (the host also builds candidates).
    handoff_samples:
        A task's measurements at which the random forest's score weighs as much as
        MetaTune's (see the module docstring); 0 ranks with MetaTune alone.
    seed:
        Random state of the forest.
    """

    def __init__(
        self,
        model_file: str | Path | None = None,
        inner_steps: int | None = None,
        inner_lr: float | None = None,
        max_adapt_samples: int = 256,
        threads: int = 1,
        handoff_samples: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        require_torch()
        from . import net

        if max_adapt_samples < 1:
            raise ValueError(f"max_adapt_samples must be >= 1, got {max_adapt_samples!r} instead")
        if handoff_samples < 0:
            raise ValueError(f"handoff_samples must be >= 0, got {handoff_samples!r} instead")
        self.model_file = model_file
        self.handoff_samples = handoff_samples
        self.seed = seed
        self.max_adapt_samples = max_adapt_samples
        self.threads = threads
        net.set_threads(threads)
        self._set_file(load_model_file(model_file))
        hyper = self.file_.info.get("hyperparameters", {})
        self.inner_steps = int(inner_steps if inner_steps is not None else hyper.get("inner_steps", 10))
        self.inner_lr = float(inner_lr if inner_lr is not None else hyper.get("inner_lr", 0.05))
        self.tasks_: dict[str, _Task] = {}
        self._encoder = graph.GraphEncoder()
        self.forest_: RandomForestModel | None = RandomForestModel(seed=seed) if handoff_samples else None

    def _set_file(self, file: ModelFile) -> None:
        from . import net

        self.file_ = file
        self.params_ = {k: t.detach() for k, t in net.to_torch(file.params).items()}
        self._mean, self._std = file.feature_mean, file.feature_std

    @staticmethod
    def _task_key(context: Any) -> str:
        from tvm.s_tir.meta_schedule.utils import shash2hex

        return shash2hex(context.mod)

    def _embed(self, context: Any, candidates: list[Any]) -> Any:
        from . import net

        nodes, adjacency, mask = graph.stack(self._encoder(context, candidates))
        scaled = ((nodes - self._mean) / self._std) * mask[:, :, None]
        return net.embeddings(self.params_, (scaled, adjacency, mask))

    # -- MetaSchedule interface ----------------------------------------------------
    def load(self, path: str) -> None:
        """Replace the meta-learned start with the model file at ``path`` (adapted heads and the forest are dropped)."""
        self._set_file(ModelFile.load(path))
        self.tasks_ = {}
        self.forest_ = RandomForestModel(seed=self.seed) if self.handoff_samples else None

    def save(self, path: str) -> None:
        """Write the meta-learned start (what a later run adapts from) as a model file."""
        ModelFile(self.file_.params, self._mean, self._std, dict(self.file_.info)).save(path)

    def update(self, context: Any, candidates: list[Any], results: list[Any]) -> None:
        if not candidates:
            return
        from . import net

        task = self.tasks_.setdefault(self._task_key(context), _Task())
        z = self._embed(context, candidates)
        for row, result in zip(z, results):
            secs = [float(s) for s in (result.run_secs or [])]
            cost = float(np.median(secs)) if secs and not result.error_msg else FAILURE_THRESHOLD_SECS
            task.z.append(row)
            task.costs.append(min(cost, FAILURE_THRESHOLD_SECS))
        from .training import relative_throughput

        z_all = net.torch.stack(task.z[-self.max_adapt_samples:])
        y = net.torch.as_tensor(relative_throughput(np.asarray(task.costs[-self.max_adapt_samples:]), np.asarray(task.costs)))
        task.head = net.adapt(self.params_, z_all, y, steps=self.inner_steps, lr=self.inner_lr)
        if self.forest_ is not None:
            self.forest_.update(context, candidates, results)

    def predict(self, context: Any, candidates: list[Any]) -> np.ndarray:
        if not candidates:
            return np.zeros(0)
        from . import net

        task = self.tasks_.get(self._task_key(context))
        head = task.head if task is not None and task.head is not None else self.params_
        meta = np.asarray(net.predict(head, self._embed(context, candidates)), dtype="float64")
        weight = self.meta_weight(len(task.costs) if task is not None else 0)
        if weight >= 1.0 or self.forest_ is None:
            return meta
        mean, std = self.forest_.predict_mean_std(context, candidates)
        if mean is None:  # the forest is still warming up
            return meta
        return weight * meta + (1.0 - weight) * (mean + std)

    # -- edgetune API ------------------------------------------------------------
    def meta_weight(self, measured: int) -> float:
        """MetaTune's share of the score of a task with ``measured`` measurements (the forest has the rest)."""
        if not self.handoff_samples:
            return 1.0
        return self.handoff_samples / (self.handoff_samples + measured)

    @property
    def num_samples_(self) -> int:
        return sum(len(t.costs) for t in self.tasks_.values())


__all__ = ["EXTRA_HINT", "MetaTuneModel", "require_torch"]
