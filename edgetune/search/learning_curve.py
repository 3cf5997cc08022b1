"""DynaTune's belief model: a task's best-so-far GFLOPS curve fitted with a saturating learning curve.

A log-power curve, segmented after >20% jumps, with a Laplace or MCMC
posterior whose samples predict how much a task's next slots would gain
(:class:`~edgetune.search.scheduler.SlotBandit` decides with it).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy.optimize import least_squares

from ..common.failure import is_valid_ms
from ..errors import SchedulerError

#: posteriors of :class:`LearningCurveBelief`
POSTERIORS = ("laplace", "mcmc")


def _require(ok: bool, what: str, value: Any) -> None:
    if not ok:
        raise SchedulerError(f"{what}, got {value!r} instead")


# ---------------------------------------------------------------------------
def log_power(x: np.ndarray, log_a: Any, b: Any, log_c: Any) -> np.ndarray:
    """Domhan et al.'s log-power curve ``a / (1 + (x / e^b)^-c)``.

    Written as ``a * sigmoid(c * (log x - b))``: increasing in ``x`` for any
    parameters (``c = exp(log_c) > 0``) and saturating at ``a``. Broadcasts
    over parameter arrays (posterior samples) and ``x``.
    """
    z = np.exp(log_c) * (np.log(x) - b)
    return np.exp(log_a) / (1.0 + np.exp(-np.clip(z, -60.0, 60.0)))


def segment_start(best: Sequence[float], *, jump: float = 0.2, min_points: int = 4) -> int:
    """Index where the last curve segment starts (DynaTune's piece-wise fit).

    A new segment starts at every point more than ``jump`` (relative) above the
    previous best. The newest segment is used only if it has ``min_points``
    points; otherwise it is merged with the one before, so that a jump in the
    last batch widens the posterior instead of leaving nothing to fit.
    """
    cuts = [0] + [i for i in range(1, len(best)) if best[i] > (1.0 + jump) * best[i - 1]]
    for start in reversed(cuts):
        if len(best) - start >= min_points:
            return start
    return 0


class LearningCurveBelief:
    """Posterior over a task's best-so-far performance curve.

    Fits :func:`log_power` to the points of the last segment (trial index ->
    best-so-far performance, normalised), then represents uncertainty by
    parameter samples: from a Laplace approximation (Gaussian at the MAP, with
    the Gauss-Newton covariance; milliseconds) or, as in the paper, from
    ``emcee``'s affine-invariant ensemble sampler started around the MAP
    (``posterior="mcmc"``; a few hundred ms). Both use the same likelihood
    (Gaussian noise, scale estimated from the MAP residuals) and weak priors
    (curve asymptote near the observed level and, when the data is normalised by
    the device's peak, not above 1; half-saturation inside the observed range).

    Parameters
    ----------
    jump:
        Relative jump that starts a new segment (the paper's 20%).
    min_segment_points:
        Fewest points a segment needs to be fitted on its own.
    posterior:
        ``"laplace"`` or ``"mcmc"``.
    num_samples:
        Posterior samples kept for prediction (the paper uses 200).
    min_noise:
        Floor of the noise scale, relative to the last observed value: a
        perfect fit of a few points must not claim certainty.
    mcmc_walkers, mcmc_steps, mcmc_burn:
        ``emcee`` settings (the paper: 10 walkers, 500 steps; converged by 100).
    bounded:
        Whether values are normalised by a true peak, so the asymptote is
        softly limited to 1.
    seed:
        Seed of the sampling.
    """

    def __init__(
        self,
        *,
        jump: float = 0.2,
        min_segment_points: int = 4,
        posterior: str = "laplace",
        num_samples: int = 200,
        min_noise: float = 0.01,
        mcmc_walkers: int = 12,
        mcmc_steps: int = 400,
        mcmc_burn: int = 150,
        bounded: bool = False,
        seed: int = 0,
    ) -> None:
        _require(jump > 0, "jump must be > 0", jump)
        _require(isinstance(min_segment_points, int) and min_segment_points >= 2, "min_segment_points must be an int >= 2", min_segment_points)
        _require(posterior in POSTERIORS, f"posterior must be one of {', '.join(POSTERIORS)}", posterior)
        _require(isinstance(num_samples, int) and num_samples >= 10, "num_samples must be an int >= 10", num_samples)
        _require(min_noise > 0, "min_noise must be > 0", min_noise)
        _require(mcmc_walkers >= 8 and mcmc_steps > mcmc_burn >= 0, "mcmc_walkers must be >= 8 and mcmc_steps > mcmc_burn >= 0", (mcmc_walkers, mcmc_steps, mcmc_burn))
        self.jump = jump
        self.min_segment_points = min_segment_points
        self.posterior = posterior
        self.num_samples = num_samples
        self.min_noise = min_noise
        self.mcmc_walkers = mcmc_walkers
        self.mcmc_steps = mcmc_steps
        self.mcmc_burn = mcmc_burn
        self.bounded = bounded
        self.seed = seed

    # -- fitting -------------------------------------------------------------
    def _residuals(self, theta: np.ndarray, x: np.ndarray, y: np.ndarray, noise: float, level: float, span: float) -> np.ndarray:
        log_a, b, log_c = theta
        fit = (log_power(x, log_a, b, log_c) - y) / noise
        prior = [
            (log_a - math.log(level)) / 2.0,  # asymptote: within ~e^2 of the observed level
            (b - span) / 3.0,  # half-saturation: around the observed range
            log_c / 1.5,  # steepness: order 1
        ]
        if self.bounded:
            prior.append(max(0.0, log_a) / 0.05)  # above the device's peak: implausible
        return np.concatenate([fit, prior])

    def fit(self, x: Sequence[float], y: Sequence[float]) -> "LearningCurveBelief":
        """Fit trial indices ``x`` (>= 1, increasing) to best-so-far values ``y`` (> 0)."""
        x_all = np.asarray(x, dtype=float)
        y_all = np.asarray(y, dtype=float)
        _require(x_all.ndim == 1 and x_all.shape == y_all.shape and len(x_all) >= 2, "x and y must be 1-d of equal length >= 2", (x_all.shape, y_all.shape))
        _require(bool(np.all(x_all >= 1)), "x must be >= 1", float(x_all.min()))
        _require(bool(np.all(y_all > 0)), "y must be > 0", float(y_all.min()))
        start = segment_start(list(y_all), jump=self.jump, min_points=self.min_segment_points)
        xs, ys = x_all[start:], y_all[start:]
        level = float(ys[-1])
        span = float(np.log(xs[0] + 0.5 * (xs[-1] - xs[0]) + 1.0))
        noise = self.min_noise * level
        theta0 = np.array([math.log(level * 1.1), math.log(max(1.0, xs[0])), 0.0])
        sol = least_squares(self._residuals, theta0, args=(xs, ys, noise, level, span), method="lm")  # the priors keep it over-determined
        rms = float(np.sqrt(np.mean((log_power(xs, *sol.x) - ys) ** 2)))
        noise = max(noise, rms)
        sol = least_squares(self._residuals, sol.x, args=(xs, ys, noise, level, span), method="lm")
        jac = sol.jac
        cov = np.linalg.pinv(jac.T @ jac)
        self.segment_start_ = start
        self.theta_ = sol.x
        self.cov_ = cov
        self.noise_ = noise
        self.x_last_ = float(x_all[-1])
        self.y_last_ = float(y_all[-1])
        rng = np.random.default_rng(self.seed)
        if self.posterior == "laplace":
            self.samples_ = rng.multivariate_normal(sol.x, cov, size=self.num_samples, method="eigh")
        else:
            self.samples_ = self._mcmc(sol.x, cov, xs, ys, noise, level, span, rng)
        return self

    def _mcmc(self, theta: np.ndarray, cov: np.ndarray, xs, ys, noise, level, span, rng) -> np.ndarray:
        import emcee

        def log_prob(t: np.ndarray) -> float:
            r = self._residuals(t, xs, ys, noise, level, span)
            return -0.5 * float(r @ r)

        scale = np.sqrt(np.clip(np.diag(cov), 1e-8, 1.0))
        start = theta + 1e-2 * scale * rng.standard_normal((self.mcmc_walkers, len(theta)))
        sampler = emcee.EnsembleSampler(self.mcmc_walkers, len(theta), log_prob)
        sampler.random_state = np.random.RandomState(int(rng.integers(1 << 31))).get_state()
        sampler.run_mcmc(start, self.mcmc_steps, progress=False)
        self.acceptance_ = float(np.mean(sampler.acceptance_fraction))
        chain = sampler.get_chain(discard=self.mcmc_burn, flat=True)
        return chain[rng.choice(len(chain), size=self.num_samples, replace=len(chain) < self.num_samples)]

    # -- prediction ----------------------------------------------------------
    def sample_curves(self, x: Sequence[float] | float) -> np.ndarray:
        """Posterior samples of the curve at ``x``: shape (num_samples, len(x))."""
        s = self.samples_
        xv = np.atleast_1d(np.asarray(x, dtype=float))
        # a wide posterior (few points) can sample absurd asymptotes: keep them finite
        return log_power(xv[None, :], np.clip(s[:, 0:1], -50.0, 50.0), s[:, 1:2], np.clip(s[:, 2:3], -20.0, 5.0))

    def predict(self, x: Sequence[float] | float) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the curve at ``x``."""
        curves = self.sample_curves(x)
        return curves.mean(axis=0), curves.std(axis=0)

    def saturation(self) -> tuple[float, float]:
        """Posterior mean and standard deviation of the asymptote ``a``."""
        a = np.exp(self.samples_[:, 0])
        return float(a.mean()), float(a.std())

    def predict_next(self, steps: float) -> np.ndarray:
        """Samples of the best-so-far value ``steps`` trials after the last one.

        The curve's predicted *increase* is added to the last observed best
        (never below it): the prediction cannot be worse than what was
        measured, as the paper's prior encodes, and a curve that passes a
        little under the last point does not turn into a predicted loss.
        """
        curves = self.sample_curves([self.x_last_, self.x_last_ + steps])
        return self.y_last_ + np.maximum(0.0, curves[:, 1] - curves[:, 0])


def best_so_far(latencies_ms: Sequence[float], flop: float) -> tuple[np.ndarray, np.ndarray]:
    """Trial indices and best-so-far GFLOPS from a task's trial latencies.

    Trials before the first valid one are dropped; failed trials count as
    trials that did not improve.
    """
    xs, ys = [], []
    best = math.inf
    for i, ms in enumerate(latencies_ms, start=1):
        if is_valid_ms(ms):
            best = min(best, ms)
        if best < math.inf:
            xs.append(float(i))
            ys.append(flop / (best * 1e-3) / 1e9)
    return np.asarray(xs), np.asarray(ys)
