"""Anole and Lumina-mGPT adapters on a tiny random-weight `ChameleonForConditionalGeneration`
(model_zoo.py, offline), and the VQGAN decoder that transformers lacks. The protocol contract is in
test_contract.py."""

import numpy as np
import pytest
import torch
from model_zoo import CHAMELEON_CODES as CODES
from model_zoo import CHAMELEON_GRID as GRID
from model_zoo import chameleon_parts, chameleon_vq_config, image_token_name
from transformers import ChameleonVQVAEConfig

from specviz.core.errors import ModelUnavailable
from specviz.core.settings import SamplingSettings
from specviz.decoding import run
from specviz.models import hub
from specviz.models.chameleon.adapter import VQGAN_ENV_VAR, AnoleModel, LuminaMGPTModel
from specviz.models.networks.vqgan import VQGANDecoder
from specviz.models.protocol import IMAGE_CELL
from specviz.models.reference import uncached_greedy
from specviz.models.registry import MODELS

ROW_END = CODES  # Lumina-mGPT's row-end layout token as a method id
JACOBI_FAMILY = ["jacobi", "sjd", "scd-mc", "scd-gs", "lantern", "gsd"]


@pytest.fixture(scope="module")
def parts():
    return chameleon_parts()


@pytest.fixture(scope="module")
def anole(parts) -> AnoleModel:
    network, processor = parts
    return AnoleModel.from_model(network, processor, grid=GRID)


@pytest.fixture(scope="module")
def lumina(parts) -> LuminaMGPTModel:
    network, processor = parts
    return LuminaMGPTModel.from_model(network, processor, grid=GRID)


@pytest.fixture(params=["anole", "lumina-mgpt"])
def model(request, anole, lumina):
    return {"anole": anole, "lumina-mgpt": lumina}[request.param]


# ---- geometry and logits -----------------------------------------------------------------------


def test_geometry_anole_plain_grid_lumina_row_end_after_every_row(anole, lumina):
    assert anole.geometry == type(anole.geometry).plain_grid(GRID, GRID, CODES)
    assert (lumina.geometry.rows, lumina.geometry.cols, lumina.geometry.vocab_size) == (GRID, GRID, CODES + 1)
    assert lumina.geometry.layout == ((IMAGE_CELL,) * GRID + (ROW_END,)) * GRID
    vocab = lumina.network.config.vocabulary_map
    assert int(lumina.method_to_text[ROW_END]) == vocab["<reserved08799>"]
    # Lumina-mGPT: resolution tokens in the prefill, the unconditional row is the image prefix only
    prefix = [vocab["<racm3:break>"], vocab["<reserved08802>"], vocab["<reserved08802>"]]
    assert lumina.unconditional_ids()[0].tolist() == prefix
    assert lumina.prompt_ids("a red apple")[0, -4:].tolist() == [vocab["<reserved08706>"], *prefix]
    # Anole: [BOS, text, end of turn, BOI] against [BOS, BOI] (test_faithful.py has why)
    assert anole.unconditional_ids()[0].tolist() == [vocab["<s>"], vocab["<racm3:break>"]]
    ids = anole.prompt_ids("a red apple")[0].tolist()
    assert ids[0] == vocab["<s>"] and ids[-2:] == [vocab["<reserved08706>"], vocab["<racm3:break>"]] and len(ids) == 6


def test_image_ids_follow_the_codebook_order_of_the_token_names(anole):
    vocab = anole.network.config.vocabulary_map
    expected = [vocab[image_token_name(code)] for code in range(CODES)]
    assert anole.image_ids.tolist() == expected
    assert expected != sorted(expected)  # BPE order is not codebook order in this vocabulary
    assert anole.network.model.vocabulary_mapping.bpe2img == {bpe: code for code, bpe in enumerate(expected)}


def test_transformers_forward_masks_every_image_token(anole):
    """So the adapter (and the uncached reference in model_zoo) apply lm_head to hidden states itself."""
    ids = anole.prompt_ids("a red apple")
    sequence = torch.cat([ids, anole.method_to_text[torch.tensor([5, 17, 40])][None]], dim=1)
    with torch.no_grad():
        masked = anole.network(input_ids=sequence).logits[0, ids.shape[1] - 1 :]
    assert (masked[:, anole.image_ids] == torch.finfo(masked.dtype).min).all()


# ---- against an uncached reference ------------------------------------------------------------


@pytest.mark.parametrize("scale", [3.0, 1.0])
def test_greedy_ar_equals_an_uncached_greedy_loop(model, scale):
    """transformers' `generate()` cannot be the reference: its `forward` masks every image token."""
    greedy = SamplingSettings(temperature=0, guidance_scale=scale)
    ours = run(model, "ar", "a red apple", 0, greedy).tokens
    assert ours == uncached_greedy(model, "a red apple", scale)


def test_guidance_changes_the_greedy_image(lumina):
    guided = run(lumina, "ar", "rocket on the moon", 0, SamplingSettings(temperature=0, guidance_scale=3.0))
    plain = run(lumina, "ar", "rocket on the moon", 0, SamplingSettings(temperature=0, guidance_scale=1.0))
    assert guided.tokens != plain.tokens


@pytest.mark.parametrize("method", JACOBI_FAMILY)
def test_jacobi_family_runs_end_to_end(model, method):
    sampling = SamplingSettings(temperature=1.0, top_k=20, guidance_scale=3.0)
    trace = run(model, method, "a red apple", 3, sampling, params={"window": 4})
    layout = model.geometry.layout
    assert len(trace.tokens) == len(layout)
    assert all(
        t == entry if entry != IMAGE_CELL else 0 <= t < CODES for t, entry in zip(trace.tokens, layout, strict=True)
    )


@pytest.mark.parametrize("method", ["jacobi", "sjd", "scd-mc", "scd-gs"])
def test_greedy_jacobi_family_equals_greedy_ar(model, method):
    greedy = SamplingSettings(temperature=0, guidance_scale=3.0)
    expected = run(model, "ar", "a red apple", 0, greedy).tokens
    assert run(model, method, "a red apple", 0, greedy, params={"window": 4}).tokens == expected


def test_codebook_vectors(anole, lumina):
    codebook = anole.network.model.vqmodel.quantize.embedding.weight[:CODES]
    assert torch.equal(anole.token_vectors, codebook)
    vectors = lumina.token_vectors
    assert vectors.shape == (CODES + 1, 4) and torch.equal(vectors[:CODES], codebook)
    assert torch.cdist(vectors[ROW_END:], codebook).min() > 1e3 * torch.cdist(codebook, codebook).max()


# ---- pixels ------------------------------------------------------------------------------------


def test_decode_returns_the_image_and_blanks_cells_not_generated(lumina, anole):
    size = GRID * 2  # two levels: one upsampling
    full = lumina.decode(run(lumina, "ar", "a red apple", 0).tokens)
    assert full.size == (size, size) and full.mode == "RGB"
    assert anole.decode(run(anole, "ar", "a red apple", 0).tokens).size == (size, size)
    partial = torch.from_numpy(np.array(lumina.decode([1, 2, 3, 4, ROW_END, 5])))  # row 0, one cell of row 1
    cell = size // GRID
    assert (partial[cell * 2 :] == hub.BLANK).all()
    assert (partial[cell : cell * 2, cell:] == hub.BLANK).all()
    assert not (partial[:cell] == hub.BLANK).all()
    # decode shows exactly what the decoder makes of those codes
    codes = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]])
    sequence = torch.cat([codes, torch.full((GRID, 1), ROW_END)], dim=1).flatten()
    for model, tokens in ((lumina, sequence), (anole, codes.flatten())):
        pixels = model.decoder(codes[None])[0]
        expected = ((pixels * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0)
        assert torch.equal(torch.from_numpy(np.array(model.decode(tokens))), expected)


def test_released_decoder_shape_turns_32x32_codes_into_512px():
    """Five levels (four upsamplings), as the released tokenizer; narrow channels to stay fast."""
    torch.manual_seed(0)
    decoder = VQGANDecoder(ChameleonVQVAEConfig(**chameleon_vq_config(levels=5), attn_type="vanilla")).eval()
    assert decoder.scale == 16
    codes = torch.randint(0, CODES, (1, 32, 32))
    assert decoder(codes).shape == (1, 3, 512, 512)


def test_decoder_mid_attention_and_taming_key_names():
    config = ChameleonVQVAEConfig(**(chameleon_vq_config() | {"attn_resolutions": [8]}))
    names = set(VQGANDecoder(config).state_dict())
    for key in (
        "decoder.conv_in.weight",
        "decoder.mid.block_1.norm1.weight",
        "decoder.mid.attn_1.q.weight",
        "decoder.up.0.block.1.conv2.weight",
        "decoder.up.1.upsample.conv.weight",
        "decoder.up.1.attn.0.proj_out.weight",
        "decoder.norm_out.bias",
        "decoder.conv_out.weight",
        "post_quant_conv.weight",
        "quantize.embedding.weight",
    ):
        assert key in names, key


@pytest.mark.parametrize("fmt", ["ckpt", "safetensors"])
def test_decoder_weights_load_safely_from_a_checkpoint(tmp_path, fmt):
    from safetensors.torch import save_file

    config = ChameleonVQVAEConfig(**chameleon_vq_config())
    torch.manual_seed(1)
    source = VQGANDecoder(config).eval()
    state = {key: value.clone() for key, value in source.state_dict().items()}
    state["encoder.conv_in.weight"] = torch.zeros(1)  # the encoder's weights are ignored
    if fmt == "ckpt":
        path = tmp_path / "vqgan.ckpt"
        torch.save({"state_dict": state}, path)  # a Lightning-style checkpoint
    else:
        path = tmp_path / "vqgan.safetensors"
        save_file({f"model.vqmodel.{key}": value for key, value in state.items()}, str(path))
    torch.manual_seed(2)
    target = VQGANDecoder(config).eval()
    codes = torch.randint(0, CODES, (1, 4, 4))
    assert not torch.equal(target(codes), source(codes))
    target.load_weights(path)
    assert torch.equal(target(codes), source(codes))


def test_decoder_refuses_pickled_code_and_incomplete_files(tmp_path):
    config = ChameleonVQVAEConfig(**chameleon_vq_config())
    hostile = tmp_path / "vqgan.ckpt"
    torch.save({"state_dict": {}, "callback": ModelUnavailable("not a tensor")}, hostile)
    with pytest.raises(ModelUnavailable, match="safely"):
        VQGANDecoder(config).load_weights(hostile)
    empty = tmp_path / "empty.ckpt"
    torch.save({"state_dict": {"decoder.conv_in.weight": torch.zeros(1)}}, empty)
    with pytest.raises(ModelUnavailable, match="lacks"):
        VQGANDecoder(config).load_weights(empty)


# ---- loading and the registry ------------------------------------------------------------------


def test_load_from_a_local_folder_with_the_tokenizer_checkpoint(tmp_path, parts, monkeypatch):
    monkeypatch.delenv(VQGAN_ENV_VAR, raising=False)
    network, processor = parts
    with pytest.raises(ModelUnavailable, match=r"vqgan\.ckpt"):
        LuminaMGPTModel.load(str(tmp_path), "cpu")
    network.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    decoder = LuminaMGPTModel.from_model(network, processor, grid=GRID).decoder
    (tmp_path / "tokenizer").mkdir()
    torch.save({"state_dict": decoder.state_dict()}, tmp_path / "tokenizer" / "vqgan.ckpt")
    loaded = LuminaMGPTModel.load(str(tmp_path), "cpu")
    assert loaded.network.dtype == torch.float32
    assert loaded.image_ids.tolist() == parts[0].model.vocabulary_mapping.img2bpe_mapping_tensor[:CODES].tolist()
    assert loaded.geometry.seq_len == 48 * 49  # the released 768 px layout
    assert torch.equal(loaded.decoder.decoder.conv_out.weight, decoder.decoder.conv_out.weight)


def test_missing_weights_say_what_to_pass(tmp_path, monkeypatch):
    monkeypatch.setenv(VQGAN_ENV_VAR, str(tmp_path / "vqgan.ckpt"))
    (tmp_path / "vqgan.ckpt").write_bytes(b"")
    with pytest.raises(ModelUnavailable, match="--weights"):
        AnoleModel.load(str(tmp_path / "nowhere"), "cpu")


def test_registered_with_release_defaults_and_offline_only_with_local_weights(monkeypatch, tmp_path):
    assert next(iter(MODELS)) == "tiny" and {"anole", "lumina-mgpt"} <= set(MODELS)
    lumina, anole = LuminaMGPTModel.default_sampling, AnoleModel.default_sampling
    assert (lumina.temperature, lumina.top_k, lumina.guidance_scale) == (1.0, 2000, 3.0)
    assert (anole.temperature, anole.top_p, anole.guidance_scale) == (0.7, 0.9, 3.0)
    monkeypatch.delenv(VQGAN_ENV_VAR, raising=False)
    monkeypatch.delenv(LuminaMGPTModel.env_var, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert "--weights" in MODELS["lumina-mgpt"].offline()
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv(LuminaMGPTModel.env_var, str(tmp_path))
    assert "vqgan" in MODELS["lumina-mgpt"].offline()
    (tmp_path / "vqgan.ckpt").write_bytes(b"")
    assert MODELS["lumina-mgpt"].offline() is None
