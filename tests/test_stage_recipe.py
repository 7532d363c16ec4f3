"""The GPU recipe for the next embedded model (scripts/stage_on_gpu.sh), smoke-run on the CPU at a tiny size:
train, unpack, load and draw, continue; on made-up designs, so no emoji package or text encoder is needed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import torch

from specviz.models.tiny.adapter import TinyModel

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ["sun", "moon", "red apple", "owl", "pizza", "star"]


def made_up_cache(cache: Path, monkeypatch) -> None:
    """designs.npz of noise images (4 designs of 6 captions, one of each caption's designs held out) and
    their caption vectors, where the trainer reads them."""
    from specviz.models.tiny.designs import DesignSet
    from specviz.training import tiny

    generator = np.random.default_rng(0)
    count = 4 * len(CAPTIONS)
    images = generator.integers(0, 256, (count, 48, 48, 3), dtype=np.uint8)
    captions = [caption for caption in CAPTIONS for _ in range(4)]
    designs = ["openmoji", "noto", "twemoji", "fluent"] * len(CAPTIONS)
    held = np.array([index % 4 == index // 4 % 4 for index in range(count)])
    (cache / "designs").mkdir(parents=True)
    np.savez_compressed(
        cache / "designs" / "designs.npz",
        images=images,
        captions=np.array(captions),
        bases=np.array(captions),
        designs=np.array(designs),
        held_out=held,
    )
    monkeypatch.setattr(tiny, "TextEncoder", lambda: lambda texts: torch.randn(len(texts), 384))
    tiny.prompt_vectors(DesignSet(images, captions, captions, designs, held), cache, torch.device("cpu"))


def recipe(command: str, tmp_path: Path, **settings: str) -> subprocess.CompletedProcess:
    environment = os.environ | {
        "OUT": str(tmp_path / "out"),
        "CACHE": str(tmp_path / "cache"),
        "WORK": str(tmp_path / "work"),
        "STAGE": str(tmp_path / "stage"),
        "DEVICE": "cpu",
        "BATCH": "2",
        "EVAL_EVERY": "2",
        "POLL_SECONDS": "1",
        "SPECVIZ_THREADS": "1",
        **settings,
    }
    (tmp_path / "out").mkdir(exist_ok=True)
    return subprocess.run(
        [
            "bash",
            "scripts/stage_on_gpu.sh",
            command,
            *([] if command != "unpack" else [str(tmp_path / "out"), str(tmp_path / "stage")]),
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_recipe_trains_brings_back_a_model_that_draws_and_continues_it(tmp_path, monkeypatch):
    made_up_cache(tmp_path / "cache", monkeypatch)
    trained = recipe("train", tmp_path, STEPS="3", HIDDEN="64", LAYERS="1")
    assert trained.returncode == 0, (tmp_path / "out" / "train.log").read_text()[-2000:]
    assert sorted(path.name for path in (tmp_path / "out").glob("stage.tar.*")) == ["stage.tar.aa"]
    assert '"step": 2' in (tmp_path / "out" / "train.log").read_text()  # the evaluations as they went

    unpacked = recipe("unpack", tmp_path)
    assert unpacked.returncode == 0, unpacked.stderr
    assert "3 steps" in unpacked.stdout
    model = TinyModel.load(tmp_path / "stage", name="stage")
    assert model.network.config.hidden_size == 64
    from specviz.decoding import run

    trace = run(model, "ar", "sun", 0, model.default_sampling)
    assert len(trace.decodable) == 256

    (tmp_path / "out" / "stage.tar.aa").unlink()
    continued = recipe("continue", tmp_path, STEPS="2")
    assert continued.returncode == 0, (tmp_path / "out" / "train.log").read_text()[-2000:]
    summary = json.loads((tmp_path / "work" / "model" / "config.json").read_text())
    assert summary["model"]["hidden_size"] == 64  # the brought-back shape, not the trainer's default
    assert summary["training"]["steps"] == 2 and summary["training"]["continued_from"]["steps"] == 3
    assert (tmp_path / "out" / "stage.tar.aa").exists()


def test_the_recipe_refuses_to_train_without_its_data(tmp_path):
    refused = recipe("train", tmp_path, STEPS="1")
    assert refused.returncode == 3 and "run pack here and carry it" in refused.stderr


def test_a_folder_to_continue_is_checked_as_the_app_loads_it(tmp_path):
    """--init-from a folder the adapter would refuse stops with its one-line reason, before any data is built."""
    import pytest

    from specviz.training import tiny

    with pytest.raises(SystemExit, match=r"config\.json, model\.safetensors, codebook\.safetensors missing"):
        tiny.main(["--init-from", str(tmp_path), "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")])
