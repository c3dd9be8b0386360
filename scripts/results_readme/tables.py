"""The number tables of a section, each read from its committed ``summary.json`` or CSV: the
setups' final numbers (or a sweep pivoted by its swept setting), the collection's own Markdown
table, the summary's other tables, and a few a section's anchor asks for (:data:`SPECIAL`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from experiments.kit.errors import BadResults
from scripts.analysis import time_to_accuracy as tta
from scripts.analysis.stats import LEVEL, Estimate
from scripts.analysis.windows import PLAN
from scripts.report import (
    STUDY_TABLES,
    THROUGHPUT,
    column_name,
    paper_text,
    spread,
    stat_columns,
)
from scripts.results_readme.sections import SectionError, SectionView, read_sweep, swept
from scripts.results_readme.text import finite, geometric_mean, num, pct


@dataclass
class Table:
    """A Markdown table: a header row and rows of cells (``|`` in a cell escaped)."""

    head: list[str]
    rows: list[list[str]]
    caption: str = ""

    def markdown(self) -> str:
        cell = lambda c: str(c).replace("|", "\\|").replace("\n", " ")  # noqa: E731
        lines = ["| " + " | ".join(map(cell, self.head)) + " |", "|" + "---|" * len(self.head)]
        lines += ["| " + " | ".join(map(cell, r)) + " |" for r in self.rows]
        return (f"{self.caption}\n\n" if self.caption else "") + "\n".join(lines)


def _same(setups: dict[str, dict], a: str, b: str) -> bool:
    """Whether two summary keys hold the same numbers in every setup (one column shows both)."""
    return all(e.get(a) == e.get(b) for e in setups.values())


def setups_table(s: SectionView) -> Table | None:
    """Each setup's final numbers beside the paper's where the summary holds them. Speeds are
    left out: they measure the machine, not the method."""
    setups = s.setups
    keys = [k for k in stat_columns(setups) if k not in THROUGHPUT]
    keys = [k for i, k in enumerate(keys) if not any(_same(setups, k, j) for j in keys[:i])]
    if not keys:
        return None
    paper = s.paper.get("setups", {})
    rows = []
    for name, e in setups.items():
        n, bad = len(e["seeds"]), sum(bool(d) for d in e.get("diverged", []))
        row = [f"{s.label(name)} (`{name}`)", f"{n}" + (f" ({bad} diverged)" if bad else "")]
        row += [spread(k, e[k]) if isinstance(e.get(k), dict) else "–" for k in keys]
        if paper:
            row.append(paper_text(paper[name]) if name in paper else "–")
        rows.append(row)
    head = ["setup", "seeds", *map(column_name, keys)] + (["the paper"] if paper else [])
    two = any(len(e["seeds"]) == 2 for e in setups.values())
    return Table(
        head,
        rows,
        f"Final numbers per setup: the mean and its {pct(LEVEL, 0)} t-interval over seeds"
        + (", or with two seeds the mean and (each seed's value)" if two else "")
        + ".",
    )


def sweep_table(s: SectionView, rows: list[dict] | None = None, caption: str = "") -> Table:
    """A sweep pivoted: a row per swept value; per setup its final test accuracy (the mean over
    seeds; the setup's best in bold) and final training loss."""
    rows = s.rows if rows is None else rows
    keys = swept(rows or [])
    if not rows or not keys:
        raise SectionError(f"results/{s.path}: no setting varies between its runs")
    listed = list(s.study.labels)
    setups = sorted(
        dict.fromkeys(r["setup"] for r in rows),
        key=lambda x: listed.index(x) if x in listed else len(listed),  # the labels' order first
    )
    with_loss = "final_train_loss" in rows[0]
    accuracy = s.study.sweep_accuracy
    cells: dict[tuple, dict[str, list[dict]]] = {}
    for r in rows:
        cells.setdefault(tuple(float(r[k]) for k in keys), {}).setdefault(r["setup"], []).append(r)

    def mean(runs: list[dict], key: str) -> float | None:
        """Over the runs of a cell; None if one of them diverged."""
        if not runs or any(r["diverged"] == "True" for r in runs):
            return None
        return sum(float(r[key]) for r in runs) / len(runs)

    best = {x: max((mean(c.get(x, []), accuracy) or -1.0) for c in cells.values()) for x in setups}
    body = []
    for v in sorted(cells):
        row = [", ".join(num(x) for x in v)]
        for setup in setups:
            runs = cells[v].get(setup, [])
            acc = mean(runs, accuracy)
            text = "–" if not runs else "diverged" if acc is None else pct(acc)
            row.append(f"**{text}**" if acc is not None and acc == best[setup] else text)
            if with_loss:
                loss = mean(runs, "final_train_loss")
                row.append("–" if loss is None else f"{loss:.3g}")
        body.append(row)
    head = [", ".join(keys)]
    for setup in setups:
        head += [f"{s.label(setup)}: test accuracy"]
        head += [f"{s.label(setup)}: final training loss"] if with_loss else []
    one = all(len({r["seed"] for r in rows if r["setup"] == x}) == 1 for x in setups)
    over = "one seed" if one else "the mean over seeds"
    return Table(
        head,
        body,
        caption
        or f"`{s.path.split('/')[-1]}`, at the end of each run ({over}; each setup's best in bold).",
    )


def share_table(s: SectionView) -> Table | None:
    """The share of BN's measured drift that is moving-average jitter, per hidden layer."""
    share = (s.summary or {}).get("moving_average_share_of_drift")
    if not share:
        return None
    layers = list(dict.fromkeys(layer for by in share.values() for layer in by))
    rows = [
        [s.label(name), *(pct(by[layer], 0) if layer in by else "–" for layer in layers)]
        for name, by in share.items()
    ]
    return Table(
        ["setup", *layers],
        rows,
        "Over the second half of training, the share of the measured drift of each hidden "
        "layer's sigmoid-input medians that is moving-average jitter, 1 − (b)/(a) "
        "(`moving_average_share_of_drift`).",
    )


def study_tables(s: SectionView) -> list[Table]:
    """A collection's own Markdown table (``fig3_table.md``), as the collection wrote it."""
    out = []
    for name in STUDY_TABLES:
        file = s.folder / name
        if s.summary is None or not file.exists():
            continue
        lines = file.read_text().strip("\n").splitlines()
        first = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
        if first is None:
            raise BadResults(f"{file} holds no table: collect the study again")
        rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines[first:]]
        caption = " ".join(lines[:first]).strip() + f" (`{name}`)"
        out.append(Table(rows[0], rows[2:], caption))
    return out


def depth_tables(s: SectionView) -> list[Table]:
    """The gradient ratio (first layer's over the last's) against depth, per network: the
    geometric mean over seeds, at initialization and at the end."""
    networks: dict[tuple[str, str], dict[int, dict]] = {}
    for e in s.setups.values():
        networks.setdefault((e["norm"], e["activation"]), {})[e["depth"]] = e
    depths = sorted({d for by in networks.values() for d in by})
    steps = num((s.summary or {}).get("steps", 0))
    rows = []
    for (norm, activation), by in sorted(
        networks.items(), key=lambda kv: (kv[0][0] == "none", kv[0][1])
    ):
        name = f"{'no BN' if norm == 'none' else 'BN'}, {activation}"
        for key, when in (
            ("grad_ratio_init", "at initialization"),
            ("grad_ratio", f"after {steps} steps"),
        ):
            row = [f"{name}, {when}"]
            for d in depths:
                e = by.get(d)
                values = finite(e[key]["per_seed"]) if e and isinstance(e.get(key), dict) else []
                if not values:
                    row.append("–")
                    continue
                g = geometric_mean(values)
                text = "< 1e-05" if g == 0 else f"{g:.3g}"
                if len(values) < len(e["seeds"]):
                    text += f" ({len(values)} of {len(e['seeds'])} seeds)"
                row.append(text)
            rows.append(row)
    caption = (
        "‖∂L/∂W_first‖ / ‖∂L/∂W_last‖ on a fixed minibatch: the geometric mean over seeds (a "
        'diverged seed has no value; "< 1e-05": below the resolution of `summary.json`).'
    )
    return [Table(["network", *(f"depth {d}" for d in depths)], rows, caption)]


def _interval(values: list[float], fmt: Callable[[float], str]) -> str:
    e = Estimate.of(values)
    ci = e.interval()
    return fmt(e.mean) + (f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "")


def init_scale_small_tables(s: SectionView) -> list[Table]:
    """The sweeps beside the section's CSV (one per dataset), and per dataset and setup each
    seed's best test accuracy over the scales and its range (best − worst) over them."""
    files = sorted(p for p in s.folder.parent.glob("*.csv") if not p.stem.endswith("_curves"))
    out, summary = [], []
    for file in files:
        rows = s.rows if file == s.folder else read_sweep(file, s.study.sweep_accuracy)
        if file != s.folder:
            out.append(
                sweep_table(
                    s,
                    rows,
                    f"The same for `{file.name}` (the mean over seeds; each setup's best in bold).",
                )
            )
        for setup in dict.fromkeys(r["setup"] for r in rows or []):
            by_seed: dict[str, list[float]] = {}
            for r in rows or []:
                if r["setup"] == setup:
                    by_seed.setdefault(r["seed"], []).append(float(r[s.study.sweep_accuracy]))
            best = [max(v) for v in by_seed.values()]
            ranges = [100 * (max(v) - min(v)) for v in by_seed.values()]
            summary.append(
                [
                    f"`{file.stem}`",
                    s.label(setup),
                    _interval(best, pct),
                    _interval(ranges, lambda v: f"{v:.1f} pp"),
                ]
            )
    out.append(
        Table(
            ["data", "setup", "best test accuracy over the scales", "its range over the scales"],
            summary,
            f"Per seed, the best test accuracy over the scales and its range (highest − lowest): "
            f"the mean and its {pct(LEVEL, 0)} t-interval over seeds.",
        )
    )
    return out


def inception_ablation_tables(s: SectionView) -> list[Table]:
    """Figure 3's exploratory arms read as its claims read the confirmatory seeds: per arm, its
    initial learning rate and decay interval, and per seed its smoothed maximum on the test
    subset, its steps to each of the fixed targets and how its run ended."""
    plan = replace(PLAN, root=str(s.root))
    ended = {k: e["seeds"] for k, e in s.summary["converged"]["setups"].items()}
    rows = []
    for arm, e in s.setups.items():
        config = e["config"]
        best = tta.maxima(plan, arm, s.path)
        reach = [tta.reaches(plan, arm, t, s.path) for t in tta.TARGETS]
        rows.append(
            [
                s.label(arm),
                f"{config['train.lr'] * config['train.lr_mult']:g}",
                num(e["lr_decay_every"]),
                ", ".join(pct(best[seed], 1) for seed in e["seeds"]),
                *(
                    ", ".join(
                        num(r[seed].steps) if r[seed].reached else "never" for seed in e["seeds"]
                    )
                    for r in reach
                ),
                ", ".join(f"{r['ended_by']} at {num(r['steps_done'])}" for r in ended[arm]),
            ]
        )
    targets = [f"steps to {t:.0%}" for t in tta.TARGETS]
    return [
        Table(
            ["arm", "initial rate", "decays every", "smoothed maximum", *targets, "how it ended"],
            rows,
            f"Per seed ({s.seeds()}): the maximum of the test-subset curve smoothed over "
            f"{plan.smoothing} evaluations, the first evaluation at or above each fixed target "
            "(*never*: not within the run), and how the run ended; the rate decays ×"
            f"{s.shared('train.lr_decay_factor'):g} every so many steps.",
        )
    ]


# Tables beyond the generic ones, by section anchor (a test holds every key to the registry):
# anchor -> (its tables, whether they replace the generic table of the setups).
SPECIAL: dict[str, tuple[Callable[[SectionView], list[Table]], bool]] = {
    "depth": (depth_tables, True),
    "init-scale-small": (init_scale_small_tables, False),
    "inception-ablations": (inception_ablation_tables, False),
}


def tables(s: SectionView) -> list[Table]:
    """Every table of a section whose results are committed."""
    special, replaces = SPECIAL.get(s.anchor, (None, False))
    out: list[Table] = []
    if not replaces:
        generic = sweep_table(s) if s.rows is not None else setups_table(s)
        out += [generic] if generic else []
    out += study_tables(s)
    out += [t for t in (share_table(s),) if t]
    if special:
        out += special(s)
    return out
