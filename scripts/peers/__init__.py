"""Plain-PyTorch peers of the studies' networks, for ``python -m scripts.bench_studies``.

Each is the script a user would write instead of the study: the same network written with
``torch.nn`` layers, ``torch.optim.SGD``, one run per process, mini-batches drawn from tensors in
memory and a test-set accuracy every ``--eval-every`` steps. They import nothing from this
repository (``_train.py`` is their shared loop, torch only), so they time what PyTorch alone costs.
"""
