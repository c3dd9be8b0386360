"""The mechanism study's results beyond the common collection (its collector hook): the last
hidden layer's typical unit and its percentiles over training, the three ways
(``typical_unit.csv``), and the moving averages' share of BN's drift floor."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import torch

from experiments.kit.runlog import read_metrics


def typical_unit(values: np.ndarray, qs: list[float]) -> int:
    """The unit whose total median drift over training (``values``: ``(evaluations,
    percentiles, units)`` of one layer) is the median over the layer's units: a "typical" one."""
    total = np.abs(np.diff(values[:, qs.index(50)], axis=0)).sum(0)
    return int(np.argsort(total)[len(total) // 2])


def extend_results(summary: dict, runs: list[tuple[Path, dict]], out: Path) -> None:
    """``typical_unit.csv``: per run, the last hidden layer's typical unit (:func:`typical_unit`
    of its percentiles measured with population statistics, way (b)) and its percentiles over
    training, all three ways (``setup,seed,unit,way,step,percentile,value``); and in the summary,
    per setup and layer, the moving-average share of BN's drift floor: over the second half of
    training, ``1 − drift(b) / drift(a)`` of the units' mean median drift (mean over seeds)."""
    rows, units = [], {}
    for run, s in runs:
        saved = torch.load(run / "unit_percentiles.pt", map_location="cpu", weights_only=True)
        if saved["values"] is None:
            continue
        values, qs, ways = saved["values"].numpy(), saved["percentiles"], saved["ways"]
        layer = values.shape[2] - 1
        unit = typical_unit(values[:, ways.index("population"), layer], qs)
        units[s["name"]] = unit
        for w, way in enumerate(ways):
            for e, step in enumerate(saved["steps"]):
                for k, q in enumerate(qs):
                    rows.append(
                        [
                            s["setup"],
                            s["seed"],
                            unit,
                            way,
                            step,
                            q,
                            f"{values[e, w, layer, k, unit]:.6g}",
                        ]
                    )
    with (out / "typical_unit.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["setup", "seed", "unit", "way", "step", "percentile", "value"])
        w.writerows(rows)
    summary["typical_unit_of_the_last_hidden_layer"] = units
    summary["moving_average_share_of_drift"] = _jitter_share(runs)


def _jitter_share(runs: list[tuple[Path, dict]]) -> dict[str, dict[str, float]]:
    share: dict[str, dict[str, list[float]]] = {}
    for run, s in runs:
        if s["norm"] == "none":
            continue
        m = read_metrics(run / "metrics.csv")
        for name in m:
            if name.startswith("shift/moving/") and name.endswith("/median_mean"):
                layer = name.split("/")[2]
                a = np.array(m[name])
                b = np.array(m[name.replace("/moving/", "/population/")])
                half = len(a) // 2
                ratio = np.nanmean(b[half:]) / np.nanmean(a[half:]) if len(a) > 1 else np.nan
                if np.isfinite(ratio):
                    share.setdefault(s["setup"], {}).setdefault(layer, []).append(1 - ratio)
    return {
        k: {layer: round(float(np.mean(v)), 4) for layer, v in d.items()} for k, d in share.items()
    }
