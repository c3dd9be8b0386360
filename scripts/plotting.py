"""What every study's figures share: the matplotlib style, reading a ``runs.csv`` and saving.

Figures are made only from committed CSVs, with a fixed style and no timestamps in the files, so
``make figures`` redraws them offline byte for byte. Each file is written beside its name and
renamed over it, and a script's figures, drawn inside :func:`figure_set`, replace the old ones
only once every one is drawn: a full disk, a failed figure or results that are not whole leave
the old figures, never a 0-byte file or a set half old and half new; a set killed while it puts
its figures in place is completed before anything reads them (:mod:`scripts.figure_sets`).
"""

from __future__ import annotations

import contextlib
import csv
import multiprocessing
import os
import sys
import warnings
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import t as student_t

from experiments.kit.errors import BadResults, MissingResult
from experiments.kit.files import open_new, writable
from scripts import figure_sets
from scripts.analysis import committed
from scripts.analysis.stats import Estimate

FIGURES = Path("results/figures")
_set: str | None = None  # the figure set being drawn (figure_set), inherited by draw's workers
TITLES = {
    "mnist": "MNIST",
    "fashion_mnist": "Fashion-MNIST",
    "mnist_triples": "MNIST triples (1,000 classes)",
}
plt.rcParams.update(
    {
        "figure.dpi": 110,
        "font.size": 9,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "savefig.bbox": "tight",
        "svg.hashsalt": "bn",
    }
)


def read_curves(path: Path) -> dict:
    """``{(setup, seed): {metric: (steps, values)}}`` from a ``runs.csv`` (the results layer's
    reader, arranged for plotting); a missing file or a row that is not whole (a file cut short)
    ends the figure script with one line naming it."""
    try:
        runs = committed.read_runs(path)
    except (MissingResult, BadResults) as e:
        raise SystemExit(f"error: {e}") from None
    data: dict = defaultdict(dict)
    for (setup, metric), by_seed in runs.items():
        for seed, curve in by_seed.items():
            data[(setup, seed)][metric] = (list(curve), list(curve.values()))
    return data


def has(data: dict, setup: str) -> bool:
    return any(k[0] == setup for k in data)


def series(data: dict, setup: str, metric: str):
    """``(steps, values)`` of ``metric`` for every seed of ``setup``: ``(n,)``, ``(seeds, n)``."""
    runs = [v[metric] for (s, _), v in sorted(data.items()) if s == setup and metric in v]
    n = min(len(steps) for steps, _ in runs)
    return np.array(runs[0][0][:n]), np.array([v[:n] for _, v in runs])


# the one spread every figure draws, and how its line averages the seeds
SPREAD = "lines: mean over seeds (geometric on log axes); shaded: its 95% t-interval"


def geometric(metric: str) -> bool:
    """Whether a metric is averaged over seeds on the log scale: every positive quantity that
    spans orders of magnitude (losses, drifts, gradient and smoothness measures, norms, singular
    values), as the claims average them; not accuracies, fractions, cosines or the lr."""
    excluded = ("acc", "cosine", "in_band", "clipped", "r_max", "d_max")
    return metric != "lr" and not any(k in metric for k in excluded)


def t_band(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column of ``v`` (seeds, points): the mean over the seeds with a finite value and its
    95% Student-t interval (NaN where fewer than two seeds have one), as the claims compute it."""
    v = np.asarray(v, dtype=float)
    v = np.where(np.isfinite(v), v, np.nan)  # ±inf is left out like NaN, from the mean and the band
    n = np.isfinite(v).sum(0)
    with warnings.catch_warnings():  # columns with no or one finite value are NaN, on purpose
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(np.where(np.isfinite(v), v, np.nan), 0)
        sd = np.where(n > 1, np.nanstd(v, 0, ddof=1), np.nan)
        q = np.where(n > 1, student_t.ppf(0.975, np.maximum(n - 1, 1)), np.nan)
        half = q * sd / np.sqrt(np.maximum(n, 1))
    return mean, mean - half, mean + half


def interval_errors(e: Estimate) -> tuple[float, float]:
    """How far ``e``'s 95% interval reaches below and above its mean (an errorbar's ``yerr``);
    0 and 0 where it has none (one seed)."""
    low, high = e.interval() or (e.mean, e.mean)
    return e.mean - low, high - e.mean


def mean_band(
    ax, data: dict, setup: str, metric: str, color: str, label: str, style: str = "-",
    alpha: float = 0.15, band: bool = True,
) -> None:  # fmt: skip
    """``metric`` of every seed of ``setup``: the mean over seeds as a line and its 95%
    t-interval as a band (:data:`SPREAD`; NaN-aware: a diverged seed leaves a gap, not a hole in
    every curve); ``{n}`` in ``label`` becomes the number of seeds. Draws nothing if no seed of
    ``setup`` logged ``metric``. The mean is geometric for the metrics :func:`geometric` names."""
    if not any(metric in v for (s, _), v in data.items() if s == setup):
        return
    steps, v = series(data, setup, metric)
    if np.isnan(v).all():
        print(
            f"warning: every {metric} value of {setup} is NaN (diverged?): not drawn",
            file=sys.stderr,
        )
        return
    log = geometric(metric)
    mean = spread_band(ax, steps, v, color, alpha, log) if band else seed_mean(v, log)[0]
    ax.plot(steps, mean, style, color=color, label=label.format(n=len(v)))


def read_rows(path: Path) -> list[dict]:
    """The rows of a results CSV; a missing one ends the figure script with one line."""
    try:
        with path.open() as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        raise SystemExit(
            f"error: {path} does not exist: run the study's make target first"
        ) from None


def seed_mean(v: np.ndarray, log: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`t_band` of ``v`` (seeds, points), on the log scale with ``log``: the geometric
    mean and its interval (non-positive values left out)."""
    if not log:
        return t_band(v)
    mean, low, high = t_band(np.log10(np.where(np.asarray(v, dtype=float) > 0, v, np.nan)))
    return 10**mean, 10**low, 10**high


def spread_band(
    ax, x, v: np.ndarray, color: str, alpha: float = 0.15, log: bool = False
) -> np.ndarray:
    """Shade the 95% t-interval of the mean of ``v`` (seeds, points), geometric with ``log``,
    and note it in the figure's title (:func:`save`); returns the mean."""
    mean, low, high = seed_mean(v, log)
    if len(v) > 1:
        ax.fill_between(x, low, high, color=color, alpha=alpha, lw=0)
        ax.figure.spread = True
    return mean


def save(fig, name: str) -> Path:
    """``results/figures/<name>`` (PNG) and the same figure as a vector file (SVG) beside it,
    for papers and slides; neither holds a date, so a redraw gives the same bytes. A figure with
    a band from :func:`spread_band` says what the band is under its title."""
    if getattr(fig, "spread", False):
        title = fig._suptitle.get_text() if fig._suptitle is not None else ""
        fig.suptitle(f"{title}\n{SPREAD}" if title else SPREAD)
    path = FIGURES / name
    if (blocked := writable(FIGURES)) is not None:
        plt.close(fig)
        raise SystemExit(f"error: {blocked} cannot be written (read-only?): no figure replaced")
    FIGURES.mkdir(parents=True, exist_ok=True)
    token = _set or str(os.getpid())
    files = [(path, "png", {"Software": None}), (path.with_suffix(".svg"), "svg", {"Date": None})]
    try:
        for file, kind, metadata in files:
            with open_new(figure_sets.staged(file, token), "wb") as f:
                fig.savefig(f, format=kind, metadata=metadata)
    except BaseException:
        figure_sets.discard(FIGURES, token)
        raise
    finally:
        plt.close(fig)
    if _set is None:  # a figure on its own: in place at once
        figure_sets.commit(FIGURES, token)
    return path


@contextlib.contextmanager
def figure_set() -> Iterator[None]:
    """Inside the block, :func:`save` stages each figure (PNG and SVG) beside its name; when the
    block ends without an error every staged figure replaces its old file, and on an error none
    does (an error among the renames themselves leaves the rest to the next set or reader). Results that are not whole and a file that cannot be written end the script with one
    line, naming them."""
    global _set
    if FIGURES.is_dir():
        figure_sets.clear_stale(FIGURES)
    _set = str(os.getpid())
    try:
        yield
        figure_sets.commit(FIGURES, _set)
    except BaseException as e:
        figure_sets.discard(FIGURES, _set)
        if isinstance(e, (BadResults, MissingResult)):
            raise SystemExit(f"error: {e}; no figure replaced") from None
        if isinstance(e, OSError):
            why = f"{e.strerror or e}{f': {e.filename}' if e.filename else ''}"
            raise SystemExit(
                f"error: a figure could not be written ({why}); {_left(_set)}"
            ) from None
        raise
    finally:
        _set = None


def _left(token: str) -> str:
    """What a figure set that failed left: nothing, or, where it failed while putting its
    figures in place, the rest for the next figure set or reader to put there."""
    if figure_sets.pending(FIGURES, token):
        return "the set is put in place whole by the next figure script or reader"
    return "no figure replaced"


def draw(jobs: list[tuple]) -> list[Path | None]:
    """Run each ``(figure function, *args)``; on Linux, side by side in forked processes (laying
    out and drawing a figure takes 1-2 s, and ``make reproduce-mnist`` waits for them)."""
    if sys.platform != "linux" or len(jobs) < 2:
        return [f(*args) for f, *args in jobs]
    workers = min(len(jobs), os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return [job.result() for job in [pool.submit(f, *args) for f, *args in jobs]]
