"""A classifier study's own part of its steps and evaluations is an object it owns
(:class:`~experiments.kit.classify.ClassifierStep`): the kit's adds nothing, and a stack of seeds
refuses one that augments (its seeds' batches are drawn side by side)."""

import pytest
import torch

from experiments.kit import classify
from tests.configs import compose_config

QUICK = ("debug=quick", "data.root=/nonexistent", "data.download=false")


def test_the_kits_step_adds_nothing():
    step, x = classify.ClassifierStep(), torch.ones(2, 3)
    assert step.augment(0, x) is x and step.step_metrics(0) == {} and step.eval_metrics() == {}


class _Jitter(classify.ClassifierStep):
    def augment(self, step, x):
        return x + 1


def test_a_stack_of_seeds_refuses_a_step_that_augments(tmp_path):
    cfg = compose_config("renorm", [*QUICK, "setup=bn32", "seed=[0,1]"])
    proc = classify.Process(0, 1, torch.device("cpu"), torch.contiguous_format, None, tmp_path)
    model = torch.nn.Linear(2, 2)
    net = classify.Classifier(model, torch.optim.SGD(model.parameters(), lr=0.1), None, [model] * 2)
    with pytest.raises(ValueError, match="no augmentation"):
        classify.ClassifierTraining(cfg, proc, net, [None, None], (None, None), _Jitter())
