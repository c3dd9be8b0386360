import pytest


@pytest.fixture
def root(tiny_data):
    """The tiny generated Fashion-MNIST root (``tests/conftest.py: tiny_data``)."""
    return tiny_data
