"""Reading what a run wrote, in tests."""

import csv
from pathlib import Path


def metric_rows(run_dir: Path) -> list[dict]:
    """Every row of ``run_dir/metrics.csv`` (``step``, ``metric``, ``value`` as strings)."""
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))
