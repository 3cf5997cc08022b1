"""K-means sampling: measure one representative per cluster of similar candidates.

"Adaptive optimization ... K-means sampling and history database" §II.C: the
candidates a cost model proposes often crowd into one region of the space,
and neighbours perform alike. Clustering each proposed batch and measuring only
the candidate nearest each centroid removes near-duplicates before they cost
board time.

K is chosen by the paper's distance-threshold rule: try K = 1, 2, ... and take
the first K whose total within-cluster distance (the K-means loss) is at most
``distance_ratio`` times the loss of a single cluster. A batch of near
duplicates reaches the threshold with few clusters; a diverse batch keeps
(almost) all of its candidates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class SampleReport:
    """What one call of :meth:`KMeansSampler.select` did."""

    proposed: int
    kept: int

    @property
    def removed_fraction(self) -> float:
        return 1.0 - self.kept / self.proposed if self.proposed else 0.0


class KMeansSampler:
    """Pick one candidate per K-means cluster, K by the distance-threshold rule.

    Parameters
    ----------
    distance_ratio:
        Threshold on ``loss(K) / loss(1)``; smaller keeps more candidates.
    min_keep:
        Never keep fewer than this many candidates of a batch.
    seed:
        Seed of the K-means initialisation.
    """

    def __init__(self, distance_ratio: float = 0.3, min_keep: int = 1, seed: int = 0) -> None:
        if not distance_ratio > 0:
            raise ValueError(f"distance_ratio must be > 0, got {distance_ratio!r} instead")
        if min_keep < 1:
            raise ValueError(f"min_keep must be >= 1, got {min_keep!r} instead")
        self.distance_ratio = distance_ratio
        self.min_keep = min_keep
        self.seed = seed
        self.reports_: list[SampleReport] = []

    def choose_k(self, features: np.ndarray) -> tuple[int, np.ndarray]:
        """K by the threshold rule, and the cluster labels of each row for that K."""
        return self._choose_k(_varying_columns(features), self.distance_ratio, {})

    def _choose_k(self, x: np.ndarray, ratio: float, fits: dict[int, tuple[float, np.ndarray]]) -> tuple[int, np.ndarray]:
        """``fits`` caches K-means per K for one ``x`` (deterministic: fixed seed), so ratios can share them."""
        n = len(x)
        if n <= self.min_keep:
            return n, np.arange(n)
        total = float(np.sum((x - x.mean(axis=0)) ** 2))  # loss of one cluster
        if total <= 0.0:  # all candidates identical
            return self.min_keep, np.zeros(n, dtype=int)
        from sklearn.cluster import KMeans

        for k in range(max(1, self.min_keep), n):
            if k not in fits:
                model = KMeans(n_clusters=k, n_init=3, random_state=self.seed).fit(x)
                fits[k] = (float(model.inertia_), model.labels_)
            inertia, labels = fits[k]
            if inertia <= ratio * total:
                return k, labels
        return n, np.arange(n)

    def select(self, features: np.ndarray) -> list[int]:
        """Indices (ascending) of the candidates to measure: the one nearest each centroid."""
        keep = self.select_for_ratios(features, [self.distance_ratio])[self.distance_ratio]
        self.reports_.append(SampleReport(len(features), len(keep)))
        return keep

    def select_for_ratios(self, features: np.ndarray, ratios: Any) -> dict[float, list[int]]:
        """What :meth:`select` keeps at each of several distance ratios (one K-means fit per K,
        shared); used to replay the history (:mod:`edgetune.search.suggest`). Records no report."""
        features = np.asarray(features, dtype=float)
        if features.ndim != 2:
            raise ValueError(f"features must be a 2-D array (candidates x features), got shape {features.shape} instead")
        x = _varying_columns(features)
        fits: dict[int, tuple[float, np.ndarray]] = {}
        chosen: dict[float, list[int]] = {}
        for ratio in ratios:
            if not ratio > 0:
                raise ValueError(f"distance_ratio must be > 0, got {ratio!r} instead")
            k, labels = self._choose_k(x, float(ratio), fits)
            keep = []
            for cluster in range(k):
                members = np.flatnonzero(labels == cluster)
                if members.size == 0:
                    continue
                centroid = x[members].mean(axis=0)
                distances = np.sum((x[members] - centroid) ** 2, axis=1)
                keep.append(int(members[int(np.argmin(distances))]))
            chosen[ratio] = sorted(set(keep))
        return chosen

    @property
    def removed_fraction_(self) -> float:
        """Fraction of all candidates seen so far that were not measured."""
        proposed = sum(r.proposed for r in self.reports_)
        kept = sum(r.kept for r in self.reports_)
        return 1.0 - kept / proposed if proposed else 0.0


def _varying_columns(features: np.ndarray) -> np.ndarray:
    """Constant columns dropped (they carry no distance); the rest kept on their own scale.

    No per-column rescaling: scaling a column that only holds noise up to unit
    variance would weigh it like a real difference. MetaSchedule's features are
    already on log scales, and the paper clusters on raw Euclidean distance.
    """
    x = np.asarray(features, dtype=float)
    if x.size == 0:
        return x.reshape(len(x), 0)
    return x[:, x.std(axis=0) > 1e-12]
