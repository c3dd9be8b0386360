"""Names every docstring example in ``bn`` may use (``pytest --doctest-modules bn``), and torch's
threads shared among pytest-xdist's workers."""

import copy
import os

import pytest
import torch
import torchvision

import bn


def pytest_configure(config):
    # Each xdist worker is a process with torch's default of a thread per core: two workers on two
    # cores run four threads, whose OpenMP barriers then wait on threads the CPU is not running
    # (tiny tensors' ops take milliseconds instead of microseconds). Share the threads instead.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, torch.get_num_threads() // workers))


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace):
    doctest_namespace.update(bn=bn, copy=copy, nn=torch.nn, torch=torch, torchvision=torchvision)
