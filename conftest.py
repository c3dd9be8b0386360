"""Names every docstring example in ``bn`` may use (``pytest --doctest-modules bn``)."""

import copy

import pytest
import torch
import torchvision

import bn


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace):
    doctest_namespace.update(bn=bn, copy=copy, nn=torch.nn, torch=torch, torchvision=torchvision)
