"""``python -m scripts.reproduce`` with the reproductions of the tests of interruption and resume
(tests/scripts/test_reproduce_interrupted.py) added to the registry:

- ``hang``: two jobs, each ``python -m tests.scripts.worker_job hang`` (a job that starts a
  process of its own and never ends), nothing to collect;
- ``tiny``: MNIST's study, setups bn (seeds 0 and 1 side by side) and baseline (seed 0),
  collected as ``results/mnist/tiny``;
- ``tiny-sweep``: a sweep of bn over two learning rates, collected as
  ``results/mnist/tiny_sweep.csv`` with its curves.

A test makes a job hang after a checkpoint with :func:`tests.interrupt.hang_after_checkpoint`,
called in the workers by a ``sitecustomize.py`` of its own on ``PYTHONPATH``."""

from __future__ import annotations

from experiments.studies import Collect, Job, Reproduction
from scripts import reproduce

REPRODUCTIONS = (
    Reproduction(
        "hang", "two jobs that never end", module="tests.scripts.worker_job",
        stages=((Job("hang1", ("hang",)), Job("hang2", ("hang",))),),
    ),
    Reproduction(
        "tiny", "MNIST, a few steps", module="mnist", data=("mnist",),
        stages=((
            Job("bn", ("setup=bn", "seed=[0,1]"), estimate_s=4),
            Job("baseline", ("setup=baseline", "seed=[0]"), estimate_s=1),
        ),),
        collect=Collect("mnist/tiny"),
    ),
    Reproduction(
        "tiny-sweep", "MNIST, a sweep of a few steps", module="mnist", data=("mnist",),
        stages=((Job("sweep", ("setup=bn", "train.lr=0.1,1"), sweep=True, estimate_s=3),),),
        collect=Collect("mnist/tiny_sweep.csv", sweep=True, curves="mnist/tiny_sweep_curves.csv"),
    ),
)  # fmt: skip


def module_of(r: Reproduction) -> str:
    return r.module if r.module.startswith("tests.") else _module_of(r)


_module_of = reproduce.module_of

if __name__ == "__main__":
    for r in REPRODUCTIONS:
        reproduce.REPRODUCTIONS[r.name] = r
    reproduce.module_of = module_of
    reproduce.cli()
