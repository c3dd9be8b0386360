"""A Figure 3 collection written as ``scripts.collect`` lays it out, for the tests of the
time-to-accuracy analysis and of the claims that read it."""

import csv
import json
from pathlib import Path

from scripts.analysis import time_to_accuracy as tta


def write_fig3(
    root: Path,
    arms: dict[str, dict[int, dict[int, float]]],
    cap: int,
    extra: dict[str, dict] | None = None,
    folder: str = tta.FOLDER,
    diverged: dict[str, set[int]] | None = None,
) -> None:
    """``root/folder``'s summary.json and runs.csv: per arm, per seed, its test-subset curve,
    the arm's summary entry holding its seeds, which of them diverged (``diverged[arm]``; none
    by default), and ``extra[arm]``."""
    out = root / folder
    out.mkdir(parents=True)
    bad = diverged or {}
    setups = {
        k: {
            "seeds": sorted(v),
            "diverged": [s in bad.get(k, ()) for s in sorted(v)],
            **(extra or {}).get(k, {}),
        }
        for k, v in arms.items()
    }
    evaluations = {k: tta.PROTOCOL[k] for k in ("test_subset", "eval_every")}
    summary = {"steps": cap, "converged": evaluations, "setups": setups}
    (out / "summary.json").write_text(json.dumps(summary))
    with (out / "runs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["setup", "seed", "step", "metric", "value"])
        for k, seeds in arms.items():
            for seed, curve in seeds.items():
                w.writerows([k, seed, step, tta.METRIC, v] for step, v in curve.items())
