"""Pre-training MetaTune from tuning histories: supervised, then first-order MAML (Algorithm 1).

A history's records are grouped by workload and target: one group is one
tuning task. Every record becomes a template graph (:mod:`.graph`) rebuilt from
its trace, labelled with its throughput relative to the group's best (0 for a
failed candidate), as MetaSchedule's own models normalise per task.

1. Supervised pre-training of the whole network on all records.
2. Meta-training of the head by FOMAML over few-shot tasks: a task is
   ``support`` records of one group (the measurements a tuning run has) and
   ``query`` other records of it, both labelled relative to the best of the
   few-shot task's records (support and query), as pre-training labels
   relative to the group's best. Labelled relative to the support's best
   alone, a query record better than all the support got a label above 1
   (up to 2.6 at the 99th percentile of the shipped corpus) that a head
   adapted to support labels of at most 1 does not reach, and the
   meta-learned start ranked held-out candidates no better than random after
   8 shots (top-8 pick 0.76-0.81 of the pool's best, random 0.81, pre-training
   alone 0.87-0.89; with this labelling 0.88). Why that mismatch costs so
   much was not analysed further; the change's effect was measured.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..common.failure import FAILURE_THRESHOLD_SECS
from ..errors import CostModelError, OptionError
from . import graph
from .modelfile import ModelFile


@dataclass
class Corpus:
    """Template graphs of many tasks' records, with each task's costs."""

    graphs: list[graph.ProgramGraph] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    group: list[int] = field(default_factory=list)  # task index of each record
    tasks: int = 0
    histories: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)

    def targets_relative(self) -> np.ndarray:
        """Each record's throughput relative to its task's best (0 when failed)."""
        costs, groups = np.asarray(self.costs), np.asarray(self.group)
        y = np.zeros(len(costs), np.float32)
        for task in set(self.group):
            rows = groups == task
            y[rows] = relative_throughput(costs[rows])
        return y


def relative_throughput(costs: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """``best / cost`` with ``best`` the fastest valid cost of ``reference`` (default ``costs``); failures are 0."""
    costs = np.asarray(costs, dtype=float)
    pool = costs if reference is None else np.asarray(reference, dtype=float)
    valid_pool = pool[pool < FAILURE_THRESHOLD_SECS]
    best = valid_pool.min() if len(valid_pool) else 1.0
    return np.where(costs < FAILURE_THRESHOLD_SECS, best / np.maximum(costs, 1e-30), 0.0).astype(np.float32)


def _check_exists(url: str) -> None:
    """A history to learn from must exist: open_history would create an empty one."""
    if "://" in url and not url.startswith("sqlite:///"):
        return
    path = Path(url[len("sqlite:///"):] if url.startswith("sqlite:///") else url)
    if not path.exists():
        raise CostModelError(f"history database {url} does not exist")


def load_corpus(urls: list[str], *, max_records_per_task: int = 512) -> Corpus:
    """Every task's records (failed ones too, at most ``max_records_per_task`` each) of the histories at ``urls``."""
    import json

    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.target import Target

    from ..builder.intrinsics import load_tensor_intrinsics
    from ..history import open_history

    corpus, encoder = Corpus(), graph.GraphEncoder()
    targets: set[str] = set()
    for url in urls:
        _check_exists(url)
        store = open_history(url, read_only=True)
        try:
            corpus.histories.append(store.url)
            # one group per workload, target and timing: relative throughput is only meaningful on one scale,
            # and a flushed-cache time of a candidate is not comparable with a warm one
            groups: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
            for summary in store.bulk.record_summaries():
                groups[(summary.workload.shash, summary.target_json, summary.timing)].append(summary)
            for (_, target_json, _timing), summaries in groups.items():
                summaries = summaries[-max_records_per_task:]
                records = store.bulk.records_by_id([s.id for s in summaries])
                target = Target(json.loads(target_json))
                load_tensor_intrinsics(target)  # only the target's family: TVM's full set takes 12-45 s to import
                context = TuneContext(mod=summaries[0].workload.workload.mod, target=target, task_name="pretrain")
                graphs = encoder(context, [r.as_measure_candidate() for r in records])
                corpus.graphs.extend(graphs)
                corpus.costs.extend(s.mean_run_sec if s.mean_run_sec is not None else FAILURE_THRESHOLD_SECS for s in summaries)
                corpus.group.extend([corpus.tasks] * len(graphs))
                corpus.tasks += 1
                targets.add(str(target))
        finally:
            store.close()
    corpus.targets = sorted(targets)
    return corpus


@dataclass
class MetaTrainer:
    """Hyperparameters of pre-training and meta-training (and of the fine-tuning a tuning run does).

    Parameters
    ----------
    hidden:
        Width of the GCN layers and of the head.
    epochs, lr, batch_size:
        Supervised pre-training (Adam).
    iterations, meta_batch, support, query:
        FOMAML: meta-iterations, tasks per meta-batch, shots per task and query records per task.
    inner_steps, inner_lr:
        MAML's inner loop; a tuning run adapts to its measurements with the same two.
    seed:
        Initial weights and task sampling.
    """

    hidden: int = 32
    epochs: int = 40
    lr: float = 3e-3
    batch_size: int = 64
    iterations: int = 300
    meta_batch: int = 8
    support: int = 8
    query: int = 16
    inner_steps: int = 10
    inner_lr: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("hidden", "epochs", "batch_size", "meta_batch", "support", "query", "inner_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r} instead")
        if self.iterations < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations!r} instead")

    def fit(self, corpus: Corpus) -> ModelFile:
        """Algorithm 1 on ``corpus``: the model file with the meta-learned start."""
        from . import net

        if not corpus.graphs:
            raise CostModelError("the histories hold no records to pre-train on")
        started = time.monotonic()
        net.set_threads(1)  # small matrices: more threads only contend with the host's other work
        nodes, adjacency, mask = graph.stack(corpus.graphs)
        mean, std = feature_scaling(nodes, mask)
        scaled = ((nodes - mean) / std) * mask[:, :, None]
        params = net.to_torch(net.init_params(graph.NODE_FEATURES, self.hidden, self.seed))
        inputs = tuple(net.torch.as_tensor(a) for a in (scaled, adjacency, mask))
        y = corpus.targets_relative()
        pre_losses = net.supervised(params, inputs, net.torch.as_tensor(y), epochs=self.epochs, lr=self.lr,
                                    batch_size=self.batch_size, seed=self.seed)
        z = net.embeddings(params, (scaled, adjacency, mask))
        tasks = self._task_rows(corpus)
        meta_losses = net.meta_train_head(
            params, lambda rng: self._sample(rng, tasks, z, np.asarray(corpus.costs)), iterations=self.iterations if tasks else 0,
            inner_steps=self.inner_steps, inner_lr=self.inner_lr, outer_lr=self.lr, seed=self.seed,
        )
        info = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "edgetune_version": _version(),
            "training": {
                "histories": corpus.histories, "targets": corpus.targets, "tasks": corpus.tasks, "records": len(corpus.graphs),
                "meta_tasks": len(tasks), "seconds": round(time.monotonic() - started, 1),
                "supervised_loss": [round(pre_losses[0], 5), round(pre_losses[-1], 5)],
                "meta_query_loss": [round(meta_losses[0], 5), round(meta_losses[-1], 5)] if meta_losses else [],
            },
            "hyperparameters": {k: getattr(self, k) for k in self.__dataclass_fields__},
        }
        return ModelFile(net.to_numpy(params), mean, std, info)

    def _task_rows(self, corpus: Corpus) -> list[np.ndarray]:
        """Record rows of each task with enough records for a support and a query set."""
        groups = np.asarray(corpus.group)
        rows = [np.flatnonzero(groups == task) for task in range(corpus.tasks)]
        return [r for r in rows if len(r) >= self.support + 1]

    def _sample(self, rng: np.random.Generator, tasks: list[np.ndarray], z: Any, costs: np.ndarray) -> Iterator[tuple]:
        from . import net

        for index in rng.choice(len(tasks), size=self.meta_batch, replace=len(tasks) < self.meta_batch):
            rows = rng.permutation(tasks[index])
            support, query = rows[:self.support], rows[self.support:self.support + self.query]
            reference = costs[np.concatenate([support, query])]  # one scale for both: see the module's docstring
            y_s, y_q = relative_throughput(costs[support], reference), relative_throughput(costs[query], reference)
            yield z[support], net.torch.as_tensor(y_s), z[query], net.torch.as_tensor(y_q)


def feature_scaling(nodes: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and standard deviation over the used node slots (std at least 1e-2)."""
    used = nodes[mask > 0]
    if len(used) == 0:
        return np.zeros(nodes.shape[-1], np.float32), np.ones(nodes.shape[-1], np.float32)
    return used.mean(axis=0).astype(np.float32), np.maximum(used.std(axis=0), 1e-2).astype(np.float32)


def _version() -> str:
    from .._version import __version__

    return __version__


def pretrain_from_histories(urls: list[str], *, seed: int = 0, **hyperparameters: Any) -> ModelFile:
    """What ``edgetune costmodel pretrain`` runs: load every history's records, then :meth:`MetaTrainer.fit`."""
    from .meta_model import require_torch

    require_torch()
    try:
        trainer = MetaTrainer(seed=seed, **hyperparameters)
    except ValueError as error:
        raise OptionError(str(error)) from None
    return trainer.fit(load_corpus(urls))


__all__ = ["Corpus", "MetaTrainer", "feature_scaling", "load_corpus", "pretrain_from_histories", "relative_throughput"]
