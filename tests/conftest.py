import pytest
import torch

from specviz.models.tiny.adapter import TinyModel


@pytest.fixture(scope="session")
def tiny() -> TinyModel:
    """The shipped embedded model, loaded once for the whole run."""
    torch.manual_seed(0)
    return TinyModel.load()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server():
    """The app, launched once in this process on a free port; yields its URL."""
    from specviz.ui import build

    demo = build()
    demo.queue(default_concurrency_limit=1, max_size=32)
    port = _free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/"
    demo.close()
