"""A random-forest cost model with uncertainty, ranking by expected improvement.

AdaTune §4.2. The forest's trees are an ensemble: their spread gives a standard
deviation beside the mean prediction. Candidates are scored by the expected
positive improvement over the best measured candidate,

    EI = (mu - best) * Phi(z) + sigma * phi(z),   z = (mu - best) / sigma
    EI = max(0, mu - best)                         when sigma = 0

so both promising and uncertain candidates rank high. The search strategy
also reads the mean standard deviation of random candidates to set the share
of random exploration per batch (the paper's contextual epsilon).

Targets are normalised per task as MetaSchedule's XGBoost model does: the
task's best measured latency divided by the candidate's (1.0 = best so far).

One forest serves every task, so tasks learn from each other's measurements.
Refitting it on every record after every batch grows faster than linearly: at
3,500 records (a MobileNetV2 tune resumed towards 512 trials per task) the refit
took half of the run's host time. Above ``max_train_samples`` records the forest
is therefore fitted when a task asks for predictions, on every record of that
task and a random sample of the others, ``max_train_samples`` in all.
"""

from __future__ import annotations

import contextlib
import pickle
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

#: at or above MetaSchedule's failure stub a candidate is scored as throughput 0
from ..common.failure import FAILURE_THRESHOLD_SECS


def expected_improvement(mu: np.ndarray, sigma: np.ndarray, best: float) -> np.ndarray:
    """Expected positive improvement of a normal ``N(mu, sigma)`` over ``best`` (AdaTune eq. 1-2)."""
    from scipy.stats import norm

    mu = np.asarray(mu, dtype=float)
    sigma = np.asarray(sigma, dtype=float)
    gain = mu - best
    ei = np.maximum(gain, 0.0)
    positive = sigma > 0
    z = gain[positive] / sigma[positive]
    ei[positive] = gain[positive] * norm.cdf(z) + sigma[positive] * norm.pdf(z)
    return ei


def aggregate_features(per_store: np.ndarray) -> np.ndarray:
    """One fixed-length row from a candidate's per-buffer-store feature matrix: sum, max, count."""
    per_store = np.asarray(per_store, dtype=float)
    if per_store.ndim != 2 or per_store.shape[0] == 0:
        width = per_store.shape[-1] if per_store.ndim == 2 else 0
        return np.zeros(2 * width + 1)
    return np.concatenate([per_store.sum(axis=0), per_store.max(axis=0), [per_store.shape[0]]])


def stack_rows(rows: list[np.ndarray]) -> np.ndarray:
    """Rows of different lengths as one matrix, zero-padded to the longest."""
    width = max((len(r) for r in rows), default=0)
    return np.array([np.pad(r, (0, width - len(r))) for r in rows], dtype=float)


class CandidateFeatures:
    """One fixed-length feature row per candidate (MetaSchedule's per-store
    features, aggregated); the extractor is created on first use.

    Rows are computed once per program: the evolutionary search scores its
    elites again every iteration and every round, and the measured candidates
    are featured again for the update. A row is kept by the program's
    structural hash and the target (the features depend on both), up to
    ``max_rows`` rows; ``hits``, ``misses`` and ``seconds`` (spent extracting)
    say what the cache saved.
    """

    def __init__(self, max_rows: int = 100_000) -> None:
        self._extractor: Any = None
        self.max_rows = max_rows
        self._rows: dict[tuple[str, int], np.ndarray] = {}
        self._targets: dict[int, str] = {}  # id(context) -> its target, as a key
        self.hits = 0
        self.misses = 0
        self.seconds = 0.0

    def __call__(self, context: Any, candidates: list[Any], hashes: list[int] | None = None) -> np.ndarray:
        """Feature rows of ``candidates``; ``hashes``, when given, receives each one's structural hash."""
        import time

        import tvm_ffi

        started = time.perf_counter()
        target = self._targets.get(id(context))
        if target is None:
            target = self._targets[id(context)] = str(context.target)
        keys = [(target, int(tvm_ffi.structural_hash(c.sch.mod))) for c in candidates]
        if hashes is not None:
            hashes.extend(key for _, key in keys)
        missing = [i for i, key in enumerate(keys) if key not in self._rows]
        if len(self._rows) + len(missing) > self.max_rows:  # full (or no cache): start over, this batch computed whole
            self._rows.clear()
            missing = list(range(len(candidates)))
        if missing:
            if self._extractor is None:
                from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

                self._extractor = PerStoreFeature()
            extracted = self._extractor.extract_from(context, [candidates[i] for i in missing])
            for i, features in zip(missing, extracted):
                self._rows[keys[i]] = aggregate_features(features.numpy())
        self.misses += len(missing)
        self.hits += len(candidates) - len(missing)
        rows = stack_rows([self._rows[key] for key in keys])
        self.seconds += time.perf_counter() - started
        return rows

    def stats(self) -> dict[str, Any]:
        return {"hits": self.hits, "misses": self.misses, "seconds": round(self.seconds, 3)}


@dataclass
class _Group:
    """Measured candidates of one task."""

    features: list[np.ndarray] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)

    @property
    def targets(self) -> np.ndarray:
        costs = np.asarray(self.costs)
        valid = costs < FAILURE_THRESHOLD_SECS
        best = costs[valid].min() if valid.any() else 1.0
        return np.where(valid, best / np.maximum(costs, 1e-30), 0.0)


@derived_object
class RandomForestModel(PyCostModel):
    """Random forest surrogate; ``predict`` returns expected improvement.

    Parameters
    ----------
    n_estimators, min_samples_leaf, max_features:
        Passed to scikit-learn's ``RandomForestRegressor``.
    num_warmup_samples:
        Below this many measured candidates, ``predict`` returns random scores.
    score:
        ``"ei"`` (expected improvement, the paper's choice) or ``"mean"``.
    max_train_samples:
        Most records one fit reads. Below it the forest is fitted on every record
        of every task; above it, per task: all of the task's own records (a random
        sample of them if they alone are more) and a random sample of the others.
    seed:
        Random state of the forest, of warm-up scores and of the training sample.
    feature_cache_rows:
        Feature rows kept by program (:class:`CandidateFeatures`); 0 computes every row again.
    """

    def __init__(
        self,
        n_estimators: int = 64,
        min_samples_leaf: int = 1,
        max_features: float = 0.5,
        num_warmup_samples: int = 8,
        score: str = "ei",
        max_train_samples: int = 1024,
        seed: int = 0,
        feature_cache_rows: int = 100_000,
    ) -> None:
        super().__init__()
        if n_estimators < 2:
            raise ValueError(f"n_estimators must be >= 2 (the spread of trees is the uncertainty), got {n_estimators!r} instead")
        if score not in ("ei", "mean"):
            raise ValueError(f"score must be 'ei' or 'mean', got {score!r} instead")
        if max_train_samples < num_warmup_samples:
            raise ValueError(f"max_train_samples must be >= num_warmup_samples ({num_warmup_samples}), "
                             f"got {max_train_samples!r} instead")
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.max_features = max_features
        self.num_warmup_samples = num_warmup_samples
        self.score = score
        self.max_train_samples = max_train_samples
        self.seed = seed
        self.groups_: dict[str, _Group] = {}
        self.forest_: Any = None
        self.fits_ = 0
        # (task the forest was fitted for, or None when on every record; records it had then)
        self._fitted_for: tuple[str | None, int] | None = None
        self.rng_ = np.random.default_rng(seed)
        self._features = CandidateFeatures(max_rows=feature_cache_rows)  # 0: every row computed again (benchmarks)
        self.seconds_ = {"predict": 0.0, "update": 0.0}  # host time in MetaSchedule's calls, features included
        self._observers = threading.local()  # see observing()

    @staticmethod
    def _group_key(context: Any) -> str:
        from tvm.s_tir.meta_schedule.utils import shash2hex

        return shash2hex(context.mod)

    # -- MetaSchedule interface ----------------------------------------------------
    def load(self, path: str) -> None:
        with open(path, "rb") as handle:
            self.groups_, self.forest_ = pickle.load(handle)
        self._fitted_for = None

    def save(self, path: str) -> None:
        with open(path, "wb") as handle:
            pickle.dump((self.groups_, self.forest_), handle)

    @property
    def features(self) -> CandidateFeatures:
        """The feature rows this model reads (cached per program; its stats say what that saved)."""
        return self._features

    def update(self, context: Any, candidates: list[Any], results: list[Any]) -> None:
        started = time.perf_counter()
        try:
            self._update(context, candidates, results)
        finally:
            self.seconds_["update"] += time.perf_counter() - started

    def _update(self, context: Any, candidates: list[Any], results: list[Any]) -> None:
        if not candidates:
            return
        costs = []
        for result in results:
            secs = [float(s) for s in (result.run_secs or [])]
            costs.append(float(np.median(secs)) if secs and not result.error_msg else FAILURE_THRESHOLD_SECS)
        self.add_measured(self._group_key(context), self._features(context, candidates), costs)

    def predict(self, context: Any, candidates: list[Any]) -> np.ndarray:
        started = time.perf_counter()
        try:
            return self._predict(context, candidates)
        finally:
            self.seconds_["predict"] += time.perf_counter() - started

    def _predict(self, context: Any, candidates: list[Any]) -> np.ndarray:
        calls = getattr(self._observers, "calls", None)
        hashes: list[int] | None = [] if calls is not None else None
        mu, sigma = self._mean_std(context, candidates, hashes)
        if mu is None:
            return self.rng_.uniform(size=len(candidates)).astype("float64")
        scores = mu if self.score == "mean" else expected_improvement(mu, sigma, best=1.0)
        if calls is not None:  # the predicted throughput (1.0: the task's best measured), whatever ranks them
            calls.append((hashes, np.asarray(mu, dtype=float)))
        return scores

    @contextlib.contextmanager
    def observing(self) -> Iterator[list[tuple[list[int], np.ndarray]]]:
        """Within the block, this thread's ``predict`` calls, in order: (structural hashes, predicted throughputs) each.

        The evolutionary search predicts its whole population once per iteration, so the calls made while it
        proposes one batch are its iterations (:mod:`edgetune.search.effort` reads their returns). Calls made
        before the forest ranks anything (random warm-up scores) are not recorded.
        """
        calls: list[tuple[list[int], np.ndarray]] = []
        outer = getattr(self._observers, "calls", None)
        self._observers.calls = calls
        try:
            yield calls
        finally:
            self._observers.calls = outer

    # -- edgetune API ------------------------------------------------------------
    @property
    def num_samples_(self) -> int:
        return sum(len(g.costs) for g in self.groups_.values())

    @property
    def ranks(self) -> bool:
        """Whether :meth:`predict` returns the forest's scores; False in its warm-up, when they are random."""
        return self.num_samples_ >= self.num_warmup_samples

    def predict_mean_std(self, context: Any, candidates: list[Any]) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Mean and standard deviation of the normalised throughput (None before warm-up)."""
        return self._mean_std(context, candidates, None)

    def _mean_std(self, context: Any, candidates: list[Any], hashes: list[int] | None) -> tuple[np.ndarray | None, np.ndarray | None]:
        if not candidates or self.num_samples_ < self.num_warmup_samples:
            return None, None
        return self.predict_rows(self._group_key(context), self._features(context, candidates, hashes))

    def add_measured(self, task: str, rows: np.ndarray, costs: list[float]) -> None:
        """Record measured candidates of ``task``: feature rows and seconds (failures at the failure stub)."""
        group = self.groups_.setdefault(task, _Group())
        for row, cost in zip(rows, costs):
            group.features.append(np.asarray(row, dtype=float))
            group.costs.append(min(float(cost), FAILURE_THRESHOLD_SECS))

    def predict_rows(self, task: str, x: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Mean and standard deviation for feature rows of ``task`` (None before warm-up)."""
        forest = self._forest_for(task)
        if forest is None:
            return None, None
        x = self._pad(np.asarray(x, dtype=float))
        per_tree = np.stack([tree.predict(x) for tree in forest.estimators_])
        return per_tree.mean(axis=0), per_tree.std(axis=0)

    def _pad(self, x: np.ndarray) -> np.ndarray:
        width = self.forest_.n_features_in_
        if x.shape[1] < width:
            x = np.pad(x, ((0, 0), (0, width - x.shape[1])))
        return x[:, :width]

    def _forest_for(self, task: str) -> Any:
        """The forest for ``task``'s predictions, fitted now if records came since the last fit."""
        total = self.num_samples_
        if total < self.num_warmup_samples:
            return None
        focus = task if total > self.max_train_samples else None
        if self._fitted_for != (focus, total) or self.forest_ is None:
            x, y = self.training_set(focus)
            self._fit(x, y)
            self._fitted_for = (focus, total)
        return self.forest_

    def training_set(self, focus: str | None) -> tuple[np.ndarray, np.ndarray]:
        """Feature rows and targets one fit reads: every record, or at most ``max_train_samples`` around ``focus``."""
        parts = [(key, np.asarray(g.features), g.targets) for key, g in self.groups_.items() if g.costs]
        if focus is None:
            return stack_rows([r for _, x, _ in parts for r in x]), np.concatenate([y for _, _, y in parts])
        rng = np.random.default_rng((self.seed, self.num_samples_))
        rows: list[np.ndarray] = []
        targets: list[np.ndarray] = []
        own = [(x, y) for key, x, y in parts if key == focus]
        if own:
            x, y = own[0]
            keep = np.sort(rng.choice(len(y), self.max_train_samples, replace=False)) if len(y) > self.max_train_samples else np.arange(len(y))
            rows.extend(x[keep])
            targets.append(y[keep])
        others = [(x, y) for key, x, y in parts if key != focus]
        room = self.max_train_samples - sum(len(t) for t in targets)
        if others and room > 0:
            index = [(i, j) for i, (_, y) in enumerate(others) for j in range(len(y))]
            for k in np.sort(rng.choice(len(index), min(room, len(index)), replace=False)):
                i, j = index[k]
                rows.append(others[i][0][j])
                targets.append(others[i][1][j : j + 1])
        return stack_rows(rows), np.concatenate(targets)

    def _fit(self, x: np.ndarray, y: np.ndarray) -> None:
        from sklearn.ensemble import RandomForestRegressor

        forest = RandomForestRegressor(
            n_estimators=self.n_estimators,
            min_samples_leaf=self.min_samples_leaf,
            max_features=self.max_features,
            random_state=self.seed,
            n_jobs=1,
        )
        self.forest_ = forest.fit(x, y)
        self.fits_ += 1


def mean_std_or_none(model: Any, context: Any, candidates: list[Any]) -> tuple[Any, Any]:
    """``model.predict_mean_std`` when the model has one, else ``(None, None)``."""
    method = getattr(model, "predict_mean_std", None)
    if method is None:
        return None, None
    try:
        return method(context, candidates)
    except Exception:  # noqa: BLE001 - exploration falls back to the fixed share
        return None, None


__all__ = ["CandidateFeatures", "RandomForestModel", "aggregate_features", "expected_improvement", "mean_std_or_none", "stack_rows"]
