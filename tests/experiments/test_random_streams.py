"""Every random stream of a run has a seed of its own: the run's seed seeds the initialization
alone, and no other stream (batches, fixed batches, test pairs, a control sample, noise) reuses a
run's seed or another stream's. Each study runs a few steps for three seeds while every seed given
to torch is recorded with the chain of calls in ``experiments/`` that gave it: a stream is such a
chain."""

import inspect
import re
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from experiments import depth, inception, mechanism, mnist, renorm
from experiments.kit import seeds as seeds_module
from tests.configs import compose_config

SEEDS = (0, 1, 2)
CODE = Path(__file__).resolve().parents[2] / "experiments"
# The functions that seed a network's initialization with its run's seed: (file, function).
INIT = {
    ("nets/mlp.py", "reset_parameters"),
    ("kit/classify.py", "build_copies"),  # each copy of a stack built by its own seed
    ("mechanism.py", "train"),
    ("depth.py", "train"),
    ("inception.py", "train"),
}

Stream = tuple[str, ...]  # "file:function:line" of each call in experiments/ (comprehensions
# folded into their function), innermost first


class _Recorder:
    """Seeds given to ``torch.manual_seed``, ``torch.Generator().manual_seed`` and
    ``torch.default_generator.manual_seed``, each with the calls in ``experiments/`` that gave
    it; and the seeds ``fixed_seed`` made (the same in every run by design)."""

    def __init__(self, monkeypatch) -> None:
        self.streams: dict[Stream, set[int]] = defaultdict(set)
        self.fixed: set[int] = set()
        recorder, global_seed = self, torch.manual_seed
        derive = seeds_module.derive_seed

        class Generator(torch.Generator):
            def manual_seed(self, seed):
                recorder.add(seed)
                return super().manual_seed(seed)

        class DefaultGenerator:
            def __init__(self, generator) -> None:
                self._generator = generator

            def manual_seed(self, seed):
                recorder.add(seed)
                return self._generator.manual_seed(seed)

            def __getattr__(self, name):
                return getattr(self._generator, name)

        def manual_seed(seed):
            recorder.add(seed)
            return global_seed(seed)

        def derive_seed(seed, stream, *ids, **kwargs):
            out = derive(seed, stream, *ids, **kwargs)
            if seed == -1:  # fixed_seed's
                recorder.fixed.add(out)
            return out

        monkeypatch.setattr(torch, "Generator", Generator)
        monkeypatch.setattr(torch, "default_generator", DefaultGenerator(torch.default_generator))
        monkeypatch.setattr(torch, "manual_seed", manual_seed)
        monkeypatch.setattr(seeds_module, "derive_seed", derive_seed)

    def add(self, seed: int) -> None:
        chain = []
        for frame in inspect.stack(context=0)[2:]:
            path = Path(frame.filename).resolve()
            if path.is_relative_to(CODE) and not frame.function.endswith("comp>"):
                chain.append(f"{path.relative_to(CODE)}:{frame.function}:{frame.lineno}")
        self.streams[tuple(chain)].add(int(seed))

    def check(self) -> None:
        owner: dict[int, Stream] = {}
        initialized: set[int] = set()
        for stream, seeds in self.streams.items():
            where = " <- ".join(stream) or "a call outside experiments/"
            if seeds <= set(SEEDS):
                assert stream and tuple(stream[0].split(":")[:2]) in INIT, (
                    f"{where} seeds a stream with the run's seed {sorted(seeds)}, which only the "
                    "initialization may use"
                )
                initialized |= seeds
                continue
            assert not seeds & set(SEEDS), f"{where} reuses run seed {min(seeds & set(SEEDS))}"
            if seeds <= self.fixed:  # one stream by construction, wherever it is used
                continue
            assert len(seeds) >= len(SEEDS), f"{where}: the same seeds {seeds} in every run"
            for seed in seeds:
                assert owner.setdefault(seed, stream) == stream, (
                    f"seed {seed} is given by two streams: {' <- '.join(owner[seed])} and {where}"
                )
        assert initialized == set(SEEDS), f"the initialization saw seeds {sorted(initialized)}"


def _common(study: str, root: Path, *extra: str):
    return compose_config(
        study,
        [f"data.root={root}", "data.download=false", "data.verify=false", "logger.mode=disabled",
         *extra],
    )  # fmt: skip


# (study, its train function, a list of seeds in one process?, overrides for a few-step run)
STUDIES = [
    pytest.param("mnist", mnist.train, True, ("data=fashion_mnist", "setup=bn", "probe.nongaussian=true",
                 "train.steps=20", "eval.every=10", "train.batch_size=20",
                 "population.num_batches=3"), id="mnist-bn"),
    pytest.param("mnist", mnist.train, True, ("data=fashion_mnist", "setup=baseline", "train.steps=20", "eval.every=10",
                 "train.batch_size=20"), id="mnist-baseline"),
    pytest.param("renorm", renorm.train, True, ("setup=brn32", "train.steps=4", "eval.every=2",
                 "eval.batch_size=25", "eval.train_subset=50"), id="renorm-brn32"),
    pytest.param("renorm", renorm.train, True, ("setup=noniid_brn", "eval.train_mode=true",
                 "train.steps=4", "eval.every=2", "eval.batch_size=25", "eval.train_subset=50"),
                 id="renorm-noniid"),
    pytest.param("mechanism", mechanism.train, False, ("data=fashion_mnist", "setup=mech_noisy_bn", "train.steps=2",
                 "eval.every=2", "train.batch_size=20", "probe.batches=2",
                 "probe.jacobian_examples=2", "probe.etas=[1.0]"), id="mechanism"),
    pytest.param("depth", depth.train, False, ("data=fashion_mnist", "train.steps=3", "train.batch_size=20",
                 "model.depths=[1,2]", "model.width=8"), id="depth"),
    pytest.param("inception", inception.train, False, ("setup=bn_x5_dropout", "train.steps=3",
                 "train.batch_size=8", "sampler.shard_size=16", "eval.every=3",
                 "eval.batch_size=16", "eval.train_subset=16", "eval.test_subset=16"),
                 id="inception"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("study, train, side_by_side, overrides", STUDIES)
def test_every_stream_of_a_study_has_its_own_seed(
    root, tmp_path, monkeypatch, study, train, side_by_side, overrides
):
    recorder = _Recorder(monkeypatch)
    if side_by_side:  # the seeds as one list, trained in one process
        train(_common(study, root, *overrides, f"seed={list(SEEDS)}"), tmp_path)
    else:
        for seed in SEEDS:
            train(_common(study, root, *overrides, f"seed={seed}"), tmp_path / str(seed))
    recorder.check()


INITIALIZED: dict[Stream, set[int]] = {("nets/mlp.py:reset_parameters:124",): set(SEEDS)}


@pytest.mark.parametrize(
    "streams, message",
    [  # the old arithmetic: seed 0's first epoch drawn from the generator that initialized it
        ({("kit/sampling.py:indices:31",): {0, 1, 1_000_003, 2_000_006}}, "reuses run seed 0"),
        ({("a:f:1",): {7, 8, 9}, ("b:g:2",): {8, 10, 11}}, "seed 8 is given by two streams"),
        ({("kit/sampling.py:__init__:127",): {0, 1, 2}}, "only the initialization may use"),
        ({("a:f:1",): {12_345}}, "the same seeds {12345} in every run"),
    ],
)
def test_the_check_can_fail(monkeypatch, streams, message):
    recorder = _Recorder(monkeypatch)
    recorder.streams.update({**INITIALIZED, **streams})
    with pytest.raises(AssertionError, match=re.escape(message)):
        recorder.check()
