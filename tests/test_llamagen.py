"""The LlamaGen adapter on tiny random-weight models of our own classes (model_zoo.py, offline, no
released weights). The protocol contract is in test_contract.py."""

import argparse
from dataclasses import replace

import numpy as np
import pytest
import torch
from model_zoo import FAMILIES, llamagen_config
from model_zoo import LLAMAGEN_CLASSES as CLASSES
from model_zoo import LLAMAGEN_CODES as CODES
from model_zoo import LLAMAGEN_VQ as VQ_CONFIG

from specviz.core.errors import ModelUnavailable
from specviz.core.settings import SamplingSettings
from specviz.decoding import run
from specviz.models import hub
from specviz.models.llamagen import adapter as llamagen
from specviz.models.llamagen.adapter import (
    LlamaGenModel,
    LlamaGenTransformer,
    apply_rotary,
    parse_class,
    rotary_table_2d,
)
from specviz.models.reference import uncached_greedy
from specviz.models.registry import MODELS

JACOBI_FAMILY = ["jacobi", "sjd", "scd-mc", "scd-gs", "lantern", "gsd"]
IMAGE = 4 * VQ_CONFIG.downsampling  # 4x4 grid, 2x upsampling: 8 px


@pytest.fixture(scope="module")
def c2i() -> LlamaGenModel:
    return FAMILIES["llamagen-c2i"].build()


@pytest.fixture(scope="module")
def t2i() -> LlamaGenModel:
    return FAMILIES["llamagen-t2i"].build()


# ------------------------------------------------------------------------------------------- protocol


def test_geometry_and_release_defaults(c2i):
    assert (c2i.geometry.rows, c2i.geometry.cols, c2i.geometry.vocab_size) == (4, 4, CODES)
    assert c2i.reference_generate is None
    assert c2i.default_sampling == SamplingSettings(temperature=1.0, top_k=2000, guidance_scale=4.0)


def test_class_prompts():
    assert parse_class("207", 1000) == 207 and parse_class(" Golden Retriever ", 1000) == 207
    with pytest.raises(ValueError, match="ImageNet class index"):
        parse_class("a photo of a dog", 1000)
    with pytest.raises(ValueError, match="out of range"):
        parse_class("207", CLASSES)


def test_rotary_is_2d_over_the_grid_and_zero_on_the_condition():
    config = llamagen_config()  # head_dim 8: pairs 0-1 rotate by the row, pairs 2-3 by the column
    table = rotary_table_2d(config)
    assert table.shape == (1 + 16, 4, 2) and (table[0] == 0).all()
    freqs = 1.0 / config.rope_base ** (torch.arange(0, 4, 2).float() / 4)
    for cell in range(16):
        row, col = divmod(cell, 4)
        angles = torch.cat([row * freqs, col * freqs])
        torch.testing.assert_close(table[1 + cell], torch.stack([angles.cos(), angles.sin()], -1))
    x = torch.randn(1, 17, 1, 8)
    rotated = apply_rotary(x, table)
    as_complex = torch.view_as_complex(x.reshape(1, 17, 1, 4, 2).contiguous())
    turn = torch.view_as_complex(table.contiguous())[None, :, None]
    torch.testing.assert_close(rotated, torch.view_as_real(as_complex * turn).flatten(3))


@pytest.mark.parametrize("label", [2, 7])
def test_greedy_ar_equals_an_uncached_greedy_loop_with_guidance(c2i, label):
    """LlamaGen's sampler, greedy, without a cache: both rows re-run over the whole sequence each step."""
    greedy = SamplingSettings(temperature=0, guidance_scale=4.0)
    ours = run(c2i, "ar", str(label), 0, greedy).tokens
    assert ours == uncached_greedy(c2i, str(label), 4.0)
    assert ours != run(c2i, "ar", str(label), 0, SamplingSettings(temperature=0, guidance_scale=1.0)).tokens


# ------------------------------------------------------------------------------------------- decoding


def _pixels(model: LlamaGenModel, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        pixels = model.vq(tokens.view(1, 4, 4))[0].permute(1, 2, 0)
    return ((pixels * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)


def test_vq_decoder_reads_l2_normalised_codes(c2i):
    codes = torch.tensor([[[0, 1], [2, 3]]])
    vectors = torch.nn.functional.normalize(c2i.vq.quantize.embedding.weight[:4], dim=-1)
    latents = vectors.view(1, 2, 2, 8).permute(0, 3, 1, 2)
    with torch.no_grad():
        expected = c2i.vq.decoder(c2i.vq.post_quant_conv(latents))
        torch.testing.assert_close(c2i.vq(codes), expected)
    assert expected.shape == (1, 3, 4, 4)
    torch.testing.assert_close(c2i.token_vectors.norm(dim=1), torch.ones(CODES))


def test_decode_returns_the_image_and_blanks_cells_not_generated(c2i):
    tokens = torch.randint(0, CODES, (16,), generator=torch.Generator().manual_seed(2))
    image = c2i.decode(tokens)
    assert image.size == (IMAGE, IMAGE) and image.mode == "RGB"
    assert torch.equal(torch.from_numpy(np.array(image)), _pixels(c2i, tokens))
    partial = torch.from_numpy(np.array(c2i.decode(tokens[:5])))
    cell = IMAGE // 4
    assert (partial[cell * 2 :] == hub.BLANK).all()  # rows 2 and 3 not generated yet
    assert (partial[cell : cell * 2, cell:] == hub.BLANK).all()  # row 1 holds only its first cell
    padded = torch.cat([tokens[:5], torch.zeros(11, dtype=torch.long)])
    assert torch.equal(partial[:cell], _pixels(c2i, padded)[:cell])  # the first row is shown


# ------------------------------------------------------------------------------------------- methods


@pytest.mark.parametrize("method", JACOBI_FAMILY)
def test_jacobi_family_runs_end_to_end(c2i, method):
    sampling = SamplingSettings(temperature=1.0, top_k=32, guidance_scale=4.0)
    trace = run(c2i, method, "3", 3, sampling, params={"window": 4})
    assert len(trace.tokens) == 16 and all(0 <= t < CODES for t in trace.tokens)
    assert trace.nfe <= 17
    assert c2i.decode(trace.tokens).size == (IMAGE, IMAGE)


@pytest.mark.parametrize("method", ["jacobi", "sjd", "scd-mc", "scd-gs"])
def test_greedy_jacobi_family_equals_greedy_ar(c2i, method):
    greedy = SamplingSettings(temperature=0, guidance_scale=4.0)
    expected = run(c2i, "ar", "6", 0, greedy).tokens
    assert run(c2i, method, "6", 0, greedy, params={"window": 4}).tokens == expected


# ------------------------------------------------------------------------------------------- loading


def save_release_layout(model: LlamaGenModel, folder, gpt_name="c2i_T_8.pt", vq_name="vq_ds2_c2i.pt"):
    """A GPT and a full VQ checkpoint saved as LlamaGen's training script does: {"model": ..., ...}."""
    vq_state = dict(model.vq.state_dict())
    vq_state["encoder.conv_in.weight"] = torch.zeros(32, 3, 3, 3)  # the encoder half we do not build
    vq_state["quant_conv.weight"] = torch.zeros(8, 32, 1, 1)
    vq_state["quantize.codebook_used"] = torch.zeros(65536)
    torch.save({"model": model.gpt.state_dict(), "steps": 10, "args": argparse.Namespace(lr=1e-4)}, folder / gpt_name)
    torch.save({"model": vq_state}, folder / vq_name)


def test_checkpoint_round_trip(tmp_path, monkeypatch, c2i):
    monkeypatch.setitem(llamagen.HEADS_BY_WIDTH, 32, 4)  # our tiny width
    save_release_layout(c2i, tmp_path)
    loaded = LlamaGenModel.load(str(tmp_path), "cpu")
    assert replace(loaded.gpt.config, intermediate_size=None, multiple_of=16) == c2i.gpt.config
    assert loaded.gpt.config.ffn_hidden == c2i.gpt.config.ffn_hidden
    assert loaded.vq.config == c2i.vq.config and loaded.geometry == c2i.geometry
    assert loaded.gpt.output.weight.dtype == torch.float32
    greedy = SamplingSettings(temperature=0, guidance_scale=4.0)
    assert run(loaded, "ar", "3", 0, greedy).tokens == run(c2i, "ar", "3", 0, greedy).tokens
    tokens = list(range(16))
    assert np.array_equal(np.array(loaded.decode(tokens)), np.array(c2i.decode(tokens)))
    # explicit files work too
    both = f"{tmp_path / 'c2i_T_8.pt'},{tmp_path / 'vq_ds2_c2i.pt'}"
    assert LlamaGenModel.load(both, "cpu").geometry == c2i.geometry


class Payload:
    """Any class outside the allow-list: weights_only loading must refuse a file that pickles one."""


def test_checkpoints_with_code_in_them_are_refused(tmp_path, c2i):
    save_release_layout(c2i, tmp_path)
    torch.save({"model": c2i.gpt.state_dict(), "extra": Payload()}, tmp_path / "c2i_T_8.pt")
    with pytest.raises(ModelUnavailable, match="safely"):
        LlamaGenModel.load(str(tmp_path), "cpu")


def test_missing_weights_say_what_to_pass(tmp_path):
    with pytest.raises(ModelUnavailable, match=r"c2i_L_256\.pt.*--weights PATH"):
        LlamaGenModel.load(str(tmp_path), "cpu")


def test_registered_with_release_defaults(monkeypatch, tmp_path):
    assert next(iter(MODELS)) == "tiny" and {"llamagen-c2i", "llamagen-t2i"} <= set(MODELS)
    entry = MODELS["llamagen-c2i"]
    monkeypatch.delenv(llamagen.C2I_ENV_VAR, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert "--weights" in entry.offline()
    for name in llamagen.C2I_FILES:
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setenv(llamagen.C2I_ENV_VAR, str(tmp_path))
    assert entry.offline() is None


# ------------------------------------------------------------------------------------------- text to image


def test_t2i_left_pads_the_caption_and_masks_the_padding(t2i):
    features, valid = t2i.caption_features("a red apple")
    assert valid[0].tolist() == [False] * 4 + [True] * 4  # 3 words and </s> of 8 slots
    assert (features[0, :4] == 0).all() and (features[0, 4:] != 0).any()


def test_t2i_padding_is_invisible_and_guidance_uses_the_learned_null_caption(t2i):
    """Masked padding = no padding at all: a copy of the GPT with 4 condition slots, fed only the 4
    valid caption features, gives the same logits (condition positions carry no rotary position)."""
    tokens, scale = torch.tensor([3, 14, 15, 9]), 7.5
    session = t2i.session("a red apple", scale)
    got = torch.cat([session.next_logits[None], session.forward(tokens)])
    short = LlamaGenTransformer(replace(t2i.gpt.config, cls_token_num=4)).eval()
    state = t2i.gpt.state_dict()
    state["cls_embedding.uncond_embedding"] = state["cls_embedding.uncond_embedding"][4:]
    short.load_state_dict(state)
    features, _ = t2i.caption_features("a red apple")
    projected = short.cls_embedding(torch.cat([features[:, 4:], t2i.gpt.cls_embedding.uncond_embedding[None, 4:]]))
    sequence = torch.cat([projected, short.tok_embeddings(tokens.expand(2, -1))], dim=1)
    with torch.no_grad():
        cond, uncond = short(sequence)[:, 3:]  # no padding, no mask: plain causal
    torch.testing.assert_close(got, uncond + scale * (cond - uncond), atol=1e-4, rtol=0)
    assert t2i.default_sampling == SamplingSettings(temperature=1.0, top_k=1000, guidance_scale=7.5)


@pytest.mark.parametrize("method", ["ar", "sjd", "scd-gs"])
def test_t2i_runs_end_to_end(t2i, method):
    params = None if method == "ar" else {"window": 4}
    trace = run(t2i, method, "smiling cat on the moon", 0, SamplingSettings(top_k=32, guidance_scale=7.5), params)
    assert len(trace.tokens) == 16 and t2i.decode(trace.tokens).size == (IMAGE, IMAGE)


@pytest.mark.parametrize(
    ("dim", "layers", "heads", "millions"),
    [(768, 12, 12, 111), (1024, 24, 16, 343), (1280, 36, 20, 775)],  # LlamaGen-B, -L, -XL of the paper
)
def test_release_sizes_have_the_papers_parameter_counts(dim, layers, heads, millions):
    with torch.device("meta"):
        gpt = LlamaGenTransformer(llamagen.LlamaGenConfig(dim=dim, n_layer=layers, n_head=heads))
    assert round(sum(p.numel() for p in gpt.parameters()) / 1e6) == millions
