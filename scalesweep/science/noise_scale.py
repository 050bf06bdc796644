"""The gradient noise scale B_simple = tr(Σ) / |G|² (McCandlish et al. 2018, Appendix A). Pure.

Σ is the per-sample gradient covariance and G the true gradient. A gradient averaged over B
samples has E|G_B|² = |G|² + tr(Σ)/B, so two batch sizes give two equations in the two
unknowns. With |G_small|² the mean squared norm of gradients over batches of B_small samples and
|G_big|² the squared norm of the gradient over B_big samples:

    |G|²  ≈ (B_big |G_big|² − B_small |G_small|²) / (B_big − B_small)
    tr Σ  ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

Each is unbiased but noisy (one update gives one sample of each), so both are smoothed by an
exponential moving average before the ratio is taken; the ratio of two unbiased estimates is not
unbiased, which is why the paper (and this module) averages first and divides last.

In data parallelism both norms come for free: the small batches are the per-rank gradients
before the all-reduce, the big batch is the all-reduced gradient. B_simple is where the
critical batch size sits, roughly: below it, doubling the batch halves the updates needed;
well above it, it buys little.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

#: weight of the past in the EMA (convergence.smooth's convention): ~20 updates of memory
EMA_DECAY = 0.95


def _check_batches(b_small: float, b_big: float) -> None:
    if not b_small > 0:
        raise ValueError(f"b_small must be positive, but got {b_small=}")
    if not b_big > b_small:
        raise ValueError(f"b_big must be larger than b_small, but got {b_small=}, {b_big=}")


def estimate(g_small_sq: float, g_big_sq: float, b_small: float, b_big: float) -> tuple[float, float]:
    """(|G|², tr Σ): unbiased estimates from one pair of squared gradient norms.

    ``g_small_sq`` is the mean of |g|² over the small batches (each of ``b_small`` samples),
    ``g_big_sq`` the |g|² of the batch of ``b_big`` samples. Either may come out negative for
    one update: it is an estimate, averaged later.
    """
    _check_batches(b_small, b_big)
    g_sq = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small)
    trace = (g_small_sq - g_big_sq) / (1.0 / b_small - 1.0 / b_big)
    return g_sq, trace


@dataclass
class NoiseScale:
    """The running B_simple of one trial: EMAs of the |G|² and tr Σ estimates, updated once per
    optimizer update; ``state()``/``from_state()`` carry it through a checkpoint.

    The EMAs start at zero and are bias-corrected as in Adam, so every update so far has its
    proper weight (seeding with the first estimate would let one noisy update dominate the
    first ~1/(1 − decay) updates). The correction cancels in the ratio.
    """

    b_small: float
    b_big: float
    decay: float = EMA_DECAY
    updates: int = 0  # estimates averaged so far
    g_sq_ema: float = 0.0  # raw (uncorrected) EMA of the |G|² estimates
    trace_ema: float = 0.0  # raw EMA of the tr Σ estimates

    def __post_init__(self) -> None:
        _check_batches(self.b_small, self.b_big)
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), but got decay={self.decay}")

    def update(self, g_small_sq: float, g_big_sq: float, b_big: float | None = None) -> None:
        """One measurement. ``b_big``: this one's big batch where it is not ``self.b_big`` (a
        batch-size ramp's smaller stages); |G|² and tr Σ estimate properties of the gradient,
        not of the batch, so estimates from different big batches share one average."""
        g_sq, trace = estimate(g_small_sq, g_big_sq, self.b_small, b_big or self.b_big)
        if not (math.isfinite(g_sq) and math.isfinite(trace)):
            return  # a diverging update: keep what was learned so far
        a = self.decay
        self.g_sq_ema = a * self.g_sq_ema + (1.0 - a) * g_sq
        self.trace_ema = a * self.trace_ema + (1.0 - a) * trace
        self.updates += 1

    def _corrected(self, raw: float) -> float:
        return raw / (1.0 - self.decay**self.updates) if self.updates else math.nan

    @property
    def g_sq(self) -> float:
        """The smoothed |G|² estimate (NaN before the first update)."""
        return self._corrected(self.g_sq_ema)

    @property
    def trace(self) -> float:
        """The smoothed tr Σ estimate (NaN before the first update)."""
        return self._corrected(self.trace_ema)

    @property
    def value(self) -> float:
        """B_simple = EMA(tr Σ) / EMA(|G|²); NaN before the first update or while the |G|²
        average is not positive (noise swamps the signal: B_simple is huge and unknown)."""
        if not self.updates or self.g_sq_ema <= 0.0:
            return math.nan
        return self.trace_ema / self.g_sq_ema

    def with_decay(self, decay: float) -> NoiseScale:
        """The same averages (bias-corrected, so the same ``g_sq``, ``trace`` and ``value``)
        carried on under another per-update decay: for a run resumed under another
        measurement cadence."""
        if decay == self.decay or not self.updates:
            return NoiseScale(self.b_small, self.b_big, decay, self.updates, self.g_sq_ema, self.trace_ema)
        keep = 1.0 - decay**self.updates  # the new decay's bias correction after as many updates
        return NoiseScale(self.b_small, self.b_big, decay, self.updates, self.g_sq * keep, self.trace * keep)

    def state(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, float]) -> NoiseScale:
        return cls(b_small=state["b_small"], b_big=state["b_big"], decay=state["decay"],
                   updates=int(state["updates"]), g_sq_ema=state["g_sq_ema"],
                   trace_ema=state["trace_ema"])
