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
from specviz.stage.recogniser import Split, TrainedRecogniser, figures, gender_neutral, scores
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
    known = [index for index, figure in enumerate(shipped.figures(emoji)) if figure in shipped.classes]
    assert len(known) == 63  # but "man bouncing ball": every design of its figure has one of its emoji held out
    top1, top5 = shipped.judged(images[known], [emoji[index] for index in known])
    # its record on the 343 held-out designs of a figure (59.3% / 82.5%), far above the nearest image and
    # chance (1 and 5 in 1,788); this draw of 63 images (30 and 50 of them) lies near it
    assert shipped.held_out[0] >= 0.55 and shipped.held_out[1] >= 0.75
    assert top1 >= shipped.held_out[0] - 0.15 and top5 >= shipped.held_out[1] - 0.15, (top1, top5)


def test_noise_is_recognised_at_chance(shipped):
    generator = np.random.default_rng(0)
    noise = generator.integers(0, 256, (200, 48, 48, 3), dtype=np.uint8)
    asked = [shipped.classes[i] for i in generator.integers(len(shipped.classes), size=200)]
    found = judged_by(shipped, noise, asked)
    assert found.samples == 200 and found.top1 <= 0.01 and found.top5 <= 0.03  # chance: 1 and 5 in 1,788
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
    design_names = ["openmoji", "noto", "twemoji", "fluent"] * len(colours)
    made_up = designs.DesignSet(np.stack(images), bases, bases, design_names, np.array(held))
    monkeypatch.setattr(designs, "build_design_set", lambda cache: made_up)
    module.main(["--out", str(tmp_path), "--epochs", "15", "--cache", str(tmp_path)])
    assert "held-out designs of a figure recognised top-1" in capsys.readouterr().out
    loaded = TrainedRecogniser.load(tmp_path)
    assert loaded.classes == [f"E{i}" for i in range(6)]
    record = json.loads((tmp_path / "recogniser.json").read_text())["training"]
    assert record["epochs"] == 15 and record["held_out_designs"] == 6
    assert loaded.held_out == (record["held_out_top1"], record["held_out_top5"])
    held_emoji = [base for base, out in zip(bases, held, strict=True) if out]
    top1, _ = loaded.judged(np.stack(images)[np.array(held)], held_emoji)
    assert top1 == record["held_out_top1"] >= 0.5  # what it wrote is what it loads; and it learnt the colours


def test_weights_of_another_shape_are_refused_before_anything_is_allocated(tmp_path, shipped):
    record = json.loads((module.ASSETS / "recogniser.json").read_text())
    (tmp_path / "recogniser.json").write_text(json.dumps({**record, "width": 10**6}))
    with pytest.raises(ValueError, match="a width of 1 to 128"):
        TrainedRecogniser.load(tmp_path)
    (tmp_path / "recogniser.json").write_text(json.dumps({**record, "classes": [1, 2]}))
    with pytest.raises(ValueError, match="each a name"):
        TrainedRecogniser.load(tmp_path)
    too_many = {f"E{index}": record["classes"][0] for index in range(module.MAX_CLASSES + 1)}
    for figure_of in ({"1F600": "no such class"}, {"1F600": [1]}, ["1F600"], too_many):
        (tmp_path / "recogniser.json").write_text(json.dumps({**record, "figure_of": figure_of}))
        with pytest.raises(ValueError, match="figure_of must name one of its classes"):
            TrainedRecogniser.load(tmp_path)


def test_gender_is_merged_as_skin_tones_are():
    farmer = "1F9D1-200D-1F33E"
    assert gender_neutral("1F468-200D-1F33E") == gender_neutral("1F469-200D-1F33E") == farmer  # man, woman farmer
    assert gender_neutral("26F9-200D-2642") == gender_neutral("26F9-200D-2640") == "26F9"  # bouncing ball
    couple = "1F9D1-200D-2764-200D-1F9D1"  # couple with heart as Unicode writes its skin-toned forms
    assert gender_neutral("1F491") == gender_neutral("1F469-200D-2764-200D-1F468") == couple
    assert gender_neutral("1F474") == gender_neutral("1F475") == "1F9D3"  # old man, old woman: older person
    assert gender_neutral("1F466") == "1F9D2" != gender_neutral("1F468")  # a boy is a child, not a man
    assert gender_neutral("1F34E") == "1F34E" and gender_neutral("1F1F3-1F1F4") == "1F1F3-1F1F4"  # apple, flag
    assert gender_neutral("2640") == "2640" != gender_neutral("2642")  # the female and male signs themselves
    assert gender_neutral("1F385") == gender_neutral("1F936") == "1F9D1-200D-1F384"  # Santa, Mrs. Claus: Mx Claus


def test_emoji_that_a_design_draws_alike_are_one_figure():
    """Noto draws Bouvet Island's flag as Norway's, the other designs apart: one design drawing them alike is
    enough. Two emoji alike in one skin tone but not in the others are not one figure."""
    norway, bouvet = np.zeros((3, 48, 48, 3), np.uint8), np.zeros((3, 48, 48, 3), np.uint8)
    apple = np.zeros((48, 48, 3), np.uint8)
    norway[:, 10], bouvet[:, 10], apple[20] = 200, 200, 100
    bouvet[1:, 30] = 90  # Twemoji and Fluent draw Bouvet Island apart
    images = np.stack([*norway, *bouvet, apple])
    bases = ["1F1F3-1F1F4"] * 3 + ["1F1E7-1F1FB"] * 3 + ["1F34E"]
    found = figures(images, bases, ["noto", "twemoji", "fluent"] * 2 + ["noto"])
    assert found == {"1F1F3-1F1F4": "1F1E7-1F1FB", "1F1E7-1F1FB": "1F1E7-1F1FB", "1F34E": "1F34E"}
    person, man = "1F9D1-200D-1F33E", "1F468-200D-1F33E"
    found = figures(np.stack([norway[0], apple]), [person, man], ["noto", "noto"])
    assert found[man] == found[person] == man  # gender merged though drawn apart; named by the least, not the first
    woman, blond = "1F469", "1F471-200D-2640"  # two skin tones each, alike in the first only
    tones = np.stack([apple, norway[0], apple, bouvet[1]])
    assert len(set(figures(tones, [woman, woman, blond, blond], ["twemoji"] * 4).values())) == 2


def test_a_figure_beside_the_targets_is_neither_met_nor_missed():
    from specviz.stage.targets import Target

    assert Target("nearest training image, top-1 (no target)", "-", 0.4, None, "%").line().startswith("        ")
    assert Target("recognised", ">= 60%", 0.1, False, "%").line().startswith("MISSED")


def test_a_design_of_a_figure_is_held_out_whole():
    """Noto's "woman farmer" held out is judged by a recogniser that saw no farmer of Noto's, not even "farmer"."""
    woman, person, apple = "1F469-200D-1F33E", "1F9D1-200D-1F33E", "1F34E"
    bases = [woman, person, woman, person, apple, apple]
    design_names = ["noto", "noto", "twemoji", "twemoji", "noto", "twemoji"]
    images = np.stack([np.full((48, 48, 3), 10 * i, np.uint8) for i in range(6)])
    split = Split.of(images, bases, design_names, np.array([True, False, False, False, False, True]))
    assert split.held_emoji == [woman, person, apple]  # Noto's farmers, both; Twemoji's apple
    assert len(split.train_images) == 3 and split.classes == [apple, woman]  # a figure is named by its first emoji
    assert [split.classes[label] for label in split.train_labels] == [split.figure_of[woman]] * 2 + [apple]


def test_the_real_designs_measure_holds_out_as_the_recogniser_does(monkeypatch, tmp_path):
    from specviz.stage.recognition import real_designs

    woman, person, apple = "1F469-200D-1F33E", "1F9D1-200D-1F33E", "1F34E"
    bases = [woman, person, woman, person, apple, apple]
    images = np.stack([np.full((48, 48, 3), 10 * i, np.uint8) for i in range(6)])
    held = np.array([True, False, False, False, False, True])
    made_up = designs.DesignSet(images, bases, bases, ["noto", "noto", "twemoji", "twemoji", "noto", "twemoji"], held)
    monkeypatch.setattr(designs, "build_design_set", lambda cache: made_up)
    found = real_designs(tmp_path)
    assert found.by_caption.samples == 3 and found.by_recogniser is None  # Noto's farmers, both; Twemoji's apple


def test_each_group_weighs_the_same_in_the_scores():
    ranked = [["a", "b"], ["b", "a"], ["b", "a"], ["c", "a"]]
    assert scores(ranked, ["a", "a", "a", "c"]) == (0.5, 1.0)  # by image
    assert scores(ranked, ["a", "a", "a", "c"], ["x", "x", "x", "y"]) == (2 / 3, 1.0)  # x: 1 of 3, y: 1 of 1
