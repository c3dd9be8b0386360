"""What every study's figures share: the matplotlib style, reading a ``runs.csv`` and saving.

Figures are made only from committed CSVs, with a fixed style and no timestamps in the files, so
``make figures`` redraws them offline byte for byte.
"""

from __future__ import annotations

import csv
import multiprocessing
import os
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from scripts.analysis import results

FIGURES = Path("results/figures")
TITLES = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}
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
        runs = results.read_runs(path)
    except (results.MissingResult, results.BadResults) as e:
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


def mean_band(
    ax, data: dict, setup: str, metric: str, color: str, label: str, style: str = "-",
    alpha: float = 0.15, band: bool = True,
) -> None:  # fmt: skip
    """``metric`` of every seed of ``setup``: the mean over seeds as a line and the min-max band
    (NaN-aware: a diverged seed leaves a gap, not a hole in every curve); ``{n}`` in ``label``
    becomes the number of seeds. Draws nothing if no seed of ``setup`` logged ``metric``."""
    if not any(metric in v for (s, _), v in data.items() if s == setup):
        return
    steps, v = series(data, setup, metric)
    if np.isnan(v).all():
        print(
            f"warning: every {metric} value of {setup} is NaN (diverged?): not drawn",
            file=sys.stderr,
        )
        return
    ax.plot(steps, np.nanmean(v, 0), style, color=color, label=label.format(n=len(v)))
    if band and len(v) > 1:
        ax.fill_between(steps, np.nanmin(v, 0), np.nanmax(v, 0), color=color, alpha=alpha, lw=0)


def read_rows(path: Path) -> list[dict]:
    """The rows of a results CSV; a missing one ends the figure script with one line."""
    try:
        with path.open() as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        raise SystemExit(
            f"error: {path} does not exist: run the study's make target first"
        ) from None


def save(fig, name: str) -> Path:
    """``results/figures/<name>`` (PNG) and the same figure as a vector file (SVG) beside it,
    for papers and slides; neither holds a date, so a redraw gives the same bytes."""
    FIGURES.mkdir(parents=True, exist_ok=True)
    path = FIGURES / name
    fig.savefig(path, metadata={"Software": None})
    fig.savefig(path.with_suffix(".svg"), metadata={"Date": None})
    plt.close(fig)
    return path


def draw(jobs: list[tuple]) -> list[Path | None]:
    """Run each ``(figure function, *args)``; on Linux, side by side in forked processes (laying
    out and drawing a figure takes 1-2 s, and ``make reproduce-mnist`` waits for them)."""
    if sys.platform != "linux" or len(jobs) < 2:
        return [f(*args) for f, *args in jobs]
    workers = min(len(jobs), os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return [job.result() for job in [pool.submit(f, *args) for f, *args in jobs]]
