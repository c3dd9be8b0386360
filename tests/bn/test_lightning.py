"""bn.lightning: the LayerSync plugin that converts bn's layers to their cross-process variants
and back, Lightning imported only when the plugin is asked for."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import bn
import bn.lightning

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, cwd: Path = ROOT) -> str:
    """``code`` in a fresh interpreter that imports this checkout's ``bn``: its standard output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, check=True
    ).stdout


def test_without_lightning_asking_for_the_plugin_says_so_in_one_line(monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] in ("lightning", "pytorch_lightning")]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in ("lightning", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    bn.lightning._plugin_class.cache_clear()
    with pytest.raises(
        ImportError,
        match=r"^bn.lightning.SyncBatchNormPlugin needs Lightning: pip install lightning$",
    ):
        bn.lightning.SyncBatchNormPlugin  # noqa: B018
    bn.lightning._plugin_class.cache_clear()
    with pytest.raises(AttributeError, match="has no attribute 'Other'"):
        bn.lightning.Other  # noqa: B018


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        bn.BatchRenorm2d(4, r_max=2.0, d_max=1.0),
        bn.BatchNormAct2d(4, act=nn.ReLU()),
    ).double()


def test_the_plugin_syncs_bn_layers_keeping_batch_renorm_and_reverts_them():
    layer_sync = pytest.importorskip("lightning.pytorch.plugins.layer_sync")
    plugin = bn.lightning.SyncBatchNormPlugin()
    assert isinstance(plugin, layer_sync.LayerSync)  # what Trainer(plugins=[...]) accepts
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    synced = plugin.apply(model)
    norms = [synced[1], synced[2], synced[3].norm]
    assert [type(m) for m in norms] == [bn.BatchNorm2d, bn.BatchRenorm2d, bn.BatchNorm2d]
    assert all(m.sync_stats for m in norms) and isinstance(synced[3].act, nn.ReLU)
    assert (norms[1].r_max, norms[1].d_max) == (2.0, 1.0)
    reverted = plugin.revert(synced)
    norms = [reverted[1], reverted[2], reverted[3].norm]
    assert [type(m) for m in norms] == [bn.BatchNorm2d, bn.BatchRenorm2d, bn.BatchNorm2d]
    assert not any(m.sync_stats for m in norms)
    assert reverted.state_dict().keys() == before.keys()
    assert all(torch.equal(reverted.state_dict()[k], v) for k, v in before.items())


def test_importing_bn_and_bn_lightning_imports_no_lightning():
    code = (
        "import sys, bn, bn.lightning\n"
        "assert bn.lightning.__file__.startswith(sys.argv[1]), bn.lightning.__file__\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')])"
    )
    assert _run(code.replace("sys.argv[1]", repr(str(ROOT)))).strip() == "[]"


FIT = textwrap.dedent(
    """
    import lightning, torch
    from torch import nn
    import bn
    from bn.lightning import SyncBatchNormPlugin

    class Net(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 4, 3), bn.BatchRenorm2d(4), nn.BatchNorm2d(4))
            self.seen = []

        def training_step(self, batch, _):
            self.seen.append([(type(m).__name__, m.sync_stats) for m in self.net[1:]])
            return self.net(batch[0]).square().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(8, 3, 6, 6))
    net = Net()
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, strategy="ddp", plugins=[SyncBatchNormPlugin()],
        max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(net, torch.utils.data.DataLoader(data, batch_size=4))
    print(net.seen[0], [(type(m).__name__, m.sync_stats) for m in net.net[1:]])
    """
)


@pytest.mark.slow
def test_a_lightning_ddp_fit_trains_with_synced_layers_and_reverts_them(tmp_path):
    pytest.importorskip("lightning")
    out = _run(FIT, cwd=tmp_path)
    during, after = (
        "[('BatchRenorm2d', True), ('BatchNorm2d', True)]",
        ("[('BatchRenorm2d', False), ('BatchNorm2d', False)]"),
    )
    assert out.strip().splitlines()[-1] == f"{during} {after}"
