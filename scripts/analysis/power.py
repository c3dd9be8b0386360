"""How many seeds decide a claim: the power calculation behind every confirmatory seed count.

Every rule of the claims table reads a mean over seeds (a paired difference, or a log ratio) with
a Student-t interval, and decides at a one-sided level of :data:`ALPHA_ONE_SIDED` in either
direction (the two-sided 95% interval it prints). For ``n`` seeds whose per-seed values have
standard deviation ``sd``:

- **a directional claim** (``mean > bound``, :func:`power_directional`) is shown with the
  probability that the t statistic clears its critical value when the true mean sits ``effect``
  past the bound on the claimed side: the noncentral t distribution with ``n − 1`` degrees of
  freedom and noncentrality ``effect·√n / sd``;
- **not worse than a margin** (non-inferiority) is the same test against ``−margin``, with the
  true difference ``assumed`` (0: no difference);
- **no difference within ±margin** (two one-sided tests, :func:`power_equivalence`) needs both
  ends of the interval inside the margin: its exact power integrates over the distribution of the
  sample standard deviation (Owen 1965; Schuirmann 1987), since both tests share it.

The spread is a pilot's, which is itself uncertain (a standard deviation from 2 seeds has one
degree of freedom), so the calculation uses its one-sided :data:`SD_CONFIDENCE` upper confidence
limit (:func:`sd_upper`; Browne 1995, "On the use of a pilot sample for sample size
determination"), not the pilot's point value. :func:`seeds_for` is the fewest seeds with at least
:data:`POWER` power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import integrate
from scipy import stats as _scipy

ALPHA_ONE_SIDED = 0.025  # each direction: what the two-sided 95% interval decides
POWER = 0.9
SD_CONFIDENCE = 0.8  # the pilot's SD at its one-sided 80% upper confidence limit
SEARCH_LIMIT = 1000  # a search bound, far above any seed count this repository could afford


def sd_upper(sd: float, df: int, confidence: float = SD_CONFIDENCE) -> float:
    """The one-sided ``confidence`` upper limit of a standard deviation estimated with ``df``
    degrees of freedom: ``sd·√(df / χ²_{1−confidence, df})``."""
    if df < 1:
        raise ValueError(f"a standard deviation needs at least 2 values (df={df})")
    return sd * math.sqrt(df / _scipy.chi2.ppf(1 - confidence, df))


def _critical(n: int, alpha: float) -> float:
    return float(_scipy.t.ppf(1 - alpha, n - 1))


def power_directional(effect: float, sd: float, n: int, alpha: float = ALPHA_ONE_SIDED) -> float:
    """The probability that ``n`` seeds show ``mean > bound`` at one-sided level ``alpha`` when
    the true mean is ``effect`` past the bound (``effect`` ≤ 0: at most ``alpha``)."""
    if n < 2:
        return 0.0
    nc = effect * math.sqrt(n) / sd
    value = float(_scipy.nct.sf(_critical(n, alpha), n - 1, nc))
    return value if math.isfinite(value) else float(nc > 0)  # scipy's nan far in the tails


def power_refuting(distance: float, sd: float, n: int, alpha: float = ALPHA_ONE_SIDED) -> float:
    """The probability that ``n`` seeds show the mean on the other side of a bound (one-sided at
    ``alpha``) when it truly sits ``distance`` past the bound on the claimed side (a negative
    ``distance``: on the other side by that much)."""
    if n < 2:
        return 0.0
    nc = distance * math.sqrt(n) / sd
    value = float(_scipy.nct.cdf(-_critical(n, alpha), n - 1, nc))
    return value if math.isfinite(value) else float(nc < 0)  # scipy's nan far in the tails


def power_outside(
    margin: float, sd: float, n: int, assumed: float, alpha: float = ALPHA_ONE_SIDED
) -> float:
    """The probability that the interval lies wholly outside ``±margin`` (a claim of no
    difference refuted) when the true difference is ``assumed``."""
    return power_refuting(margin - assumed, sd, n, alpha) + power_refuting(
        margin + assumed, sd, n, alpha
    )


def power_equivalence(
    margin: float, sd: float, n: int, assumed: float = 0.0, alpha: float = ALPHA_ONE_SIDED
) -> float:
    """The probability that the two one-sided tests at ``alpha`` put the whole interval inside
    ``±margin`` when the true difference is ``assumed``: exact, by integrating over the sample
    variance ``(n − 1)s²/σ² ~ χ²_{n−1}``."""
    if n < 2:
        return 0.0
    df, t, se = n - 1, _critical(n, alpha), sd / math.sqrt(n)
    # Both tests reject when −margin + t·s/√n < mean < margin − t·s/√n: only for s < margin·√n/t.
    # Integrated over the chi-square's quantiles q (u = F⁻¹(q)), so the quadrature sees all of
    # its mass however wide the range of u.
    q_max = _scipy.chi2.cdf(df * (margin * math.sqrt(n) / (t * sd)) ** 2, df)

    def given(q: float) -> float:
        u = _scipy.chi2.ppf(q, df)
        half = t * sd * math.sqrt(u / df) / math.sqrt(n)
        lo, hi = -margin + half - assumed, margin - half - assumed
        return max(0.0, _scipy.norm.cdf(hi / se) - _scipy.norm.cdf(lo / se))

    value, _ = integrate.quad(given, 0, q_max, limit=200, epsabs=1e-10)
    return min(1.0, value)


@dataclass(frozen=True)
class Need:
    """A seed count from a power calculation and what went into it."""

    n: int | None  # None: more than SEARCH_LIMIT seeds
    sd_pilot: float
    df_pilot: float  # a pooled or Welch estimate's degrees of freedom need not be n - 1
    sd_used: float  # the pilot's SD at its upper confidence limit

    def count(self) -> str:
        return f"{self.n} seeds" if self.n is not None else f"more than {SEARCH_LIMIT} seeds"

    def text(self, unit: str = "") -> str:
        """``"32 seeds (pilot SD 1.08 pp, 4 degrees of freedom, 80% upper limit 1.68 pp)"``: the SDs in
        the estimate's unit (``"pp"`` for accuracy fractions, ``"×"`` for log10 ratios)."""

        def sd(v: float) -> str:
            if unit == "pp":
                return f"{v * 100:.3g} pp"
            return f"{v:.3g} (log10)" if unit == "×" else f"{v:.3g}"

        return (
            f"{self.count()} (pilot SD {sd(self.sd_pilot)}, {self.df_pilot:.3g} degrees of freedom, "
            f"{SD_CONFIDENCE:.0%} upper limit {sd(self.sd_used)})"
        )


def seeds_for(power_at, sd_pilot: float, df_pilot: int, least: int = 2) -> Need:
    """The fewest seeds ``n >= least`` with ``power_at(n, sd) >= POWER``, ``sd`` the pilot's
    standard deviation at its upper confidence limit. ``power_at`` is one of this module's power
    functions with the claim's effect or margin bound in."""
    sd = sd_upper(sd_pilot, df_pilot)
    least = max(least, 2)
    if sd == 0:
        return Need(least, sd_pilot, df_pilot, sd)
    enough = lambda n: power_at(n, sd) >= POWER  # noqa: E731  (power grows with n)
    if not enough(SEARCH_LIMIT):
        return Need(None, sd_pilot, df_pilot, sd)
    lo, hi = least - 1, SEARCH_LIMIT  # enough(hi); not enough(lo) unless lo < least
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return Need(hi, sd_pilot, df_pilot, sd)
