import sys
from pathlib import Path

import pytest

# tests/ holds helper modules (nbtools, grading_helpers) imported by the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """The tests use tiny tensors: on a 2-core machine a second torch thread only contends for the
    cores (4-20x slower when another worker runs); restore the setting afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
