"""experiments.kit.norm: the ``norm`` group reaches every normalization layer of every study
(momentum, eps, microbatch, the Batch Renorm schedule), and a study's own values apply."""

import pytest
import torch

from experiments import inception, mnist, renorm
from experiments.nets.norms import norm_layers
from tests.configs import compose_config


def _momenta(model: torch.nn.Module) -> list:
    layers = norm_layers(model)
    assert layers, "no norm layer"
    return [(m.momentum, m.eps) for m in layers]


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["bn32", "brn32", "bn_micro4", "noniid_brn"])
def test_norm_settings_reach_every_layer_renorm(setup):
    cfg = compose_config("renorm", [f"setup={setup}", "norm.momentum=0.05", "norm.eps=0.0025"])
    renorm.check(cfg)
    assert set(_momenta(renorm.build_model(cfg, 1, 10))) == {(0.05, 0.0025)}


def test_norm_settings_reach_every_layer_renorm_paper_scale():
    cfg = compose_config(
        "renorm",
        [
            "scale=paper",
            "setup=brn32",
            "data.root=/nowhere",
            "norm.momentum=0.05",
            "norm.eps=0.0025",
        ],
    )
    model = renorm.build_model(cfg, 3, 10)
    assert len(norm_layers(model)) > 90 and set(_momenta(model)) == {(0.05, 0.0025)}


@pytest.mark.parametrize("setup", ["bn_baseline", "bn_x5", "bn_x30", "bn_x5_sigmoid"])
def test_norm_settings_reach_every_layer_inception(setup):
    cfg = compose_config("inception", [f"setup={setup}", "norm.momentum=0.05", "norm.eps=0.0025"])
    inception.check(cfg)
    model = inception.build_model(cfg, 3, 10)
    assert len(norm_layers(model)) > 60 and set(_momenta(model)) == {(0.05, 0.0025)}


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["batchnorm", "batchrenorm", "torch_batchnorm"])
def test_norm_settings_reach_every_layer_mnist(tiny_data, tmp_path, monkeypatch, norm):
    """Through the study's own training path: the network ``mnist.train`` builds."""
    built = []

    class Recorded(mnist.SigmoidMLP):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(mnist, "SigmoidMLP", Recorded)
    cfg = compose_config(
        "mnist",
        [
            "setup=bn",
            f"norm={norm}",
            "norm.momentum=0.05",
            "norm.eps=0.0025",
            "data=fashion_mnist",
            f"data.root={tiny_data}",
            "data.download=false",
            "data.verify=false",
            "logger.mode=disabled",
            "train.steps=1",
            "eval.every=1",
            "train.batch_size=20",
            "population.num_batches=1",
        ],
    )
    mnist.train(cfg, tmp_path)
    [model] = built
    assert len(norm_layers(model)) == 3 and set(_momenta(model)) == {(0.05, 0.0025)}


@pytest.mark.slow
def test_the_studies_own_norm_values_apply_when_not_overridden():
    """renorm and inception set their momentum/eps in their root config, after the norm group."""
    for study, setup in (("renorm", "bn32"), ("inception", "bn_x5")):
        cfg = compose_config(study, [f"setup={setup}"])
        assert (cfg.norm.momentum, cfg.norm.eps) == (0.01, 0.001), study
    cfg = compose_config("mnist", ["setup=bn"])
    assert (cfg.norm.momentum, cfg.norm.eps) == (0.1, 1e-5)
