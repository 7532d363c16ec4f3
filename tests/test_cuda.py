"""The CUDA path, checked where there is a GPU: `python -m specviz gpu-report` runs these (`pytest -m cuda`).

Without CUDA every test here is skipped and says so. On a GPU they run every method on `tiny` and the
continuous pair on the device, count the hidden host reads of each window and tree pass there (each
one a device sync), run passes under CUDA's sync debug mode (an error at any sync but the intended
ones, on the plain path and on the fast path with its CUDA graphs), prove methods exact with every random
number drawn on the GPU, run every method on the fast path and the plain path in lock-step (on `tiny` and on
the Lumina-mGPT and LlamaGen test models), and compare a
session's logits on the GPU with the same session on the CPU; and start the app (`python app.py`) on the GPU
and race through it.
"""

import contextlib
import gc
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from gradio_client import Client
from model_zoo import CHAMELEON_GRID, chameleon_parts, llamagen_config, llamagen_vq
from test_app import _race

from specviz.decoding import METHODS, run
from specviz.decoding.registry import get_method
from specviz.measure.lossless import check_lossless
from specviz.measure.syncs import hidden_reads
from specviz.models.chameleon.adapter import LuminaMGPTModel
from specviz.models.fast.shadow import ShadowedModel
from specviz.models.llamagen.adapter import LlamaGenModel, LlamaGenTransformer
from specviz.models.registry import load_model
from specviz.trace import Trace
from specviz.ui.loading import DEVICE_ENV_VAR, MODELS_ENV_VAR, ZERO_GPU_ENV_VAR

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: on a GPU, python -m specviz gpu-report"),
]
ROOT = Path(__file__).resolve().parents[1]
DISCRETE = [name for name, method in METHODS.items() if method.iterate is not None]
SETTINGS = {"window": 16, "tree_tokens": 30}


def _settings(method: str) -> dict:
    """A window of 16 or a tree of 30 drafts, for the methods that take one."""
    takes = {name for name, _, _ in METHODS[method].parameters.fields()}
    return {name: value for name, value in SETTINGS.items() if name in takes}


@pytest.fixture(scope="module")
def tiny_cuda():
    return load_model("tiny", device="cuda")


@pytest.mark.parametrize("method", DISCRETE)
def test_every_method_completes_an_image_on_the_gpu(tiny_cuda, method):
    trace = run(tiny_cuda, method, "red apple", 0, params=_settings(method))
    assert len(trace.tokens) == 256 and Trace.from_json(trace.to_json()) == trace
    assert method == "ar" or trace.nfe < 256


@pytest.mark.parametrize("fast", [False, True], ids=["plain", "fast path"])
@pytest.mark.parametrize("method", [name for name in DISCRETE if name != "ar"])
def test_window_and_tree_passes_make_no_hidden_host_read_on_the_gpu(tiny_cuda, tiny_cuda_fast, method, fast):
    assert hidden_reads(tiny_cuda_fast if fast else tiny_cuda, method, _settings(method)) == 0


@pytest.fixture(scope="module")
def tiny_cuda_fast():
    return load_model("tiny", device="cuda", fast_path=True)


@pytest.mark.parametrize("fast", [False, True], ids=["plain", "fast path"])
@pytest.mark.parametrize("method", DISCRETE)
def test_passes_make_no_sync_but_the_intended_ones(tiny_cuda, tiny_cuda_fast, method, fast):
    """`torch.cuda.set_sync_debug_mode("error")` raises at any synchronisation outside `specviz.models.syncing`
    (on the fast path a graph's capture is one, once per width)."""
    spec = get_method(method)
    params = spec.resolve(_settings(method))
    model = tiny_cuda_fast if fast else tiny_cuda
    with torch.inference_mode():
        decoder = spec.open(model, "red apple", 0, model.default_sampling, params)
        decoder.next()
        torch.cuda.set_sync_debug_mode("error")
        try:
            records = [decoder.next() for _ in range(3)]
        finally:
            torch.cuda.set_sync_debug_mode(0)
    assert all(record is not None for record in records)


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("method", "params"), [("ar", {}), ("sjd", {}), ("scd-mc", {}), ("eagle2", {"drafter": "head"})]
)
def test_exact_on_the_gpus_own_random_streams(method, params, full_stats):
    """The llama toy on the GPU, every random number drawn there: the samples match its exact AR law (at
    test_lossless's sizes for this toy: 3,000 images with --full-stats, else 1,500)."""
    samples = 3000 if full_stats else 1500
    report = check_lossless(method, samples=samples, toy="llama", params=params, device="cuda")
    assert report.matches, report.summary()


@pytest.mark.parametrize("method", ["eagle2", "peanut"])
def test_the_draft_head_drafts_on_the_gpu(tiny_cuda, method):
    trace = run(tiny_cuda, method, "red apple", 0, params={"drafter": "head"})
    assert len(trace.tokens) == 256 and trace.nfe < 128  # the head's trees commit several tokens per pass


@pytest.mark.parametrize("method", DISCRETE)
def test_the_fast_path_with_cuda_graphs_gives_the_plain_paths_distributions(tiny_cuda, tiny_cuda_fast, method):
    """Every pass of the method on the graphed fast path and on the plain path in lock-step."""
    shadowed = ShadowedModel(tiny_cuda_fast, tiny_cuda)
    trace = run(shadowed, method, "red apple", 0, params=_settings(method))
    assert len(trace.tokens) == 256 and shadowed.largest_gap < 1e-4, shadowed.largest_gap
    del shadowed
    gc.collect()  # the sessions are gone: their caches are back in the pool
    assert 1 in tiny_cuda_fast.static.captured_widths  # the graphs were captured (and replayed)


def _family_on_cuda(family: str, fast_path: bool):
    """A family's random-weight test model (tests/model_zoo.py) with its network on the GPU."""
    if family == "lumina-mgpt":
        network, processor = chameleon_parts()
        return LuminaMGPTModel.from_model(network.cuda(), processor, grid=CHAMELEON_GRID, fast_path=fast_path)
    torch.manual_seed(0)  # as llamagen_c2i builds it
    gpt = LlamaGenTransformer(llamagen_config()).cuda()
    return LlamaGenModel.from_model(gpt, llamagen_vq().cuda(), fast_path=fast_path)


@pytest.fixture(scope="module", params=["lumina-mgpt", "llamagen-c2i"])
def family_cuda(request):
    """(plain, fast path) of a transformers family (left-padded guidance rows, row-end slots) and of LlamaGen's
    own GPT (its attention over a static cache)."""
    return _family_on_cuda(request.param, False), _family_on_cuda(request.param, True)


@pytest.mark.parametrize("method", DISCRETE)
def test_a_familys_fast_path_with_cuda_graphs_gives_the_plain_paths_distributions(family_cuda, method):
    """The tiny check above on a real family's test model: every pass of the method, guidance on, on the
    graphed fast path and on the plain path in lock-step."""
    plain, fast = family_cuda
    shadowed = ShadowedModel(fast, plain)
    trace = run(shadowed, method, "a red apple" if plain.name == "lumina-mgpt" else "3", 0)
    assert len(trace.tokens) == plain.geometry.seq_len and shadowed.largest_gap < 1e-4, shadowed.largest_gap
    del shadowed
    gc.collect()
    assert 1 in fast.static.captured_widths and fast.static.made == 1


def test_a_session_on_the_gpu_gives_the_cpu_sessions_logits(tiny_cuda):
    tiny_cpu = load_model("tiny", device="cpu")
    tokens = torch.randint(tiny_cpu.geometry.vocab_size, (17,), generator=torch.Generator().manual_seed(0))
    logits = []
    for model in (tiny_cpu, tiny_cuda):
        session = model.session("red apple", 1.5)
        session.forward(tokens[:5].to(model.device))
        session.commit(5)
        logits.append(session.forward(tokens[5:].to(model.device), parents=[-1, 0, 0, 1, 2, 2, -1, 6, 7, 7, 3, 4]))
    torch.testing.assert_close(logits[1].cpu(), logits[0], atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("method", ["ar", "ar-draft", "cspd", "cspd-exact"])
def test_the_continuous_pair_decodes_on_the_gpu(method):
    pair = load_model("tiny-continuous", device="cuda")
    trace = run(pair, method, "red apple", 0)
    assert len(trace.vectors) == len(trace.tokens) == len(trace.geometry.layout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served_app(log: Path, **env: str | None) -> Iterator[str]:
    """`python app.py` in a process of its own, as an owner starts it, on a free port with `env` over this
    process's environment (None removes a variable); yields its URL once it answers, and stops it after.
    Its own process: the models' per-process cache holds whatever this one loaded, on whatever device."""
    port = _free_port()
    changes = {"GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    environ = {name: value for name, value in {**os.environ, **changes, **env}.items() if value is not None}
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=environ, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 300  # torch, Gradio, three small models and the text encoder
        while True:
            if process.poll() is not None:
                pytest.fail(f"the app stopped at start-up (exit {process.returncode}): {log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(url, timeout=10).close()
                break
            except OSError:  # not listening yet
                if time.monotonic() > deadline:
                    pytest.fail(f"the app did not answer within 300 s: {log.read_text()[-3000:]}")
                time.sleep(1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_app_on_a_gpu_races_the_embedded_model_on_it(tmp_path):
    """The app started as on one's own GPU machine or a dedicated GPU Space (SPECVIZ_DEVICE unset, not
    ZeroGPU): `tiny` loads on CUDA on its fast path, and a race of sjd against AR through the API gives both
    runs and the verdicts. On the GPU the race's own clocks are kept; on a CPU the summary would say the runs
    were timed again "with nothing drawing" (`needs_retiming`: a CPU model's race)."""
    log = tmp_path / "app.log"
    unset = dict.fromkeys((DEVICE_ENV_VAR, ZERO_GPU_ENV_VAR, MODELS_ENV_VAR, "SPACE_ID"))
    with served_app(log, **unset) as url:
        shown = _race(Client(url, verbose=False), method="sjd")
    method_image, method_counter, ar_image, ar_counter, summary = shown[:5]
    assert "**sjd**" in method_counter and "256/256 tokens" in method_counter
    assert "**ar** · NFE 256 · 256/256 tokens" in ar_counter
    assert Path(method_image).is_file() and Path(ar_image).is_file()
    headline = summary.splitlines()[0]
    assert headline.startswith("### sjd:") and "step compression" in headline  # the passes' verdict
    assert any(verdict in headline for verdict in ("speedup over AR", "slower than AR", "about the same"))  # latency
    assert "each side's clock counts only its own compute" in summary  # timed on the GPU: not re-timed as on a CPU
    assert "nothing drawing" not in summary and "not loaded at start-up" not in log.read_text()
