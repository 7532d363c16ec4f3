"""The LlamaGen adapter on tiny random-weight models of our own classes (offline, no released weights)."""

import argparse
from dataclasses import replace

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel

from specviz.decoding import run
from specviz.models import hub, llamagen
from specviz.models.errors import ModelUnavailable
from specviz.models.llamagen import (
    KVCache,
    LlamaGenModel,
    LlamaGenTransformer,
    apply_rotary,
    parse_class,
    rotary_table_2d,
    tiny_config,
)
from specviz.models.llamagen_vq import VQDecoder, VQDecoderConfig
from specviz.models.protocol import ImageModel, Session
from specviz.models.registry import MODELS
from specviz.models.sampling import SamplingSettings

# float32 on CPU: a window pass and single-token passes differ only by summation order
MULTI_TOKEN_ATOL = 1e-5
CODES = 64
CLASSES = 10
JACOBI_FAMILY = ["jacobi", "sjd", "scd-mc", "scd-gs", "lantern", "gsd"]
VQ_CONFIG = VQDecoderConfig(
    codebook_size=CODES, codebook_embed_dim=8, z_channels=32, base_channels=32, channel_multipliers=(1, 2)
)
IMAGE = 4 * VQ_CONFIG.downsampling  # 4x4 grid, 2x upsampling: 8 px
WORDS = ["<pad>", "</s>", "<unk>", "a", "red", "apple", "smiling", "cat", "on", "the", "moon"]


def tiny_vq(seed: int = 1) -> VQDecoder:
    torch.manual_seed(seed)
    return VQDecoder(VQ_CONFIG).eval()


def tiny_c2i(seed: int = 0) -> LlamaGenModel:
    torch.manual_seed(seed)
    return LlamaGenModel.from_model(LlamaGenTransformer(tiny_config()), tiny_vq())


def tiny_t5() -> tuple[T5EncoderModel, PreTrainedTokenizerFast]:
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    torch.manual_seed(2)
    config = T5Config(vocab_size=len(WORDS), d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, pad_token_id=0)
    return T5EncoderModel(config).eval(), tokenizer


def tiny_t2i() -> LlamaGenModel:
    torch.manual_seed(3)
    gpt = LlamaGenTransformer(tiny_config(model_type="t2i", caption_dim=16, cls_token_num=8))
    with torch.no_grad():
        gpt.cls_embedding.uncond_embedding.normal_(0, 0.25)  # the release draws it at random, then trains it
    encoder, tokenizer = tiny_t5()
    return LlamaGenModel.from_model(gpt, tiny_vq(), text_encoder=encoder, tokenizer=tokenizer)


@pytest.fixture(scope="module")
def c2i() -> LlamaGenModel:
    return tiny_c2i()


@pytest.fixture(scope="module")
def t2i() -> LlamaGenModel:
    return tiny_t2i()


def uncached_raw(gpt: LlamaGenTransformer, condition: torch.Tensor, tokens: torch.Tensor, key_valid=None):
    """(len(tokens) + 1, V) raw logits of every generated position: one pass, no cache."""
    sequence = torch.cat([condition, gpt.tok_embeddings(tokens.view(1, -1))], dim=1)
    with torch.no_grad():
        return gpt(sequence, None, key_valid=key_valid)[0, condition.shape[1] - 1 :]


def label_embedding(model: LlamaGenModel, label: int) -> torch.Tensor:
    return model.gpt.cls_embedding.embedding_table.weight[label].view(1, 1, -1)


# ------------------------------------------------------------------------------------------- protocol


def test_implements_the_protocol(c2i):
    assert isinstance(c2i, ImageModel)
    session = c2i.session("3", 4.0)
    assert isinstance(session, Session)
    assert (c2i.geometry.rows, c2i.geometry.cols, c2i.geometry.vocab_size) == (4, 4, CODES)
    assert session.nfe == 1 and session.length == 0 and session.next_logits.shape == (CODES,)
    assert c2i.default_sampling == SamplingSettings(temperature=1.0, top_k=2000, guidance_scale=4.0)


def test_class_prompts():
    assert parse_class("207", 1000) == 207 and parse_class(" Golden Retriever ", 1000) == 207
    with pytest.raises(ValueError, match="ImageNet class index"):
        parse_class("a photo of a dog", 1000)
    with pytest.raises(ValueError, match="out of range"):
        parse_class("207", CLASSES)


def test_rotary_is_2d_over_the_grid_and_zero_on_the_condition():
    config = tiny_config()  # head_dim 8: pairs 0-1 rotate by the row, pairs 2-3 by the column
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


def test_one_forward_of_n_tokens_equals_n_single_forwards(c2i):
    tokens = torch.randint(0, CODES, (10,), generator=torch.Generator().manual_seed(1))
    window = c2i.session("3", 4.0)
    together = window.forward(tokens)
    single = c2i.session("3", 4.0)
    one_by_one = []
    for token in tokens:
        one_by_one.append(single.forward(token.view(1))[0])
        single.commit(1)
    torch.testing.assert_close(together, torch.stack(one_by_one), atol=MULTI_TOKEN_ATOL, rtol=0)
    assert window.nfe == 2 and single.nfe == 11


def test_rollback_then_forward_reproduces_logits_exactly(c2i):
    session = c2i.session("5", 4.0)
    session.forward(torch.tensor([5, 9, 60]))
    session.commit(3)
    drafts = torch.tensor([1, 2, 3, 4])
    first = session.forward(drafts).clone()
    session.commit(0)
    session.forward(torch.tensor([7, 8]))
    again = session.forward(drafts)
    assert torch.equal(first, again)
    session.commit(2)
    assert session.length == 5 and torch.equal(session.next_logits, first[1])


def test_cache_crop_takes_negative_counts():
    cache = KVCache(1)
    cache.update(0, torch.zeros(2, 1, 5, 4), torch.zeros(2, 1, 5, 4))
    cache.crop(-2)
    assert cache.length == 3
    with pytest.raises(ValueError):
        cache.crop(-4)


def test_guidance_combines_raw_logits_of_the_class_and_null_class_rows(c2i):
    tokens, scale = torch.tensor([3, 14, 15, 9, 26]), 4.0
    session = c2i.session("7", scale)
    got = torch.cat([session.next_logits[None], session.forward(tokens)])
    cond = uncached_raw(c2i.gpt, label_embedding(c2i, 7), tokens)
    uncond = uncached_raw(c2i.gpt, label_embedding(c2i, CLASSES), tokens)  # the extra, null-class row
    torch.testing.assert_close(got, uncond + scale * (cond - uncond), atol=1e-4, rtol=0)
    assert not torch.allclose(cond, uncond, atol=1e-2)  # the class matters


def test_guidance_scale_one_is_the_conditional_model_alone(c2i):
    tokens = torch.tensor([3, 14, 15])
    session = c2i.session("7", 1.0)
    got = torch.cat([session.next_logits[None], session.forward(tokens)])
    torch.testing.assert_close(got, uncached_raw(c2i.gpt, label_embedding(c2i, 7), tokens), atol=1e-5, rtol=0)


def greedy_uncached_with_guidance(model: LlamaGenModel, label: int, scale: float) -> list[int]:
    """LlamaGen's sampler, greedy, without a cache: both rows re-run over the whole sequence each step."""
    tokens: list[int] = []
    for _ in range(model.geometry.seq_len):
        sequence = torch.tensor(tokens, dtype=torch.long)
        cond = uncached_raw(model.gpt, label_embedding(model, label), sequence)[-1]
        uncond = uncached_raw(model.gpt, label_embedding(model, CLASSES), sequence)[-1]
        tokens.append(int((uncond + scale * (cond - uncond)).argmax()))
    return tokens


@pytest.mark.parametrize("label", [2, 7])
def test_greedy_ar_equals_an_uncached_greedy_loop_with_guidance(c2i, label):
    greedy = SamplingSettings(temperature=0, guidance_scale=4.0)
    ours = run(c2i, "ar", str(label), 0, greedy).tokens
    assert ours == greedy_uncached_with_guidance(c2i, label, 4.0)
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
    cond = uncached_raw(short, projected[:1], tokens)
    uncond = uncached_raw(short, projected[1:], tokens)
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
