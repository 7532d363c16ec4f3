"""The embedded model's training data: an emoji's base, mirror images only where they keep the caption
true, translations that are exact in token space."""

import numpy as np
import torch

from specviz.models.tiny.data import base_of, may_mirror, shift_tokens
from specviz.training.tiny import mirrored


def test_skin_tone_variants_share_their_base():
    santa = [0x1F385]
    toned = [[0x1F385, tone] for tone in range(0x1F3FB, 0x1F400)]
    assert {base_of(variant) for variant in toned} == {base_of(santa)} == {"1F385"}
    assert base_of([0x2764, 0xFE0F]) == "2764"  # variation selectors do not make a new base


def test_mirror_images_only_where_the_caption_stays_true():
    assert may_mirror("red apple") and may_mirror("woman detective medium skin tone")
    for caption in ("left arrow", "keycap 3", "flag: France", "two o'clock", "man raising right hand", "OK button"):
        assert not may_mirror(caption), caption


def test_training_keeps_every_original_first_and_mirrors_only_what_may_be_mirrored():
    images = np.zeros((2, 4, 4, 3), dtype=np.uint8)
    images[:, :, 0] = (200, 30, 30)  # a red left edge
    pictures, source = mirrored(images, ["red apple", "left arrow"])
    assert len(pictures) == 3 and source.tolist() == [0, 1, 0]  # the originals, then the apple's mirror image
    assert np.array_equal(pictures[:2], images)
    assert np.array_equal(pictures[2], images[0][:, ::-1]) and (pictures[2][:, -1] == (200, 30, 30)).all()


def test_token_shifts_translate_the_grid_and_fill_with_white():
    grid = torch.arange(12).view(1, 12)  # a 3 x 4 grid of distinct codes
    right_down = shift_tokens(grid, 3, 4, torch.tensor([1]), torch.tensor([1]), fill=99).view(3, 4)
    assert right_down.tolist() == [[99, 99, 99, 99], [99, 0, 1, 2], [99, 4, 5, 6]]
    up_left = shift_tokens(grid, 3, 4, torch.tensor([-1]), torch.tensor([-2]), fill=99).view(3, 4)
    assert up_left.tolist() == [[6, 7, 99, 99], [10, 11, 99, 99], [99, 99, 99, 99]]
    same = shift_tokens(grid.repeat(2, 1), 3, 4, torch.tensor([0, 0]), torch.tensor([0, 0]), fill=99)
    assert torch.equal(same, grid.repeat(2, 1))
