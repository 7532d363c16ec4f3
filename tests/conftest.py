import pytest
import torch

from specviz.models.tiny.adapter import TinyModel


@pytest.fixture(scope="session")
def tiny() -> TinyModel:
    """The shipped embedded model, loaded once for the whole run."""
    torch.manual_seed(0)
    return TinyModel.load()
