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


# (study, its train function, a list of seeds in one process?, overrides for a few-step run)
STUDIES = [
    pytest.param("mnist", mnist.train, True, ("setup=bn", "probe.nongaussian=true",
                 "train.steps=20", "eval.every=10", "train.batch_size=20",
                 "population.num_batches=3"), id="mnist-bn"),
    pytest.param("mnist", mnist.train, True, ("setup=baseline", "train.steps=20", "eval.every=10",
                 "train.batch_size=20"), id="mnist-baseline"),
    pytest.param("renorm", renorm.train, True, ("setup=brn32", "train.steps=4", "eval.every=2",
                 "eval.batch_size=25", "eval.train_subset=50"), id="renorm-brn32"),
    pytest.param("renorm", renorm.train, True, ("setup=noniid_brn", "eval.train_mode=true",
                 "train.steps=4", "eval.every=2", "eval.batch_size=25", "eval.train_subset=50"),
                 id="renorm-noniid", marks=pytest.mark.slow),
    pytest.param("mechanism", mechanism.train, False, ("setup=mech_noisy_bn", "train.steps=2",
                 "eval.every=2", "train.batch_size=20", "probe.batches=2",
                 "probe.jacobian_examples=2", "probe.etas=[1.0]"), id="mechanism",
                 marks=pytest.mark.slow),
    pytest.param("depth", depth.train, False, ("train.steps=3", "train.batch_size=20",
                 "model.depths=[1,2]", "model.width=8"), id="depth", marks=pytest.mark.slow),
]  # fmt: skip


@pytest.mark.parametrize("study, train, side_by_side, overrides", STUDIES)
def test_every_stream_of_a_study_has_its_own_seed(
    root, tmp_path, monkeypatch, study, train, side_by_side, overrides
):
    data = () if study == "renorm" else ("data=fashion_mnist",)
    recorder = _Recorder(monkeypatch)
    if side_by_side:  # the seeds as one list, trained in one process
        train(_common(study, root, *data, *overrides, f"seed={list(SEEDS)}"), tmp_path)
    else:
        for seed in SEEDS:
            train(_common(study, root, *data, *overrides, f"seed={seed}"), tmp_path / str(seed))
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
