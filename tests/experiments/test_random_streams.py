"""Every random stream of a run has a seed of its own: the run's seed seeds the initialization
alone, and no other stream (batches, fixed batches, test pairs, a control sample, noise) reuses a
run's seed or another stream's. Each study runs a few steps for three seeds while every seed given
to torch is recorded with the line that gave it; a stream is a line of code."""

import inspect
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from experiments import depth, mechanism, mnist, renorm
from tests.configs import compose_config

SEEDS = (0, 1, 2)
REPO = Path(__file__).resolve().parents[2]


class _Recorder:
    """Seeds given to ``torch.manual_seed`` and ``torch.Generator().manual_seed``, each with the
    line of the repository's code that gave it."""

    def __init__(self, monkeypatch) -> None:
        self.lines: dict[str, set[int]] = defaultdict(set)
        recorder, global_seed = self, torch.manual_seed

        class Generator(torch.Generator):
            def manual_seed(self, seed):
                recorder.add(seed)
                return super().manual_seed(seed)

        def manual_seed(seed):
            recorder.add(seed)
            return global_seed(seed)

        monkeypatch.setattr(torch, "Generator", Generator)
        monkeypatch.setattr(torch, "manual_seed", manual_seed)

    def add(self, seed: int) -> None:
        for frame in inspect.stack(context=0)[2:]:
            path = Path(frame.filename).resolve()
            if path.is_relative_to(REPO) and not path.is_relative_to(REPO / "tests"):
                self.lines[f"{path.relative_to(REPO)}:{frame.lineno}"].add(int(seed))
                return

    def check(self) -> None:
        init = {line for line, seeds in self.lines.items() if seeds <= set(SEEDS)}
        assert init, f"no line seeded the initialization with the run's seed: {dict(self.lines)}"
        owner: dict[int, str] = {}
        for line, seeds in self.lines.items():
            if line in init:
                continue
            for seed in seeds:
                assert seed not in SEEDS, f"{line} reuses run seed {seed}, its initialization's"
                assert owner.setdefault(seed, line) == line, (
                    f"seed {seed} is given by two streams: {owner[seed]} and {line}"
                )


def _common(study: str, root: Path, *extra: str):
    return compose_config(
        study,
        [f"data.root={root}", "data.download=false", "data.verify=false", "logger.mode=disabled",
         *extra],
    )  # fmt: skip


@pytest.mark.parametrize("setup", ["bn", "baseline"])
def test_the_mnist_study(root, tmp_path, monkeypatch, setup):
    cfg = _common(
        "mnist", root, "data=fashion_mnist", f"setup={setup}", "seed=[0,1,2]", "train.steps=20",
        "eval.every=10", "train.batch_size=20", "population.num_batches=3",
        "probe.nongaussian=true",
    )  # fmt: skip
    recorder = _Recorder(monkeypatch)
    mnist.train(cfg, tmp_path)
    recorder.check()


@pytest.mark.slow
def test_the_mechanism_study(root, tmp_path, monkeypatch):
    recorder = _Recorder(monkeypatch)
    for seed in SEEDS:
        cfg = _common(
            "mechanism", root, "data=fashion_mnist", "setup=mech_noisy_bn", f"seed={seed}",
            "train.steps=2", "eval.every=2", "train.batch_size=20", "probe.batches=2",
            "probe.jacobian_examples=2", "probe.etas=[1.0]",
        )  # fmt: skip
        mechanism.train(cfg, tmp_path / str(seed))
    recorder.check()


@pytest.mark.parametrize("setup", ["brn32", pytest.param("noniid_brn", marks=pytest.mark.slow)])
def test_the_renorm_study(root, tmp_path, monkeypatch, setup):
    cfg = _common(
        "renorm", root, f"setup={setup}", "seed=[0,1,2]", "train.steps=4",
        "train.lr_decay_every=2", "eval.every=2", "eval.batch_size=25", "eval.train_subset=50",
        "eval.train_mode=true",
    )  # fmt: skip
    recorder = _Recorder(monkeypatch)
    renorm.train(cfg, tmp_path)
    recorder.check()


@pytest.mark.slow
def test_the_depth_study(root, tmp_path, monkeypatch):
    recorder = _Recorder(monkeypatch)
    for seed in SEEDS:
        cfg = _common(
            "depth", root, "data=fashion_mnist", f"seed={seed}", "train.steps=3",
            "train.batch_size=20", "model.depths=[1,2]", "model.width=8",
        )  # fmt: skip
        depth.train(cfg, tmp_path / str(seed))
    recorder.check()


@pytest.mark.parametrize(
    "lines, message",
    [  # the old arithmetic: seed 0's first epoch drawn from the generator that initialized it
        ({"init": {0, 1, 2}, "epochs": {0, 1, 1_000_003, 2_000_006}}, "epochs reuses run seed 0"),
        ({"init": {0, 1, 2}, "train": {7, 8}, "fixed": {8, 9}}, "seed 8 is given by two streams"),
    ],
)
def test_the_check_can_fail(monkeypatch, lines, message):
    recorder = _Recorder(monkeypatch)
    recorder.lines.update(lines)
    with pytest.raises(AssertionError, match=message):
        recorder.check()
