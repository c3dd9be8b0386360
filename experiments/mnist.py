"""BN paper Sec. 4.1, Figure 1: a sigmoid MLP on MNIST with and without Batch Normalization.

    python -m experiments.mnist model=bn seed=1                  # one run
    python -m experiments.mnist -m model=baseline,bn seed=0,1,2  # a sweep
    python -m experiments.mnist hydra.run.dir=outputs/run1 resume=true   # continue a killed run

Writes to the Hydra run directory: ``.hydra/config.yaml`` (the resolved config), ``metrics.csv``
(``step,metric,value``), ``unit_percentiles.pt``, ``summary.json`` and ``checkpoint.pt``.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path

import hydra
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

import bn
from experiments.checks import require, run_study
from experiments.data import ensure_dataset, load_split, preprocess
from experiments.models import SigmoidMLP
from experiments.probes import SigmoidInputs
from experiments.runlog import (
    LOGGER_MODES,
    RunLog,
    git_commit,
    read_metric,
    run_command,
    save_checkpoint,
    write_json,
)
from experiments.sampling import EpochSampler


def validate(cfg: DictConfig) -> None:
    t = cfg.train
    checks = [
        (t.lr > 0, f"train.lr={t.lr} must be positive"),
        (t.steps >= 1, f"train.steps={t.steps} must be at least 1"),
        (t.eval_every >= 1, f"train.eval_every={t.eval_every} must be at least 1"),
        (t.batch_size >= 1, f"train.batch_size={t.batch_size} must be at least 1"),
        (cfg.model.init_std > 0, f"model.init_std={cfg.model.init_std} must be positive"),
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


def _accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    model.train(was_training)
    return acc


def evaluate(model: SigmoidMLP, x: torch.Tensor, y: torch.Tensor, qs) -> tuple[float, torch.Tensor]:
    """Test accuracy (inference mode: BN uses its running statistics) and the ``qs`` percentiles
    of every hidden unit's sigmoid input over the test set, ``(layers, len(qs), units)``."""
    with SigmoidInputs(model.sigmoids) as rec:
        acc = _accuracy(model, x, y)
    return acc, rec.percentiles(qs)


def train(cfg: DictConfig, out_dir: Path) -> dict:
    """Run one training job; returns the summary also written to ``summary.json``."""
    validate(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    raw = ensure_dataset(cfg.data.name, cfg.data.root, cfg.data.download)
    train_split, test_split = load_split(raw, "train"), load_split(raw, "test")
    x_train, y_train = preprocess(train_split.images, cfg.data.binarize), train_split.labels
    x_test, y_test = preprocess(test_split.images, cfg.data.binarize), test_split.labels

    torch.manual_seed(cfg.seed)
    model = SigmoidMLP(
        cfg.model.norm,
        cfg.model.hidden,
        cfg.model.init_std,
        in_features=x_train.shape[1],
        **cfg.model.norm_kwargs,
    )
    params = list(model.parameters())
    sampler = EpochSampler(len(x_train), cfg.train.batch_size, seed=cfg.seed)
    qs = list(cfg.probe.percentiles)
    step, history, prev = 0, [], None

    ckpt_path = out_dir / "checkpoint.pt"
    resumed = cfg.resume and ckpt_path.exists()
    if resumed:
        ckpt = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ckpt["model"])
        sampler.load_state_dict(ckpt["sampler"])
        torch.set_rng_state(ckpt["rng"])
        step, history = ckpt["step"], ckpt["history"]
        prev = history[-1][1] if history else None

    name = f"{cfg.model.name}-s{cfg.seed}"
    log = RunLog(
        out_dir,
        mode=cfg.logger.mode,
        resume_step=step if resumed else None,
        wandb_kwargs=dict(
            project=cfg.logger.project,
            group=cfg.logger.group,
            name=name,
            job_type=cfg.model.name,
            tags=list(cfg.logger.tags),
            config=OmegaConf.to_container(cfg, resolve=True),
        ),
    )
    summary = {
        "name": name,
        "model": cfg.model.name,
        "seed": cfg.seed,
        "data": cfg.data.name,
        "lr": cfg.train.lr,
        "init_std": cfg.model.init_std,
        "steps": cfg.train.steps,
        "git_commit": git_commit(),
        "diverged": False,
        "command": run_command("experiments.mnist"),
    }

    def checkpoint() -> None:
        save_checkpoint(
            ckpt_path,
            {
                "model": model.state_dict(),
                "sampler": sampler.state_dict(),
                "rng": torch.get_rng_state(),
                "step": step,
                "history": history,
            },
        )
        torch.save(
            {
                "steps": [s for s, _ in history],
                "percentiles": qs,
                "values": torch.stack([p for _, p in history]) if history else None,
            },
            out_dir / "unit_percentiles.pt",
        )

    if step == 0:  # the distributions at initialisation: the start of every curve
        acc, prev = evaluate(model, x_test, y_test, qs)
        history.append((0, prev))
        log.log(0, {"test/acc": acc, **_typical(prev, cfg.probe.unit, qs)})

    loss_sum, loss_n, t0, steps0 = 0.0, 0, time.perf_counter(), step
    bar = tqdm(
        total=cfg.train.steps,
        initial=step,
        desc=name,
        unit="step",
        mininterval=2,
        dynamic_ncols=True,
        disable=None,
    )
    try:
        while step < cfg.train.steps:
            idx = sampler.next()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            # Plain SGD (the paper's optimizer for this experiment), written out: it has no
            # state, and skipping torch.optim's bookkeeping makes these tiny steps ~20% faster.
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.add_(g, alpha=-cfg.train.lr)
            step += 1
            value = loss.item()
            if not math.isfinite(value):
                summary.update(diverged=True, diverged_at_step=step)
                log.log(step, {"train/loss": value})
                tqdm.write(
                    f"{name}: loss is {value} at step {step}: the run diverged (lower "
                    "train.lr or model.init_std); stopping it, earlier results are kept"
                )
                break
            loss_sum, loss_n = loss_sum + value, loss_n + 1
            bar.update(1)
            if step % cfg.train.eval_every == 0 or step == cfg.train.steps:
                acc, pct = evaluate(model, x_test, y_test, qs)
                history.append((step, pct))
                metrics = {
                    "test/acc": acc,
                    "train/loss": loss_sum / loss_n,
                    **_typical(pct, cfg.probe.unit, qs),
                    **_shift(prev, pct, qs),
                }
                log.log(
                    step,
                    metrics,
                    extra=_histograms(model, x_test, cfg.probe.unit)
                    if log.wandb is not None
                    else None,
                )
                prev, loss_sum, loss_n = pct, 0.0, 0
                bar.set_postfix(test_acc=f"{acc:.4f}")
                checkpoint()
    finally:
        bar.close()

    elapsed = time.perf_counter() - t0
    summary["steps_per_s"] = round((step - steps0) / elapsed, 1) if elapsed > 0 else None
    summary["steps_done"] = step
    if not summary["diverged"]:
        summary["test_acc"] = _accuracy(model, x_test, y_test)
        summary["train_acc"] = _accuracy(model, x_train, y_train)
        if cfg.model.norm != "none":
            summary.update(_population_accuracies(model, cfg, x_train, y_train, x_test, y_test))
            log.log(
                step,
                {
                    k.replace("test_acc_", "test/acc_"): v
                    for k, v in summary.items()
                    if k.startswith("test_acc_")
                },
            )
    summary["final_train_loss"] = (read_metric(log.path, "train/loss") or [None])[-1]
    log.close()
    write_json(out_dir / "summary.json", summary)
    return summary


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


def _histograms(model: SigmoidMLP, x: torch.Tensor, unit: int) -> dict:
    import wandb

    model.eval()
    with torch.no_grad(), SigmoidInputs(model.sigmoids[-1:]) as rec:
        model(x)
    model.train()
    return {"sigmoid_input/hist": wandb.Histogram(rec.inputs[0][0][:, unit].numpy())}


def _population_accuracies(model, cfg, x_train, y_train, x_test, y_test) -> dict[str, float]:
    """Test accuracy with Algorithm 2's population statistics, with and without Bessel's
    correction, next to the moving-average ("running") statistics."""
    out = {}
    for key, bessel in (("test_acc_population", True), ("test_acc_population_no_bessel", False)):
        m = copy.deepcopy(model)
        batches = (
            x_train[i] for i in EpochSampler(len(x_train), cfg.train.batch_size, seed=cfg.seed + 1)
        )
        bn.set_population_statistics(m, batches, cfg.population.num_batches, bessel=bessel)
        out[key] = _accuracy(m, x_test, y_test)
    return out


@hydra.main(version_base="1.3", config_path="../configs", config_name="mnist")
def main(cfg: DictConfig) -> float | None:
    return run_study(train, cfg)


if __name__ == "__main__":
    main()
