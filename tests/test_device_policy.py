"""Where the app's models run (`specviz.ui.loading.device_for`), checked on the CPU with the GPU and ZeroGPU
pretended: the embedded models on a local GPU or a dedicated GPU Space run on CUDA (on their fast path where
they have one), on ZeroGPU on the CPU (a GPU slot costs the visitor's quota); SPECVIZ_DEVICE overrides both,
and a wrong value is one line at start-up. tests/test_cuda.py races on a real GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specviz.core.inputs import InputError
from specviz.ui import loading

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("tiny", "tiny-uncertain", "tiny-continuous", "janus-pro")  # the embedded ones and a hub model


@pytest.fixture
def machine(monkeypatch):
    """A machine as the test says: `machine(gpu=..., zero_gpu=..., device=...)`, SPECVIZ_DEVICE unset by default."""
    monkeypatch.delenv(loading.DEVICE_ENV_VAR, raising=False)
    monkeypatch.delenv(loading.ZERO_GPU_ENV_VAR, raising=False)

    def make(gpu: bool, zero_gpu: bool = False, device: str | None = None) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
        if zero_gpu:
            monkeypatch.setenv(loading.ZERO_GPU_ENV_VAR, "true")  # as Hugging Face sets it
        if device is not None:
            monkeypatch.setenv(loading.DEVICE_ENV_VAR, device)

    return make


def _devices() -> list[str]:
    return [loading.device_for(name) for name in MODELS]


def test_a_local_gpu_runs_every_model_on_cuda_the_small_ones_on_their_fast_path(machine):
    machine(gpu=True)
    assert _devices() == ["cuda"] * 4
    assert [loading.fast_path_for(name, "cuda") for name in MODELS] == [True, True, False, False]  # a 7B's: gigabytes


def test_zerogpu_keeps_the_embedded_models_on_the_cpu(machine):
    machine(gpu=True, zero_gpu=True)  # ZeroGPU's torch says CUDA is there, outside any GPU call too
    assert _devices() == ["cpu", "cpu", "cpu", "cuda"]
    assert not loading.fast_path_for("tiny", "cuda")  # its graphs would not outlive one GPU call's worker


@pytest.mark.parametrize("value", ["1", "True", "t"])
def test_zerogpu_is_read_as_the_spaces_package_reads_it(machine, monkeypatch, value):
    machine(gpu=True)
    monkeypatch.setenv(loading.ZERO_GPU_ENV_VAR, value)
    assert loading.on_zero_gpu() and loading.device_for("tiny") == "cpu"
    monkeypatch.setenv(loading.ZERO_GPU_ENV_VAR, "false")
    assert not loading.on_zero_gpu() and loading.device_for("tiny") == "cuda"


def test_no_gpu_runs_everything_on_the_cpu(machine):
    machine(gpu=False)
    assert _devices() == ["cpu"] * 4
    machine(gpu=False, device="auto")
    assert _devices() == ["cpu"] * 4


@pytest.mark.parametrize("zero_gpu", [False, True])
def test_specviz_device_cpu_puts_every_model_on_the_cpu(machine, zero_gpu):
    machine(gpu=True, zero_gpu=zero_gpu, device=" CPU ")  # as an owner may type it
    assert _devices() == ["cpu"] * 4
    assert not loading.fast_path_for("tiny", "cpu")


def test_specviz_device_cuda_puts_every_model_on_cuda_even_on_zerogpu(machine):
    machine(gpu=True, zero_gpu=True, device="cuda")  # the owner spends GPU slots on the embedded models too
    assert _devices() == ["cuda"] * 4


def test_specviz_device_cuda_without_a_gpu_is_one_clear_error_at_start_up(machine):
    machine(gpu=False, device="cuda")
    with pytest.raises(InputError, match=r"^SPECVIZ_DEVICE=cuda but torch sees no CUDA device here .*auto or cpu"):
        loading.load_at_startup()  # before any model loads
    with pytest.raises(InputError, match="no CUDA device"):
        loading.device_for("tiny")


@pytest.mark.parametrize("value", ["gpu", "", "cuda:0"])
def test_an_unknown_value_is_refused_with_the_valid_ones(machine, value):
    machine(gpu=True, device=value)
    with pytest.raises(InputError, match=r"^SPECVIZ_DEVICE must be one of auto, cpu, cuda, got '.*'$"):
        loading.load_at_startup()


def test_the_app_says_a_wrong_setting_in_one_line_and_stops():
    """`python app.py` with SPECVIZ_DEVICE=gpu: one line on stderr, no traceback, a failing exit."""
    env = {**os.environ, loading.DEVICE_ENV_VAR: "gpu", "GRADIO_ANALYTICS_ENABLED": "False"}
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == "specviz: SPECVIZ_DEVICE must be one of auto, cpu, cuda, got 'gpu'"
    assert "Traceback" not in done.stderr


def test_a_model_loads_where_the_policy_says_on_the_fast_path_as_the_command_line_loads_it(machine, monkeypatch):
    """What `_load_once` hands `load_model`: the device, and `fast_path` as `--fast-path` gives it."""
    machine(gpu=True)
    asked = []
    monkeypatch.setattr(loading, "load_model", lambda name, **options: asked.append((name, options)))
    for name in ("tiny", "tiny-continuous"):
        loading._load_once.__wrapped__(name)  # past the per-process cache
    assert asked == [
        ("tiny", {"device": "cuda", "fast_path": True}),
        ("tiny-continuous", {"device": "cuda", "fast_path": False}),
    ]
