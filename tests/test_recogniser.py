"""The recogniser that judges whether an embedded model draws what it is asked for (issue 60): it knows real
designs it never saw, puts noise at chance, and its training command writes what it loads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from specviz.models.tiny import designs
from specviz.stage import recogniser as module
from specviz.stage.recogniser import TrainedRecogniser, scores
from specviz.stage.recognition import judged_by

DATA = Path(__file__).parent / "data"


def held_out_sample() -> tuple[np.ndarray, list[str]]:
    """64 real images of held-out designs (tests/data/held_out_designs.json says how they were drawn)."""
    grid = np.array(Image.open(DATA / "held_out_designs.png").convert("RGB"))
    cells = [(row * 48, col * 48) for row in range(8) for col in range(8)]
    images = np.stack([grid[top : top + 48, left : left + 48] for top, left in cells])
    return images, json.loads((DATA / "held_out_designs.json").read_text())["emoji"]


@pytest.fixture(scope="module")
def shipped() -> TrainedRecogniser:
    return TrainedRecogniser.load()


def test_the_shipped_recogniser_knows_real_designs_it_never_saw(shipped):
    images, emoji = held_out_sample()
    assert set(emoji) <= set(shipped.classes)
    top1, top5 = scores(shipped.ranked(images), emoji)
    # its record on all 708 held-out designs (47.7% / 81.2%), far above the nearest image's 11% / 18% and
    # chance (1 and 5 in 2,022); this draw of 64 lies near it (33 and 54 of them)
    assert shipped.held_out[0] >= 0.45 and shipped.held_out[1] >= 0.8
    assert top1 >= shipped.held_out[0] - 0.1 and top5 >= shipped.held_out[1] - 0.1, (top1, top5)


def test_noise_is_recognised_at_chance(shipped):
    generator = np.random.default_rng(0)
    noise = generator.integers(0, 256, (200, 48, 48, 3), dtype=np.uint8)
    asked = [shipped.classes[i] for i in generator.integers(len(shipped.classes), size=200)]
    found = judged_by(shipped, noise, asked)
    assert found.samples == 200 and found.top1 <= 0.01 and found.top5 <= 0.03  # chance: 1 and 5 in 2,022
    assert judged_by(None, noise, asked) is None


def test_the_training_command_learns_made_up_emoji_and_writes_what_it_loads(tmp_path, monkeypatch, capsys):
    """Six made-up emoji, each a disc of its own colour drawn in four designs (sizes and places); the fourth
    design of each is held out."""
    colours = [(230, 40, 40), (40, 40, 230), (40, 180, 40), (240, 200, 30), (150, 60, 200), (30, 30, 30)]
    images, bases, held = [], [], []
    yy, xx = np.mgrid[:48, :48]
    for emoji, colour in enumerate(colours):
        for design in range(4):
            radius, centre = 10 + 3 * design, 20 + 2 * design
            image = np.full((48, 48, 3), 255, np.uint8)
            image[(yy - centre) ** 2 + (xx - centre) ** 2 < radius**2] = colour
            images.append(image)
            bases.append(f"E{emoji}")
            held.append(design == 3)
    count = len(images)
    made_up = designs.DesignSet(np.stack(images), bases, bases, ["noto"] * count, np.array(held))
    monkeypatch.setattr(designs, "build_design_set", lambda cache: made_up)
    module.main(["--out", str(tmp_path), "--epochs", "15", "--cache", str(tmp_path)])
    assert "held-out designs recognised" in capsys.readouterr().out
    loaded = TrainedRecogniser.load(tmp_path)
    assert loaded.classes == [f"E{i}" for i in range(6)]
    record = json.loads((tmp_path / "recogniser.json").read_text())["training"]
    assert record["epochs"] == 15 and record["held_out_designs"] == 6
    assert loaded.held_out == (record["held_out_top1"], record["held_out_top5"])
    held_emoji = [base for base, out in zip(bases, held, strict=True) if out]
    top1, _ = scores(loaded.ranked(np.stack(images)[np.array(held)]), held_emoji)
    assert top1 == record["held_out_top1"] >= 0.5  # what it wrote is what it loads; and it learnt the colours


def test_weights_of_another_shape_are_refused_before_anything_is_allocated(tmp_path, shipped):
    record = json.loads((module.ASSETS / "recogniser.json").read_text())
    (tmp_path / "recogniser.json").write_text(json.dumps({**record, "width": 10**6}))
    with pytest.raises(ValueError, match="a width of 1 to 128"):
        TrainedRecogniser.load(tmp_path)
    (tmp_path / "recogniser.json").write_text(json.dumps({**record, "classes": [1, 2]}))
    with pytest.raises(ValueError, match="each a name"):
        TrainedRecogniser.load(tmp_path)


def test_a_figure_beside_the_targets_is_neither_met_nor_missed():
    from specviz.stage.targets import Target

    assert Target("nearest training image, top-1 (no target)", "-", 0.4, None, "%").line().startswith("        ")
    assert Target("recognised", ">= 60%", 0.1, False, "%").line().startswith("MISSED")
