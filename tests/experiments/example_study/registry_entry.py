"""The example study's registry entry: the ``Study(...)`` below goes into ``STUDIES`` in
``experiments/studies.py`` (``tests/experiments/test_example_study.py`` puts it there in a copy of
the repository)."""

from experiments.studies import Collect, Reproduction, Section, Study, seeds_one_by_one

ENTRY = Study(
    "mystudy",
    "My study: BN and Batch Renorm on the small conv net",
    (Section("mystudy", "Fashion-MNIST, 2 seeds", "mystudy", "reproduce-mystudy"),),
    {"bn32": "BN, minibatch 32", "brn32": "Batch Renorm, minibatch 32"},
    reproductions=(
        Reproduction(
            "reproduce-mystudy",
            "BN and Batch Renorm, 2 seeds; results/mystudy/",
            data=("fashion_mnist",),
            stages=(seeds_one_by_one(("bn32", "brn32"), (0, 1), 60),),
            collect=Collect("mystudy"),
        ),
    ),
)
