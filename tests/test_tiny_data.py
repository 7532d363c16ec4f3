"""The embedded model's training data: the split by base emoji, augmentations that keep captions true,
translations that are exact in token space."""

import numpy as np
import torch

from specviz.models.tiny.data import EmojiSet, augmented_images, base_of, is_held_out, may_mirror, shift_tokens


def test_skin_tone_variants_share_their_base_and_its_split():
    santa = [0x1F385]
    toned = [[0x1F385, tone] for tone in range(0x1F3FB, 0x1F400)]
    assert {base_of(variant) for variant in toned} == {base_of(santa)} == {"1F385"}
    assert base_of([0x2764, 0xFE0F]) == "2764"  # variation selectors do not make a new base
    bases = [f"{code:X}" for code in range(0x1F300, 0x1F700)]
    share = sum(map(is_held_out, bases)) / len(bases)
    assert 0.02 < share < 0.09  # about one in twenty


def test_mirror_images_only_where_the_caption_stays_true():
    assert may_mirror("red apple") and may_mirror("woman detective medium skin tone")
    for caption in ("left arrow", "keycap 3", "flag: France", "two o'clock", "man raising right hand", "OK button"):
        assert not may_mirror(caption), caption


def test_augmentation_keeps_every_original_first_and_mirrors_only_what_may_be_mirrored():
    images = np.zeros((2, 4, 4, 3), dtype=np.uint8)
    images[:, :, 0] = (200, 30, 30)  # a red left edge
    emoji = EmojiSet(images, ["red apple", "left arrow"], ["1F34E", "2B05"], np.array([False, False]))
    pictures, source = augmented_images(emoji)
    assert len(pictures) == 3 * 2 + 3 * 1  # originals and two hue rotations, then mirrors of the apple's three
    assert np.array_equal(pictures[:2], images) and source[:2].tolist() == [0, 1]
    assert source[6:].tolist() == [0, 0, 0]
    assert np.array_equal(pictures[6], images[0][:, ::-1])  # the red edge moved to the right
    turned = pictures[2, 0, 0].astype(int)
    assert turned.tolist() != [200, 30, 30] and abs(int(turned.sum()) - 260) < 40  # hue turned, not brightness


def test_token_shifts_translate_the_grid_and_fill_with_white():
    grid = torch.arange(12).view(1, 12)  # a 3 x 4 grid of distinct codes
    right_down = shift_tokens(grid, 3, 4, torch.tensor([1]), torch.tensor([1]), fill=99).view(3, 4)
    assert right_down.tolist() == [[99, 99, 99, 99], [99, 0, 1, 2], [99, 4, 5, 6]]
    up_left = shift_tokens(grid, 3, 4, torch.tensor([-1]), torch.tensor([-2]), fill=99).view(3, 4)
    assert up_left.tolist() == [[6, 7, 99, 99], [10, 11, 99, 99], [99, 99, 99, 99]]
    same = shift_tokens(grid.repeat(2, 1), 3, 4, torch.tensor([0, 0]), torch.tensor([0, 0]), fill=99)
    assert torch.equal(same, grid.repeat(2, 1))
