"""Gather a sweep of a study's runs into ``results/``, as the study's registry record says
(``experiments/studies.py``; torch is not imported unless the study's collection hook needs it).

    python -m scripts.collect mnist MULTIRUN_DIR --out results/mnist/mnist --command "make reproduce-mnist"
    python -m scripts.collect mnist MULTIRUN_DIR --sweep --out results/mnist/lr_sweep.csv
    python -m scripts.collect mnist MULTIRUN_DIR --sweep --out sweep.csv --curves curves.csv --curve-metrics test/acc
    python -m scripts.collect renorm MULTIRUN_DIR --out results/renorm        # one folder per dataset
    python -m scripts.collect renorm MULTIRUN_DIR --out OUT --reuse results/renorm --reuse-setups bn32
    python -m scripts.collect mechanism MULTIRUN_DIR --out OUT --metrics test/acc,landscape/

Writes ``runs.csv`` (``setup,seed,step,metric,value``: every run's metrics) and ``summary.json``
(per setup: mean, spread and per-seed values of the record's keys, next to the paper's numbers), or
with ``--sweep`` one CSV row per run (the study's ``sweep_keys``, or for any study the settings
that differ between the runs), and with ``--curves`` every run's metrics over training keyed by
those keys. ``--reuse`` takes the ``--reuse-setups`` runs
from an earlier collection of the same study and settings instead of running them again;
``--metrics`` keeps only the metrics whose names start with one of its prefixes in ``runs.csv``.
A collection into an ``--out`` that another collection is writing at that moment is refused in
one line (nothing written).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments.kit.errors import OneLineError
from experiments.kit.results import Reuse, collect, collect_sweep
from experiments.studies import STUDIES


def main(argv: list[str] | None = None) -> None:
    try:
        _collect_as_asked(argv)
    except OneLineError as e:  # runs that cannot be collected, or results not whole
        raise SystemExit(f"error: {e}") from None


def _collect_as_asked(argv: list[str] | None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    trained = [s.name for s in STUDIES if s.trains]
    p.add_argument("study", help=f"the study whose runs they are: {', '.join(trained)}")
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sweep", action="store_true", help="one row per run of a hyperparameter sweep")
    p.add_argument("--curves", type=Path, help="with --sweep: every run's curves, long format")
    p.add_argument("--curve-metrics", help="with --curves: comma-separated metrics (default: all)")
    p.add_argument("--command", default="", help="the command recorded in summary.json")
    p.add_argument("--wall-time", type=float, default=None, help="seconds, recorded too")
    p.add_argument("--reuse", type=Path, help="an earlier collection (runs.csv, summary.json)")
    p.add_argument("--reuse-setups", help="with --reuse: comma-separated setups to take from it")
    p.add_argument(
        "--metrics", help="comma-separated metric prefixes runs.csv keeps (default: all)"
    )
    args = p.parse_args(argv)
    if (args.curves or args.curve_metrics) and not args.sweep:
        p.error("--curves and --curve-metrics go with --sweep")
    if args.curve_metrics and not args.curves:
        p.error("--curve-metrics needs --curves PATH")
    if bool(args.reuse) != bool(args.reuse_setups) or (args.reuse and args.sweep):
        p.error("--reuse and --reuse-setups go together, without --sweep")
    if args.metrics is not None and (args.sweep or not all(args.metrics.split(","))):
        p.error("--metrics takes comma-separated metric prefixes, without --sweep")
    study = next((s for s in STUDIES if s.trains and s.name == args.study), None)
    if study is None:
        raise SystemExit(
            f"error: there is no study {args.study} (the studies that train: {', '.join(trained)})"
        )
    if args.sweep:
        metrics = args.curve_metrics.split(",") if args.curve_metrics else None
        keys = list(study.sweep_keys) or None  # a study's fixed columns, else what differs
        collect_sweep(study, args.sweep_dir, args.out, keys, args.curves, metrics)
    else:
        reuse = None
        if args.reuse:
            reuse = Reuse(args.reuse, tuple(args.reuse_setups.split(",")))
        metrics = tuple(args.metrics.split(",")) if args.metrics else ()
        collect(study, args.sweep_dir, args.out, args.command, args.wall_time, reuse, metrics)


if __name__ == "__main__":
    main()
