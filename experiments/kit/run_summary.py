"""How every run's ``summary.json`` starts, written once: the keys every study records, and the
study's own keys, each where the study puts it. :meth:`~experiments.kit.loop.TrainLoop.finish`
then adds how the run ended.

Collection reads these keys by name, and the order in which they are written is part of a run's
record: a study places its own keys after one of the kit's (``after``), so each study's
``summary.json`` keeps the order it has always had.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from experiments.kit.config import setup_name
from experiments.kit.jobs import job_command
from experiments.kit.loop import Run

KIT_KEYS = ("name", "setup", "seed", "data", "norm", "steps", "command")


def run_name(setup: str, *seeds: int) -> str:
    """``<setup>-s<seed>``: a run's name; for the job that trains several seeds side by side,
    ``<setup>-s<seed>,<seed>,...``."""
    return f"{setup}-s{','.join(map(str, seeds))}"


def run_summary(
    cfg: DictConfig,
    study: str,
    seed: int,
    *,
    setup: str | None = None,
    after: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The summary a run of ``experiments.<study>`` starts with.

    Args:
        cfg: the run's config (``data.name``, ``norm.kind``, ``train.steps``).
        study: the study module's name; ``command`` runs this job of it again.
        seed: the run's seed.
        setup: the run's setup, if not the config's (:func:`~experiments.kit.config.setup_name`).
        after: the study's own keys, grouped by the kit key they follow:
            ``{"norm": {"lr": 0.5}}`` puts ``lr`` right after ``norm``.

    Returns:
        ``name`` (:func:`run_name`), ``setup``, ``seed``, ``data``, ``norm``, ``steps`` and
        ``command`` in this order, each followed by the study's keys that ``after`` puts there.
    """
    setup = setup_name() if setup is None else setup
    kit = {
        "name": run_name(setup, seed),
        "setup": setup,
        "seed": seed,
        "data": str(cfg.data.name),
        "norm": str(cfg.norm.kind),
        "steps": cfg.train.steps,
        "command": job_command(f"experiments.{study}"),
    }
    after = after or {}
    if unknown := sorted(set(after) - set(kit)):
        raise ValueError(f"after={unknown}: a study's keys follow one of the kit's, {KIT_KEYS}")
    own = [key for keys in after.values() for key in keys]
    if taken := sorted({key for key in own if key in kit or own.count(key) > 1}):
        raise ValueError(f"{taken}: a study's own key is neither the kit's nor given twice")
    summary: dict[str, Any] = {}
    for key, value in kit.items():
        summary[key] = value
        summary.update(after.get(key, {}))
    return summary


def new_run(
    cfg: DictConfig,
    study: str,
    seed: int,
    out_dir: Path,
    *,
    setup: str | None = None,
    after: Mapping[str, Mapping[str, Any]] | None = None,
) -> Run:
    """A :class:`~experiments.kit.loop.Run` in ``out_dir`` named and summarized by
    :func:`run_summary` (same arguments)."""
    summary = run_summary(cfg, study, seed, setup=setup, after=after)
    return Run(name=summary["name"], out_dir=out_dir, summary=summary)
