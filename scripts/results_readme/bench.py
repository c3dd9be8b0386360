"""The benchmarks' files (``results/bench/``, ``make bench``): what each holds, the script that
writes it, and its numbers as a table read from the file."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.results_readme.tables import Table


def _columns(columns: dict[str, str], caption: str) -> Callable[[list[dict]], Table]:
    """A table of ``columns`` (CSV name → heading), a row per CSV row."""
    return lambda rows: Table(
        list(columns.values()), [[r.get(c) or "–" for c in columns] for r in rows], caption
    )


def _studies(caption: str) -> Callable[[list[dict]], Table]:
    """The studies' table: :data:`STUDY_COLUMNS`, each row saying how it was timed (a row
    written before the ``timed`` column, as whole runs)."""
    table = _columns(STUDY_COLUMNS, caption)

    def studies(rows: list[dict]) -> Table:
        from scripts.bench_studies import timing_of  # torch's import, only where a table is made

        return table([{**r, "timed": timing_of(r)} for r in rows])

    return studies


def _layouts(rows: list[dict]) -> Table:
    """A row per setup; a column per number of seeds side by side and memory layout."""
    cases = list(dict.fromkeys((r["seeds_side_by_side"], r["layout"]) for r in rows))
    by = {(r["setup"], r["seeds_side_by_side"], r["layout"]): r for r in rows}
    body = [
        [
            setup,
            *(
                by[(setup, *c)]["total_ms_per_run_step"] if (setup, *c) in by else "–"
                for c in cases
            ),
        ]
        for setup in dict.fromkeys(r["setup"] for r in rows)
    ]
    head = [f"{n} seed{'s' if n != '1' else ''}, {layout}" for n, layout in cases]
    return Table(["setup", *head], body, "CPU milliseconds per run-step, training and evaluation.")


def _profile(rows: list[dict]) -> Table:
    """A row per route and phase; a column per kind of operation, then the unprofiled times."""
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    by = {(r["route"], r["phase"], r["kind"]): r for r in rows}
    cases = list(dict.fromkeys((r["route"], r["seeds_side_by_side"], r["phase"]) for r in rows))
    body = []
    for route, seeds, phase in cases:
        first = by[(route, phase, kinds[0])]
        cells = [by[(route, phase, k)]["profiled_ms_per_run_step"] for k in kinds]
        body.append([route, seeds, phase, *cells, first["ms_per_run_step"], first["cpu_ms_per_run_step"]])  # fmt: skip
    r = rows[0]
    return Table(
        ["route", "seeds side by side", "phase", *kinds, "ms a run-step", "CPU ms a run-step"],
        body,
        "Milliseconds per run-step by kind of operation (profiled), and unprofiled. Were every "
        "operation but the convolutions free, the stacked route would run at most "
        f"{r['ceiling_peer_over_stacked']}x the peer's speed with its grouped convolutions, and "
        f"{r['ceiling_peer_over_own_convolutions']}x with convolutions at one network's rate.",
    )


def _layers(rows: list[dict]) -> Table:
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    by = {(r["layer"], r["shape"]): r for r in rows}
    body = []
    for layer in dict.fromkeys(r["layer"] for r in rows):
        cells = []
        for shape in shapes:
            r = by.get((layer, shape))
            target = f" (≤ {r['target']})" if r and r.get("target") else ""
            cells.append(f"{r['time_ratio']}{target}" if r else "–")
        body.append([layer, *cells])
    return Table(
        ["layer", *shapes],
        body,
        "Forward and backward time over `torch.nn`'s in the same run (the target in brackets).",
    )


STUDY_COLUMNS = {
    "network": "network",
    "timed": "timed by",
    "study_ms_per_run_step": "study, ms a run-step",
    "stacked_ms_per_run_step": "five seeds side by side, ms",
    "peer_ms_per_run_step": "plain-PyTorch peer, ms",
    "ratio_peer_to_study": "peer / study, median of rounds",
    "ratios_by_round": "each round's peer / study",
    "ratio_gm_ci95": "geometric mean [95% interval]",
    "target": "target",
    "target_verdict": "verdict",
    "ratio_peer_to_stacked": "peer / five side by side, median of rounds",
    "ratios_stacked_by_round": "each round's peer / five side by side",
    "ratio_stacked_gm_ci95": "geometric mean [95% interval], five side by side",
    "stacked_target": "target, five side by side",
    "stacked_target_verdict": "verdict, five side by side",
}


@dataclass(frozen=True)
class Bench:
    file: str  # under results/bench/
    command: str  # what writes it; "" where each row names its own
    what: str
    table: Callable[[list[dict]], Table] | None = None


BENCHES = (
    Bench(
        "layers_cpu.csv",
        "python -m scripts.bench_layers",
        "each layer's forward and backward pass against `torch.nn.BatchNorm1d/2d` timed in the "
        "same run (the best of interleaved rounds), and the memory autograd saves for the "
        "backward pass (`mem_ratio`)",
        _layers,
    ),
    Bench(
        "inception_cpu.csv",
        "python -m scripts.bench_inception",
        "training images/s of BN-Inception at the width whose parameter count matches "
        "torchvision's GoogLeNet with BN, against that GoogLeNet in the same run",
        _columns(
            {
                "model": "network",
                "parameters": "parameters",
                "images_per_s": "images / s",
                "ratio_vs_googlenet": "over GoogLeNet",
                "target": "target",
            },
            "Training throughput in one run.",
        ),
    ),
    Bench(
        "mnist_cpu.csv",
        "python -m scripts.bench_mnist",
        "one training step of the Figure 1 network's three seeds side by side, and its first "
        "layer alone, with the binary-input first layer against a dense one",
        _columns(
            {
                "what": "what",
                "network": "network",
                "first_layer": "first layer",
                "ms": "ms",
                "ratio_to_dense": "over the dense layer's",
            },
            "Times, and their ratio to the dense first layer's in the same run.",
        ),
    ),
    Bench(
        "studies_cpu.csv",
        "python -m scripts.bench_studies",
        "each study's training against a plain-PyTorch peer of the same network "
        "(`scripts/peers/`: `torch.nn` layers, `torch.optim.SGD`, one run per process, the same "
        "evaluations), one thread each, in milliseconds per run-step (a step of one network, "
        "start-up left out: CPU seconds, the difference between two run lengths, or, for "
        "BN-Inception, whose targets sit within a few percent of its ratios, the wall seconds of "
        "each run's own training loop on a machine running nothing else, the first steps' "
        "one-off costs in), the ratio being the "
        "median over rounds; a target is judged on the rounds' geometric-mean ratio and its 95% interval "
        "(met: the lower end reaches it; missed: the upper end falls short; otherwise "
        "undecided); the MLP rows add the compute floor and the matrix-product rates it assumes",
        _studies(
            "The cost of a run-step; the ratios are the peer's over the study's, one seed a process or five side by side.",
        ),
    ),
    Bench(
        "inception_profile_cpu.csv",
        "python -m scripts.profile_inception",
        "where the computation of BN-Inception's training step and its share of Figure 3's "
        "evaluations spends its time, by kind of operation under torch's profiler, for the three "
        "routes of the BN-Inception row of `studies_cpu.csv` (the study, its seeds side by side, "
        "the peer), and the most stacking could give against the peer were everything but the "
        "convolutions free",
        _profile,
    ),
    Bench(
        "pinned_avx2/studies_cpu.csv",
        "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python -m scripts.bench_studies "
        "--only mlp,mlp_baseline --out results/bench/pinned_avx2",
        "the same for the Figure 1 MLP, study and peer pinned to AVX2 kernels",
        _studies(
            "The cost of a run-step on AVX2 kernels; the ratios are the peer's over the study's."
        ),
    ),
    Bench(
        "conv_layout_cpu.csv",
        "python -m scripts.bench_layout",
        "the conv net's training step and its share of the evaluations per run-step, in "
        "channels-last and NCHW, one seed and five side by side; each setup's config takes the "
        "faster layout of five seeds",
        _layouts,
    ),
    Bench(
        "renorm_aim_cpu.csv",
        "",
        "the record behind comparing `make reproduce-renorm`'s wall time across machines: the "
        "plain-PyTorch conv-net peer and the study's one-seed step, alternated, in CPU seconds at "
        "two run lengths",
    ),
    Bench(
        "renorm_workers_cpu.csv",
        "",
        "each job's seconds in `make reproduce-renorm`, run with worker processes and with a "
        "process per job (`--fresh-processes`)",
    ),
)


def _machine(rows: list[dict]) -> str:
    """The machines a file's rows name (its ``cpu`` and ``torch`` columns); where they name
    several and the rows have a ``key``, each machine with its rows' keys."""
    found: dict[str, list[str]] = {}
    for r in rows:
        machine = ", ".join(x for x in (r.get("cpu"), f"torch {r['torch']}" if r.get("torch") else "") if x)  # fmt: skip
        found.setdefault(machine, []).append(r.get("key", ""))
    found.pop("", None)
    if len(found) < 2 or not all(r.get("key") for r in rows):
        return "; ".join(found)
    return "; ".join(f"{m} ({', '.join(f'`{k}`' for k in keys)})" for m, keys in found.items())


def benches(root: Path) -> list[dict[str, Any]]:
    """Each benchmark's file as the template reads it (``missing`` where it is not committed)."""
    out = []
    for b in BENCHES:
        file = root / "bench" / b.file
        entry: dict[str, Any] = {
            "file": b.file, "command": b.command, "what": b.what,
            "missing": not file.exists(), "machine": "", "table": "",
        }  # fmt: skip
        if file.exists():
            with file.open(newline="") as f:
                rows = list(csv.DictReader(f))
            entry["machine"] = _machine(rows)
            entry["table"] = b.table(rows).markdown() if b.table and rows else ""
        out.append(entry)
    return out
