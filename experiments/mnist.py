"""BN paper Sec. 4.1, Figure 1: a sigmoid MLP on MNIST with and without Batch Normalization.

    python -m experiments.mnist model=bn seed=1                      # one run
    python -m experiments.mnist model=bn seed=[0,1,2]                # three seeds side by side
    python -m experiments.mnist -m model=baseline,bn seed=[0,1,2]    # a sweep: two jobs
    python -m experiments.mnist hydra.run.dir=outputs/run1 resume=true   # continue a killed run

``seed`` is one seed or a list. A list trains one network per seed in lockstep in this process
(:class:`~experiments.models.SigmoidMLP` with ``copies``): the same numbers as separate runs,
at ~1.5x less CPU per network. Each run writes ``metrics.csv`` (``step,metric,value``),
``unit_percentiles.pt`` and ``summary.json`` to the Hydra run directory (one seed) or to its
``seed<k>/`` subdirectories (a list); the job's ``checkpoint.pt`` and ``.hydra/config.yaml``
(the resolved config) sit in the Hydra run directory.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import hydra
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, ListConfig
from tqdm import tqdm

import bn
from experiments.checks import require, run_study
from experiments.data import compact_inputs, ensure_dataset, load_split, to_inputs
from experiments.models import SigmoidMLP
from experiments.probes import SigmoidInputs
from experiments.runlog import (
    LOGGER_MODES,
    RunLog,
    git_commit,
    open_run_log,
    read_metric,
    run_command,
    save_checkpoint,
    write_json,
)
from experiments.sampling import EpochSampler

# Norms that normalize each unit over the mini-batch, which is all the network's layout allows.
NORMS = ("none", "batchnorm", "batchrenorm", "torch_batchnorm")


def seed_list(seed) -> list[int]:
    """``cfg.seed`` (an int or a list of ints) as a list."""
    return list(seed) if isinstance(seed, (list, tuple, ListConfig)) else [seed]


def validate(cfg: DictConfig) -> None:
    t = cfg.train
    seeds = seed_list(cfg.seed)
    checks = [
        (
            len(seeds) >= 1 and all(isinstance(s, int) for s in seeds),
            f"seed={cfg.seed} must be an integer or a list of integers, e.g. seed=[0,1,2]",
        ),
        (len(set(seeds)) == len(seeds), f"seed={seeds} has repeated seeds"),
        (t.lr > 0, f"train.lr={t.lr} must be positive"),
        (t.steps >= 1, f"train.steps={t.steps} must be at least 1"),
        (t.eval_every >= 1, f"train.eval_every={t.eval_every} must be at least 1"),
        (t.batch_size >= 1, f"train.batch_size={t.batch_size} must be at least 1"),
        (cfg.model.init_std > 0, f"model.init_std={cfg.model.init_std} must be positive"),
        (
            cfg.model.norm in NORMS,
            f"model.norm={cfg.model.norm!r} must be one of {NORMS} (this network normalizes "
            "each unit over the mini-batch)",
        ),
        (
            "microbatch" not in cfg.model.norm_kwargs,
            "model.norm_kwargs.microbatch is not supported by the MNIST study; remove it",
        ),
        (
            cfg.logger.mode in LOGGER_MODES,
            f"logger.mode={cfg.logger.mode!r} must be one of {LOGGER_MODES}",
        ),
        (
            0 <= cfg.probe.unit < cfg.model.hidden[-1],
            f"probe.unit={cfg.probe.unit} must index a unit of the last hidden layer (0..{cfg.model.hidden[-1] - 1})",
        ),
        (
            cfg.population.num_batches >= 1,
            f"population.num_batches={cfg.population.num_batches} must be at least 1",
        ),
    ]
    if cfg.model.norm != "none":
        checks.append(
            (
                t.batch_size >= 2,
                f"train.batch_size={t.batch_size} gives {cfg.model.norm} one value per unit, so "
                "no batch variance; use train.batch_size >= 2 (the paper uses 60) or model=baseline",
            )
        )
    require(checks)


def accuracies(
    model: SigmoidMLP, x: torch.Tensor, y: torch.Tensor, chunk: int = 2000
) -> list[float]:
    """Each copy's accuracy on ``(x, y)`` in inference mode (BN uses its running statistics).

    Runs ``chunk`` examples at a time: the same numbers, but the activations' memory is freed
    and reused from chunk to chunk. Whole-set activations (12 MB a layer for the test set) would
    be fresh memory at every evaluation, and faulting it in took longer than computing them."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        correct = sum(
            (model(xc).argmax(-1) == yc).sum(-1) for xc, yc in zip(x.split(chunk), y.split(chunk))
        )
    model.train(was_training)
    return (correct.float() / len(y)).tolist()


@dataclass
class SeedRun:
    """One seed's run inside a (possibly stacked) job: its log, summary and probe history."""

    seed: int
    out_dir: Path
    log: RunLog
    summary: dict
    history: list = field(default_factory=list)  # (step, (layers, len(qs), units) percentiles)
    loss_sum: float = 0.0
    loss_n: int = 0

    @property
    def alive(self) -> bool:
        return not self.summary["diverged"]

    def state(self) -> dict:
        return {"history": self.history, "summary": self.summary}

    def save_percentiles(self, qs: list[float]) -> None:
        torch.save(
            {
                "steps": [s for s, _ in self.history],
                "percentiles": qs,
                "values": torch.stack([p for _, p in self.history]) if self.history else None,
            },
            self.out_dir / "unit_percentiles.pt",
        )


def train(cfg: DictConfig, out_dir: Path) -> list[dict]:
    """Train one network per seed of ``cfg.seed``; returns their summaries (also written to
    each run's ``summary.json``), in seed order."""
    validate(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    raw = ensure_dataset(cfg.data.name, cfg.data.root, cfg.data.download)
    train_split, test_split = load_split(raw, "train"), load_split(raw, "test")
    binarize = cfg.data.binarize
    # uint8 pixels, a quarter of the memory to read per mini-batch. Binarized, they are the
    # network's input as they are (its first layer reads 0/1 bytes); grayscale, floats in [0, 1].
    train_pixels = compact_inputs(train_split.images, binarize)
    test_pixels = compact_inputs(test_split.images, binarize)
    x_train, y_train = _network_inputs(train_pixels, binarize), train_split.labels
    x_test, y_test = _network_inputs(test_pixels, binarize), test_split.labels

    seeds = seed_list(cfg.seed)
    copies, batch_size = len(seeds), cfg.train.batch_size
    model = SigmoidMLP(
        cfg.model.norm,
        cfg.model.hidden,
        cfg.model.init_std,
        in_features=x_train.shape[1],
        copies=copies,
        seeds=seeds,
        binary_input=binarize,
        **cfg.model.norm_kwargs,
    )
    params = list(model.parameters())
    samplers = [EpochSampler(len(x_train), batch_size, seed=s) for s in seeds]
    qs = list(cfg.probe.percentiles)
    run_dirs = [out_dir] if isinstance(cfg.seed, int) else [out_dir / f"seed{s}" for s in seeds]
    step, saved_runs = 0, None

    ckpt_path = out_dir / "checkpoint.pt"
    resumed = cfg.resume and ckpt_path.exists()
    if resumed:
        ckpt = torch.load(ckpt_path, weights_only=False)
        require(
            [
                (
                    ckpt["seeds"] == seeds,
                    f"{ckpt_path} holds the run of seed={ckpt['seeds']}, not seed={cfg.seed}; "
                    "resume with the same seeds or another hydra.run.dir",
                )
            ]
        )
        model.load_state_dict(ckpt["model"])
        for sampler, state in zip(samplers, ckpt["samplers"]):
            sampler.load_state_dict(state)
        step, saved_runs = ckpt["step"], ckpt["runs"]

    runs, commit = [], git_commit()
    for k, (seed, run_dir) in enumerate(zip(seeds, run_dirs)):
        run_dir.mkdir(parents=True, exist_ok=True)
        name = f"{cfg.model.name}-s{seed}"
        log = open_run_log(
            cfg, run_dir, name=name, job_type=cfg.model.name, resume_step=step if resumed else None
        )
        summary = {
            "name": name,
            "model": cfg.model.name,
            "seed": seed,
            "data": cfg.data.name,
            "lr": cfg.train.lr,
            "init_std": cfg.model.init_std,
            "steps": cfg.train.steps,
            "copies": copies,
            "git_commit": commit,
            "diverged": False,
            "command": run_command("experiments.mnist"),
        }
        run = SeedRun(seed, run_dir, log, summary)
        if saved_runs is not None:
            run.history, run.summary = saved_runs[k]["history"], saved_runs[k]["summary"]
        runs.append(run)

    def checkpoint() -> None:
        save_checkpoint(
            ckpt_path,
            {
                "model": model.state_dict(),
                "samplers": [s.state_dict() for s in samplers],
                "seeds": seeds,
                "step": step,
                "runs": [r.state() for r in runs],
            },
        )
        for r in runs:
            r.save_percentiles(qs)

    rec = SigmoidInputs(model.sigmoids)

    def evaluate_and_log(losses: bool) -> list[float]:
        with rec:
            accs = accuracies(model, x_test, y_test)
        pct = rec.percentiles(qs)
        typical = rec.layer(len(model.sigmoids) - 1, unit=cfg.probe.unit)
        for k, r in enumerate(runs):
            if not r.alive:
                continue
            metrics = {"test/acc": accs[k], **_typical(pct[k], cfg.probe.unit, qs)}
            if losses:
                metrics["train/loss"] = r.loss_sum / r.loss_n
                metrics.update(_shift(r.history[-1][1], pct[k], qs))
            r.log.log(step, metrics, extra=_histogram(typical[k]) if r.log.wandb else None)
            r.history.append((step, pct[k]))
            r.loss_sum, r.loss_n = 0.0, 0
        return accs

    accs, accs_step = None, None  # the last evaluation's test accuracies, and its step
    if step == 0:  # the distributions at initialisation: the start of every curve
        accs, accs_step = evaluate_and_log(losses=False), step

    # Plain Python values: an OmegaConf lookup costs ~30 us, as much as a tenth of a step here.
    steps, lr, eval_every = cfg.train.steps, cfg.train.lr, cfg.train.eval_every
    job = f"{cfg.model.name}-s{','.join(map(str, seeds))}"
    t0, steps0 = time.perf_counter(), step
    bar = tqdm(
        total=steps,
        initial=step,
        desc=job,
        unit="step",
        mininterval=2,
        dynamic_ncols=True,
        disable=None,
    )
    try:
        while step < steps and any(r.alive for r in runs):
            idx = torch.cat([s.next() for s in samplers])
            x = _network_inputs(torch.index_select(train_pixels, 0, idx), binarize)
            x = x.view(copies, batch_size, -1)
            y = torch.index_select(y_train, 0, idx).view(copies, batch_size)
            # Each copy's mean loss; their sum gives every copy exactly its own gradient.
            losses = F.cross_entropy(model(x).transpose(1, 2), y, reduction="none").mean(1)
            # Plain SGD (the paper's optimizer for this experiment), written out: it has no
            # state, and skipping torch.optim's bookkeeping makes these tiny steps ~20% faster.
            grads = torch.autograd.grad(losses.sum(), params)
            with torch.no_grad():
                torch._foreach_add_(params, grads, alpha=-lr)
            step += 1
            for r, value in zip(runs, losses.tolist()):
                if not r.alive:
                    continue  # its copy trains on, isolated from the others, and is ignored
                if math.isfinite(value):
                    r.loss_sum, r.loss_n = r.loss_sum + value, r.loss_n + 1
                    continue
                r.summary.update(diverged=True, diverged_at_step=step)
                r.log.log(step, {"train/loss": value})
                tqdm.write(
                    f"{r.summary['name']}: loss is {value} at step {step}: the run diverged "
                    "(lower train.lr or model.init_std); stopping it, earlier results are kept"
                )
            bar.update(1)
            if step % eval_every == 0 or step == steps:
                accs, accs_step = evaluate_and_log(losses=True), step
                bar.set_postfix(test_acc="/".join(f"{a:.4f}" for a in accs))
                checkpoint()
    finally:
        bar.close()

    elapsed = time.perf_counter() - t0
    steps_per_s = round((step - steps0) / elapsed, 1) if elapsed > 0 and step > steps0 else None
    finals: dict[str, list[float]] = {}
    if any(r.alive for r in runs):
        finals["test_acc"] = accs if accs_step == step else accuracies(model, x_test, y_test)
        finals["train_acc"] = accuracies(model, x_train, y_train)
        if cfg.model.norm != "none":
            finals.update(_population_accuracies(model, cfg, seeds, x_train, x_test, y_test))
    for k, r in enumerate(runs):
        r.summary.update(
            steps_per_s=steps_per_s, steps_done=r.summary.get("diverged_at_step", step)
        )
        if r.alive:
            r.summary.update({key: values[k] for key, values in finals.items()})
            pop = {
                key.replace("test_acc_", "test/acc_"): values[k]
                for key, values in finals.items()
                if key.startswith("test_acc_")
            }
            if pop:
                r.log.log(step, pop)
        r.summary["final_train_loss"] = (read_metric(r.log.path, "train/loss") or [None])[-1]
        r.log.close()
        write_json(r.out_dir / "summary.json", r.summary)
    return [r.summary for r in runs]


def _network_inputs(pixels: torch.Tensor, binarize: bool) -> torch.Tensor:
    """What :class:`SigmoidMLP` reads: the 0/1 bytes themselves, or grayscale floats in [0, 1]."""
    return pixels if binarize else to_inputs(pixels, binarize)


def _typical(pct: torch.Tensor, unit: int, qs) -> dict[str, float]:
    """Percentiles of the "typical" sigmoid: unit ``unit`` of the last hidden layer."""
    return {f"sigmoid_input/p{q:g}": pct[-1, i, unit].item() for i, q in enumerate(qs)}


def _shift(prev: torch.Tensor, pct: torch.Tensor, qs) -> dict[str, float]:
    """Internal covariate shift, measured: per hidden layer, the mean over units of how far the
    median and the spread (outer percentiles) of the sigmoid input moved since the last eval."""
    mid, lo, hi = qs.index(50), 0, len(qs) - 1
    out = {}
    for layer in range(pct.shape[0]):
        p, q = prev[layer], pct[layer]
        out[f"shift/layer{layer + 1}/median"] = (q[mid] - p[mid]).abs().mean().item()
        out[f"shift/layer{layer + 1}/spread"] = (
            ((q[hi] - q[lo]) - (p[hi] - p[lo])).abs().mean().item()
        )
    return out


def _histogram(values: torch.Tensor) -> dict:
    import wandb

    return {"sigmoid_input/hist": wandb.Histogram(values.numpy())}


def _population_accuracies(model, cfg, seeds, x_train, x_test, y_test) -> dict[str, list[float]]:
    """Each copy's test accuracy with Algorithm 2's population statistics, with and without
    Bessel's correction (next to the moving-average "running" statistics)."""
    out = {}
    for key, bessel in (("test_acc_population", True), ("test_acc_population_no_bessel", False)):
        m = copy.deepcopy(model)
        samplers = [EpochSampler(len(x_train), cfg.train.batch_size, seed=s + 1) for s in seeds]
        bn.set_population_statistics(
            m, _stacked_batches(x_train, samplers), cfg.population.num_batches, bessel=bessel
        )
        out[key] = accuracies(m, x_test, y_test)
    return out


def _stacked_batches(x: torch.Tensor, samplers: list[EpochSampler]):
    """Endless ``(copies, batch, features)`` batches: copy ``k``'s from ``samplers[k]``."""
    while True:
        yield torch.stack([x[s.next()] for s in samplers])


@hydra.main(version_base="1.3", config_path="../configs", config_name="mnist")
def main(cfg: DictConfig) -> float | None:
    return run_study(train, cfg)


if __name__ == "__main__":
    main()
