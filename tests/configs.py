"""Compose the repo's real Hydra configs in tests, as the entry points do."""

from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

# Importing a study registers its ``<study>_schema`` config node, which its root YAML extends.
import experiments.depth
import experiments.inception
import experiments.mechanism
import experiments.mnist
import experiments.renorm  # noqa: F401
from experiments.kit.config import CONFIGS


def compose_config(name: str, overrides=()) -> DictConfig:
    """The config of ``python -m experiments.<name> <overrides>``. Hydra's runtime config is set
    (the run is named after Hydra's choice of ``setup``, as in a real run), then dropped from the
    returned config."""
    with initialize_config_dir(config_dir=str(CONFIGS / name), version_base="1.3"):
        cfg = compose(name, overrides=list(overrides), return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg
