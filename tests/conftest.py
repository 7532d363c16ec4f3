import os

import pytest
import torch

from specviz.models.tiny.adapter import TinyModel


def pytest_addoption(parser):
    parser.addoption(
        "--full-stats",
        action="store_true",
        help="statistical tests at their full sample sizes (test_lossless: 20,000 images for each method's main "
        "configuration); without it they run at the reduced sizes CI uses, which still catch every broken variant",
    )


@pytest.fixture(scope="session")
def full_stats(request) -> bool:
    """Whether statistical tests draw their full sample sizes (--full-stats) or CI's reduced ones."""
    return request.config.getoption("--full-stats")


def pytest_configure(config):
    """Share the cores among xdist workers: oversubscribed OpenMP teams make every pass slower. On a
    machine busy with other work, SPECVIZ_THREADS (as the app and the CLI read it) caps the share."""
    from specviz.core.threads import choose_threads

    config.addinivalue_line("markers", "statistical: a sampling test whose size --full-stats raises")
    # the app's tests expect the CPU's behaviour (retimed races, CPU images); test_cuda.py starts its own app
    os.environ.setdefault("SPECVIZ_DEVICE", "cpu")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = max(1, (os.cpu_count() or 1) // workers)
    torch.set_num_threads(min(share, choose_threads()) if os.environ.get("SPECVIZ_THREADS") else share)


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
    """The app, launched once in this process on a free port with app.py's style sheet, timing each run
    once after a race or a comparison (the default three cost the suite minutes; the tests of the timing
    rounds and their spread ask for two); yields its URL."""
    from specviz.ui import build, launch_options

    os.environ["SPECVIZ_TIMINGS"] = "1"

    demo = build()
    demo.queue(default_concurrency_limit=1, max_size=32)
    port = _free_port()
    # as app.py serves it: the layouts under test are in the style sheet, the guard in front of the routes
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_options(demo))
    yield f"http://127.0.0.1:{port}/"
    demo.close()


@pytest.fixture
def untimed(monkeypatch):
    """Races and comparisons keep their own clocks, as on a GPU, with no undisturbed re-timing after them:
    for the app's tests of pictures, layout and narration. The re-timing itself has its own tests
    (test_app: the summary's spread, Compare's medians, Inspect stepping during a timing round)."""
    from specviz.ui import compare, race

    monkeypatch.setattr(race, "needs_retiming", lambda model: False)
    monkeypatch.setattr(compare, "needs_retiming", lambda model: False)


@pytest.fixture(scope="session")
def eagle2_trace(tiny):
    """A real eagle2 run on the embedded model (default trees, seed 0), for the tree views' tests."""
    from specviz.decoding import run

    return run(tiny, "eagle2", "red apple", 0)


@pytest.fixture(scope="session")
def greedy_ar(tiny):
    """Greedy AR on the embedded model for "cat face" at guidance 3: the one outcome every greedy method
    must reproduce, run once per worker for the seven tests that compare with it."""
    from specviz.core.settings import SamplingSettings
    from specviz.decoding import run

    return run(tiny, "ar", "cat face", seed=0, sampling=SamplingSettings(temperature=0, guidance_scale=3.0))
