"""Reading what a run wrote, in tests."""

import csv
from pathlib import Path


def metric_rows(run_dir: Path) -> list[dict]:
    """Every row of ``run_dir/metrics.csv`` (``step``, ``metric``, ``value`` as strings)."""
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def files_in(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but the run lock, by relative path, with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }
