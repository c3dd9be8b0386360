import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
