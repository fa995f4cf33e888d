import sys
from pathlib import Path

import pytest

# tests/ holds helper modules (paths, grading_helpers) imported by the tests; tools/ holds the
# authoring tools (nbtools), which a few tests use to check what the tools generate.
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
sys.path.insert(0, str(_HERE.parent / "tools"))


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """The tests use tiny tensors: on a 2-core machine a second torch thread only contends for the
    cores (4-20x slower when another worker runs); restore the setting afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
