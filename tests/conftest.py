import os
from pathlib import Path

import pytest
import torch
from hydra.core.hydra_config import HydraConfig

from tests.idx_files import make_dataset

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _hydra_config_kept_to_its_test():
    """``compose_config`` sets Hydra's global runtime config, as a real run has it; a later test
    must not read it (its command-line overrides decide, e.g., whether W&B's variables win)."""
    before = HydraConfig.instance().cfg
    yield
    HydraConfig.instance().cfg = before


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A data root holding a tiny generated Fashion-MNIST (200 training and 50 test images in
    IDX files, each class lighting up its own block of pixels): ``data=fashion_mnist
    data.root=<it> data.download=false`` for every study."""
    path = tmp_path_factory.mktemp("data")
    make_dataset(path)
    return path
