import pytest

# The README's example study: files that test_example_study.py copies into a copy of the repository.
collect_ignore = ["example_study"]


@pytest.fixture
def root(tiny_data):
    """The tiny generated Fashion-MNIST root (``tests/conftest.py: tiny_data``)."""
    return tiny_data
