"""Shared fixtures. The tests use tiny tensors, for which one thread per worker is fastest."""

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture
def gen() -> torch.Generator:
    """A fresh seeded generator per test: tests never depend on each other's draws."""
    return torch.Generator().manual_seed(1234)
