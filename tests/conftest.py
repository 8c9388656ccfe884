"""Fixtures shared by the test modules (a module opts in with `pytestmark = pytest.mark.usefixtures(...)`)."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """One torch thread: tiny tensors gain little from a second one and lose much on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def float64(one_thread):
    """float64 by default (exact comparisons against loops), on one thread."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)
