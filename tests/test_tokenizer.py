import numpy as np
import torch

from specviz.models.tiny.adapter import BLANK
from specviz.models.tiny.data import emoji_name, render, svg_files
from specviz.models.tiny.tokenizer import PatchTokenizer, patchify, psnr, unpatchify


def test_patchify_round_trip():
    images = torch.rand(2, 48, 48, 3)
    patches = patchify(images)
    assert patches.shape == (2, 256, 27)
    assert torch.equal(unpatchify(patches, 16, 16), images)


def test_codes_round_trip_through_pixels(tiny):
    codes = torch.randint(0, 1024, (3, 256), generator=torch.Generator().manual_seed(0))
    pixels = tiny.tokenizer.decode(codes, 16, 16)
    again = tiny.tokenizer.encode(pixels)
    # decoding rounds to uint8, so two codebook vectors closer than that could swap; none do here
    assert (again == codes).float().mean() > 0.99


def test_real_emoji_reconstruct_well(tiny):
    by_name = {emoji_name([int(p, 16) for p in svg.stem.split("-")]): svg for svg in svg_files()[:400]}
    images = torch.stack([torch.from_numpy(render(svg)) for svg in list(by_name.values())[:40]])
    reconstructed = tiny.tokenizer.decode(tiny.tokenizer.encode(images), 16, 16)
    assert psnr(images, reconstructed).mean() > 24.0


def test_decode_partial_grid_leaves_the_rest_blank(tiny):
    codes = torch.randint(0, 1024, (256,), generator=torch.Generator().manual_seed(1))
    full = torch.from_numpy(np.array(tiny.decode(codes)))
    part = torch.from_numpy(np.array(tiny.decode(codes[:37])))
    assert part.shape == full.shape == (48, 48, 3)
    # 37 cells = two full rows of 16 and five cells of the third row (each cell 3x3 pixels)
    assert torch.equal(part[:6], full[:6])
    assert torch.equal(part[6:9, :15], full[6:9, :15])
    assert (part[6:9, 15:] == BLANK).all() and (part[9:] == BLANK).all()
    assert (torch.from_numpy(np.array(tiny.decode([]))) == BLANK).all()


def test_tokenizer_vocab(tiny):
    assert isinstance(tiny.tokenizer, PatchTokenizer) and tiny.tokenizer.vocab_size == 1024
