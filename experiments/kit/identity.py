"""What makes two runs one setting: a run's identity, as the training loop records it and checks
it on a resume, and as the collection compares seeds and reused setups.

A run's settings are its resolved config as flat ``{dotted.key: value}`` (:func:`flat_config`).
Some keys never change what a run computes (where the data lie, how often it is evaluated, the
logger, ...: :data:`RESUMABLE_CHANGES`, and those a study's schema declares in its
``resume_safe``); the rest are its identity (:func:`comparable_config`). Torch-free, so the
collection reads it without loading the training stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from experiments.kit.errors import ConfigError
from experiments.kit.stopping import StopConf

# Settings a resumed run may change: they do not alter the training trajectory. (Not `threads`:
# another thread count changes the float rounding of the arithmetic from the resume on.) A study
# adds its own keys of this kind in its schema's `resume_safe` (experiments.kit.config.StudyConf).
RESUMABLE_CHANGES = (
    "train.steps", "train.stop.", "resume", "overwrite", "device", "logger.", "eval.",
    "data.root", "data.download", "data.verify", "data.num_workers",
)  # fmt: skip

# The settings of a run's planned length: a resume may change them, yet runs planned to other
# lengths (another cap, another stopping rule) are not seeds of one run, nor arms to compare.
PLANNED_LENGTH = ("train.steps", "train.stop.")


def flat_config(cfg) -> dict[str, Any]:
    """The resolved config (without Hydra's own node) as flat ``{dotted.key: value}``."""
    flat: dict[str, Any] = {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}.{k}" if key else str(k))
        else:
            flat[key] = node

    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    walk({k: v for k, v in container.items() if k != "hydra"}, "")
    return flat


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p.rstrip(".") + ".") for p in prefixes)


def _resumable(key: str, resume_safe: tuple[str, ...]) -> bool:
    return _under(key, RESUMABLE_CHANGES + resume_safe)


# Settings added after runs were committed, each with the value that means what runs did before it
# existed: a run at that value is recorded without the key, so an earlier run's record still
# matches a new run of the same setting (and its collection regenerates as it was).
ADDED_LATER: dict[str, Any] = {
    "model.norm_bias": False,
    "model.outside_gradient": None,
    "train.fixed_composition": False,
    "probe.param_norms": False,
    "model.pool_columns": 1,
    "train.trainable": "all",
    "train.first_images": 0,
    "model.fuse_reductions": False,
}


def stop_defaults() -> dict[str, Any]:
    """``train.stop.*`` at their defaults (no rule), by flat key."""
    return {f"train.stop.{f.name}": f.default for f in fields(StopConf)}


def later_defaults() -> dict[str, Any]:
    """The settings earlier runs were recorded without, at the values those runs had: the
    stopping rule's and :data:`ADDED_LATER`."""
    return {**stop_defaults(), **ADDED_LATER}


def comparable_config(flat: dict[str, Any], resume_safe: tuple[str, ...] = ()) -> dict[str, Any]:
    """The settings that make runs one setting: the flat config but for the seed and the keys a
    resume may change (``resume_safe``: the study's own), those of the planned length
    (``PLANNED_LENGTH``: ``train.steps``, ``train.stop.*``) kept; a stopping setting at its
    default is left out, so the record of a run without a stopping rule is what it was before
    stopping rules were recorded (so is a key of :data:`ADDED_LATER` at its value)."""
    defaults = later_defaults()
    return {
        k: v
        for k, v in flat.items()
        if k != "seed"
        and (_under(k, PLANNED_LENGTH) or not _resumable(k, resume_safe))
        and not (k in defaults and v == defaults[k])
    }


def check_same_run(
    path: Path,
    saved: dict[str, Any],
    now: dict[str, Any],
    resume_safe: tuple[str, ...] = (),
    fixed: Mapping[str, str] | None = None,
) -> dict[str, list]:
    """Refuse to resume ``path`` with a setting that would change the run; returns the harmless
    changes (``RESUMABLE_CHANGES`` and the study's ``resume_safe``, but ``resume`` and
    ``overwrite``) as ``{key: [old, new]}``. ``fixed`` names resumable keys the run's layers
    depend on all the same (:func:`experiments.kit.norm.resume_fixed`), each with what the run
    holds: a sentence with ``{old}`` and ``{new}``, the key's saved and new values. A key the
    saved run predates (:data:`ADDED_LATER`, the stopping rule's) holds its default there."""
    older = {k: v for k, v in later_defaults().items() if k in now and k not in saved}
    saved = {**older, **saved}
    changed = {}
    for key in sorted(saved.keys() | now.keys()):
        if saved.get(key) == now.get(key) or key in ("resume", "overwrite"):
            continue  # (those two say how this command runs, not what the run is)
        if fixed and key in fixed:
            held = fixed[key].format(old=saved.get(key), new=now.get(key))
            raise ConfigError(f"{path} holds {held}; resume with the same {key}")
        if not _resumable(key, resume_safe):
            raise ConfigError(
                f"{path} holds the run of {key}={saved.get(key)}, not {key}={now.get(key)}; "
                "resume with the same settings (only train.steps, eval.*, logger.* and the data's "
                "location may change) or use another hydra.run.dir"
            )
        changed[key] = [saved.get(key), now.get(key)]
    return changed
