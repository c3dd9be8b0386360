"""The analysis plan's statistics: what every claim in ``results/CLAIMS.md`` computes.

- A quantity measured once per seed is summarised by its mean and a Student-t interval with the
  exact quantile of ``n - 1`` degrees of freedom (:class:`Estimate`). Two setups are compared by
  seed (paired): the estimate is over the per-seed differences.
- A ratio is estimated on the log scale (:func:`log_ratios`): the per-seed ``log10(a / b)``, whose
  mean is the log of the geometric-mean ratio, so no one seed or evaluation dominates.
- Two setups whose runs share no data order (nothing pairs seed ``i`` of one with seed ``i`` of the
  other) are compared unpaired: Welch's difference of means with the Welch–Satterthwaite degrees
  of freedom (:func:`welch`), or, for a pilot too small for each arm's own variance, the pooled
  within-arm variance of every arm (:func:`pooled`).
- A ratio of two means (a share of a gap) gets Fieller's interval (:func:`fieller`).
- A claim of *no difference* is an equivalence test (two one-sided tests, :meth:`Estimate.tost`):
  the ``1 - 2α`` interval inside the margin.
- Several claims tested together: Holm's step-down method (:func:`holm`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scipy import stats as _scipy

from experiments.kit.errors import AnalysisError

LEVEL = 0.95  # every interval in the claims table, unless it says otherwise


class NonFinite(AnalysisError):
    """A claim's numbers hold NaN or infinity (a diverged run?): no interval, no verdict."""


class SeedMismatch(AnalysisError):
    """Two setups compared seed by seed hold different seeds, or a setup's results lack seeds
    its summary lists: a comparison over the seeds both happen to have would hide it."""


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: ``P(T <= q) = p`` with ``df`` degrees of freedom (exact)."""
    return float(_scipy.t.ppf(p, df))


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its standard error and degrees of freedom.

    ``log=True`` marks a mean of log10 ratios: :meth:`text` shows it as a factor. ``df`` is the
    t distribution's degrees of freedom where they are not ``n − 1`` (a difference of two
    independent means: ``n`` is then the smaller arm's seeds).
    """

    mean: float
    se: float | None  # None with one seed: no interval
    n: int
    log: bool = False
    df: float | None = None  # None: n - 1
    spread: float | None = None  # None: se·√n; a two-sample difference: √(var_a + var_b)

    @property
    def dof(self) -> float:
        """The degrees of freedom of the interval and the tests."""
        return self.n - 1 if self.df is None else self.df

    @classmethod
    def of(cls, values: Sequence[float], log: bool = False) -> Estimate:
        values = list(values)
        if not values or not all(math.isfinite(v) for v in values):
            raise NonFinite(f"an estimate of {values}: empty, or NaN/infinite (a diverged run?)")
        m = statistics.fmean(values)
        se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
        return cls(m, se, len(values), log)

    @property
    def sd(self) -> float | None:
        """The per-seed spread a power calculation scales by ``√n``: the seeds' SD, or for a
        difference of two independent arms of ``n`` seeds each, the SD of one seed of each."""
        if self.spread is not None:
            return self.spread
        return None if self.se is None else self.se * math.sqrt(self.n)

    def interval(self, level: float = LEVEL) -> tuple[float, float] | None:
        """The two-sided ``level`` t-interval of the mean (None with one seed)."""
        if self.se is None:
            return None
        half = t_quantile(0.5 + level / 2, self.dof) * self.se
        return self.mean - half, self.mean + half

    def p_greater(self, null: float) -> float:
        """One-sided p-value of "mean > null" (1 with one seed: nothing can be shown)."""
        if self.se is None:
            return 1.0
        if self.se == 0:
            return 0.0 if self.mean > null else 1.0
        return float(_scipy.t.sf((self.mean - null) / self.se, self.dof))

    def p_less(self, null: float) -> float:
        """One-sided p-value of "mean < null"."""
        if self.se is None:
            return 1.0
        if self.se == 0:
            return 0.0 if self.mean < null else 1.0
        return float(_scipy.t.cdf((self.mean - null) / self.se, self.dof))

    def tost(self, low: float, high: float) -> float:
        """Two one-sided tests of ``low < mean < high``: the larger of the two p-values (below
        α exactly when the ``1 - 2α`` interval lies inside the margin)."""
        return max(self.p_greater(low), self.p_less(high))

    def shifted(self, by: float) -> Estimate:
        return replace(self, mean=self.mean + by)

    def negated(self) -> Estimate:
        return replace(self, mean=-self.mean)

    def text(self, scale: float = 100, unit: str = " pp", digits: int = 2) -> str:
        """``+1.23 pp [+0.45, +2.01] (5 seeds)``, or ``0.57× [0.31, 1.04] (5 seeds)`` for a log
        ratio."""
        ci = self.interval()
        if self.log:
            fmt = lambda v: f"{10**v:.3g}"  # noqa: E731
            unit = "×" if unit == " pp" else unit
        else:
            sign = "+" if unit == " pp" else ""
            fmt = lambda v: f"{v * scale:{sign}.{digits}f}"  # noqa: E731
        if ci is None:
            return f"{fmt(self.mean)}{unit} (1 seed, no interval)"
        return f"{fmt(self.mean)}{unit} [{fmt(ci[0])}, {fmt(ci[1])}] ({self.n} seed{'s' * (self.n != 1)})"


def same_seeds(a: dict[int, float], b: dict[int, float]) -> list[int]:
    """The seeds of two per-seed sets, which must be the same (a SeedMismatch otherwise)."""
    if a.keys() != b.keys():
        raise SeedMismatch(
            f"seeds {sorted(a)} and {sorted(b)} differ: every compared setup must hold the same "
            "seeds (a missing seed is a missing run, not one to skip)"
        )
    return sorted(a)


def paired(a: dict[int, float], b: dict[int, float]) -> Estimate:
    """``a − b`` per seed; both must hold the same seeds."""
    return Estimate.of([a[s] - b[s] for s in same_seeds(a, b)])


def welch(a: Sequence[float], b: Sequence[float], log: bool = False) -> Estimate:
    """``mean(a) − mean(b)`` of two independent samples, with Welch's standard error and the
    Welch–Satterthwaite degrees of freedom (Welch 1947); ``n`` is the smaller sample's size.
    Both need 2+ values (a one-value arm has no variance of its own: see :func:`pooled`)."""
    a, b = list(a), list(b)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's test needs 2+ values per arm, got {len(a)} and {len(b)}")
    if not all(math.isfinite(v) for v in (*a, *b)):
        raise NonFinite(f"a difference of {a} and {b}: NaN or infinite (a diverged run?)")
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    mean = statistics.fmean(a) - statistics.fmean(b)
    se, n = math.sqrt(va + vb), min(len(a), len(b))
    spread = math.sqrt(statistics.variance(a) + statistics.variance(b))
    if se == 0:
        return Estimate(mean, 0.0, n, log, len(a) + len(b) - 2, spread)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return Estimate(mean, se, n, log, df, spread)


def pooled_sd(arms: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The pooled within-arm standard deviation of several arms (every arm with 2+ values
    contributes its squared deviations) and its degrees of freedom, ``Σ (n_i − 1)``."""
    squares, df = 0.0, 0
    for arm in arms:
        if len(arm) > 1:
            squares += statistics.variance(arm) * (len(arm) - 1)
            df += len(arm) - 1
    if df == 0:
        raise ValueError("a pooled standard deviation needs an arm with 2+ values")
    return math.sqrt(squares / df), df


def pooled(
    a: Sequence[float], b: Sequence[float], sd: float, df: int, log: bool = False
) -> Estimate:
    """``mean(a) − mean(b)`` with the standard error of a common within-arm ``sd`` (estimated
    with ``df`` degrees of freedom over every arm of a design, :func:`pooled_sd`): a pilot's
    comparison when its arms hold one or two seeds each."""
    if not a or not b:
        raise ValueError("a difference of means needs a value in each arm")
    se = sd * math.sqrt(1 / len(a) + 1 / len(b))
    mean = statistics.fmean(a) - statistics.fmean(b)
    return Estimate(mean, se, min(len(a), len(b)), log, df, sd * math.sqrt(2))


def log_ratios(a: dict[int, float], b: dict[int, float]) -> Estimate:
    """``log10(a / b)`` per seed (the same seeds in both): the geometric-mean ratio's estimate."""
    values = [a[s] / b[s] for s in same_seeds(a, b)]
    if any(not v > 0 for v in values):
        raise NonFinite(f"a ratio of {values}: every ratio must be positive for its logarithm")
    return Estimate.of([math.log10(v) for v in values], log=True)


@dataclass(frozen=True)
class Ratio:
    """A ratio of two means with Fieller's confidence set, of one of three kinds: ``"interval"``
    ``[low, high]``; ``"exclusive"``, everything *outside* ``(low, high)`` (the denominator
    cannot be told from 0, but the numerator can); ``"whole line"``, every ratio (neither can
    be told from 0: ``low``/``high`` None)."""

    value: float
    low: float | None
    high: float | None
    n: int
    den_mean: float  # the denominator's mean (a share needs a positive gap)
    kind: str = "interval"

    def text(self) -> str:
        """``65% [22%, 99%]``, ``65% (outside (−30%, 10%))`` or ``65% (any value)``; no share
        where the gap it would be a share of is not positive."""
        if self.den_mean <= 0:
            return (
                f"no share (the gap it would be a share of is not positive: {self.den_mean:+.3g})"
            )
        if self.kind == "whole line":
            return f"{self.value:.0%} (Fieller's set: every value; the gap cannot be told from 0)"
        if self.kind == "exclusive":
            return (
                f"{self.value:.0%} (Fieller's set: outside ({self.low:.0%}, {self.high:.0%}); "
                "the gap cannot be told from 0)"
            )
        return f"{self.value:.0%} [{self.low:.0%}, {self.high:.0%}]"


def fieller(num: Sequence[float], den: Sequence[float], level: float = LEVEL) -> Ratio:
    """``mean(num) / mean(den)`` for paired per-seed values, with Fieller's interval.

    The set of ``ρ`` for which ``mean(num) − ρ·mean(den)`` is not significantly different from 0
    at ``level``: the roots of ``(a − ρb)² = t² (v_aa − 2ρ v_ab + ρ² v_bb)``, with the
    covariance of the two means from the pairs (Fieller 1954).
    """
    if len(num) != len(den) or len(num) < 2:
        raise ValueError(f"Fieller's interval needs paired values from 2+ seeds, got {len(num)}")
    if not all(math.isfinite(v) for v in (*num, *den)):
        raise NonFinite(f"a ratio of {list(num)} / {list(den)}: NaN or infinite")
    n = len(num)
    v_aa = statistics.variance(num) / n
    v_bb = statistics.variance(den) / n
    v_ab = statistics.covariance(num, den) / n
    return fieller_of(
        statistics.fmean(num), statistics.fmean(den), v_aa, v_bb, v_ab, n - 1, n, level
    )


def fieller_of(
    a: float,
    b: float,
    v_aa: float,
    v_bb: float,
    v_ab: float,
    df: float,
    n: int,
    level: float = LEVEL,
) -> Ratio:
    """Fieller's set for ``a / b`` from two estimated means, their variances and covariance
    (``v_aa``, ``v_bb``, ``v_ab``) and the t distribution's ``df``; ``n`` is reported as the
    seeds behind it. :func:`fieller` is the paired case; differences of independent arms that
    share one (a share of a speed-up over a common baseline) have the shared arm's variance as
    their covariance."""
    if not all(math.isfinite(v) for v in (a, b, v_aa, v_bb, v_ab)):
        raise NonFinite(f"a ratio of {a} / {b}: NaN or infinite")
    t2 = t_quantile(0.5 + level / 2, df) ** 2
    # (b² − t² v_bb) ρ² − 2 (ab − t² v_ab) ρ + (a² − t² v_aa) = 0
    qa, qb, qc = b * b - t2 * v_bb, a * b - t2 * v_ab, a * a - t2 * v_aa
    value = a / b if b else math.nan
    disc = qb * qb - qa * qc
    if qa > 0:  # the denominator is told from 0: a bounded interval (disc ≥ 0 up to rounding)
        root = math.sqrt(max(disc, 0.0))
        return Ratio(value, (qb - root) / qa, (qb + root) / qa, n, b)
    if disc < 0 or qa == 0:  # every ratio is consistent with the data
        return Ratio(value, None, None, n, b, "whole line")
    root = math.sqrt(disc)  # qa < 0: the quadratic is ≤ 0 outside its roots
    lo, hi = sorted(((qb - root) / qa, (qb + root) / qa))
    return Ratio(value, lo, hi, n, b, "exclusive")


def holm(p_values: Sequence[float], alpha: float = 1 - LEVEL) -> list[bool]:
    """Holm's step-down method: which of the hypotheses are rejected with the family-wise error
    rate at most ``alpha``."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected
