"""Compose the repo's real Hydra configs in tests, as the entry points do."""

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def compose_config(name: str, overrides=()) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(name, overrides=list(overrides))
