"""The adapters against the authors' inference code (issue 57): Anole's prompt, LlamaGen-T2I's caption
cleaning and hub repository, Lumina-mGPT's query/key norm layout, strict VQGAN loading, and load
failures that end in one line. All on the tiny random-weight models of model_zoo.py, offline."""

import argparse
import json
from pathlib import Path

import pytest
import torch
from model_zoo import CHAMELEON_CODES, FAMILIES, chameleon_parts, chameleon_vq_config
from safetensors.torch import load_file, save_file
from transformers import ChameleonForConditionalGeneration, ChameleonVQVAEConfig

from specviz.core.errors import ModelUnavailable
from specviz.models import hub
from specviz.models.chameleon.adapter import VQGAN_ENV_VAR, AnoleModel, LuminaMGPTModel
from specviz.models.llamagen import adapter as llamagen
from specviz.models.llamagen.adapter import LlamaGenModel, LlamaGenTransformer
from specviz.models.llamagen.caption import clean_caption
from specviz.models.networks.vqgan import VQGANDecoder


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message, message
    return message


# ---- 1. Anole: the turn ends before begin-of-image ---------------------------------------------


def test_anole_prompt_ends_the_turn_before_begin_of_image():
    """Anole's text2image.py sends [text, <END-OF-TURN> sentinel] and the ImageDecoder appends
    begin-of-image: [BOS, text, <reserved08706>, BOI]; transformers' ChameleonProcessor appends the same
    sep token after the text. The unconditional row stays [BOS, BOI] (its image-conditioned row keeps
    only BOS, image tokens and image delimiters, which is the same row for a text-only prompt)."""
    network, processor = chameleon_parts()
    anole = AnoleModel.from_model(network, processor, grid=4)
    vocab = network.config.vocabulary_map
    text = [vocab[word] for word in ("a", "red", "apple")]
    assert anole.prompt_ids("a red apple")[0].tolist() == [
        vocab["<s>"],
        *text,
        vocab["<reserved08706>"],
        vocab["<racm3:break>"],
    ]
    assert anole.unconditional_ids()[0].tolist() == [vocab["<s>"], vocab["<racm3:break>"]]


# ---- 2. LlamaGen-T2I: the caption is cleaned before T5 -----------------------------------------


def test_t2i_caption_is_cleaned_before_t5():
    """sample_t2i.py's T5Embedder runs clean_caption twice: lower case, URLs, HTML and stray
    punctuation out. Our tiny T5 vocabulary is lower case, so an uncleaned caption reads differently."""
    t2i = FAMILIES["llamagen-t2i"].build()
    clean, clean_valid = t2i.caption_features("a red apple")
    for raw in (
        "A Red APPLE",
        "a red apple http://example.com",
        "<b>a red apple</b>",
        "a red apple @somebody",
        "  a   red apple *** ",
    ):
        features, valid = t2i.caption_features(raw)
        assert torch.equal(valid, clean_valid), raw
        assert torch.equal(features, clean), raw


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("A Red Apple http://example.com", "a red apple"),
        ("a cat &amp; a dog", "a cat a dog"),
        ("<p>A <i>smiling</i> cat</p>", "a smiling cat"),
        ("a%20cat+on+the+moon", "a cat on the moon"),
        ("cat @nickname on the moon", "cat on the moon"),
        ("a red---apple", "a red-apple"),
        ("“quoted” ‘single’", "quoted\" 'single"),
        ("photo 12345678 of #12 cat", "photo of cat"),
        ("this-is-my-cute-cat", "this is my cute cat"),
        ("free shipping red apple", "red apple"),
        ("a red apple, on the moon.", "a red apple, on the moon."),
        ("a cat on 東京 the moon", "a cat on the moon"),
        ("'a red apple'", "a red apple"),
        ("a cat (on) [the] {moon} | *", "a cat on the moon"),
    ],
)
def test_clean_caption_follows_the_release(raw, cleaned):
    """Expected values are what LlamaGen's language/t5.py (with ftfy and bs4) returns for these."""
    assert clean_caption(clean_caption(raw)) == cleaned


# ---- 3. LlamaGen: each variant asks its release's hub repository -------------------------------


@pytest.mark.parametrize(
    ("variant", "repo", "files"),
    [
        ("c2i", "FoundationVision/LlamaGen", ("c2i_L_256.pt", "vq_ds16_c2i.pt")),
        ("t2i", "peizesun/llamagen_t2i", ("t2i_XL_stage1_256.pt", "vq_ds16_t2i.pt")),
    ],
)
def test_each_variant_asks_its_release_repository(monkeypatch, tmp_path, variant, repo, files):
    """LlamaGen's README links the t2i checkpoints to huggingface.co/peizesun/llamagen_t2i."""
    monkeypatch.delenv(llamagen.C2I_ENV_VAR, raising=False)
    monkeypatch.delenv(llamagen.T2I_ENV_VAR, raising=False)
    asked, checked, cached = [], [], []

    def download(repo_id, filename, **_):
        asked.append((repo_id, filename))
        path = tmp_path / filename
        path.write_bytes(b"")
        return str(path)

    monkeypatch.setattr("huggingface_hub.hf_hub_download", download)
    monkeypatch.setattr(hub, "require_hub", lambda name, repo_id, names, hint: checked.append((repo_id, names)))
    monkeypatch.setattr(hub, "in_hub_cache", lambda repo_id, *names: cached.append((repo_id, names)) or False)
    paths = llamagen.checkpoint_paths(f"llamagen-{variant}", None, variant)
    assert [path.name for path in paths] == list(files)
    assert asked == [(repo, name) for name in files]
    assert checked == [(repo, files)]
    reason = llamagen.offline_reason(variant)
    assert cached == [(repo, files)] and repo in reason


# ---- 4. Lumina-mGPT: query/key norms stored per model-parallel shard ----------------------------


def save_folder(network, processor, folder: Path, decoder: VQGANDecoder | None = None) -> None:
    """A transformers checkpoint folder with the Chameleon tokenizer's VQGAN beside it."""
    network.save_pretrained(folder)
    processor.save_pretrained(folder)
    decoder = decoder or VQGANDecoder.from_vqmodel(network.model.vqmodel)
    (folder / "tokenizer").mkdir(exist_ok=True)
    torch.save({"state_dict": decoder.state_dict()}, folder / "tokenizer" / "vqgan.ckpt")


def rewrite_weights(folder: Path, change) -> None:
    state = load_file(str(folder / "model.safetensors"))
    for key in list(state):
        state[key] = change(key, state[key])
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


def qk_norm(key: str) -> bool:
    return ".self_attn.q_norm." in key or ".self_attn.k_norm." in key


@pytest.mark.parametrize("shards", [1, 2])
def test_lumina_qk_norms_per_shard_load_as_lumina_applies_them(tmp_path, monkeypatch, shards):
    """Lumina-mGPT's ChameleonLayerNorm holds (model_parallel_size, head_dim) and repeat-interleaves each
    shard's row over that shard's heads; transformers holds (heads, head_dim). Expanding the same way
    gives the same network: identical hidden states and logits."""
    monkeypatch.delenv(VQGAN_ENV_VAR, raising=False)
    network, processor = chameleon_parts()
    torch.manual_seed(5)
    with torch.no_grad():
        for layer in network.model.layers:
            for norm in (layer.self_attn.q_norm, layer.self_attn.k_norm):
                heads = norm.weight.shape[0]
                for parameter in (norm.weight, norm.bias):
                    rows = torch.randn(shards, parameter.shape[1])
                    parameter.copy_(rows.repeat_interleave(heads // shards, dim=0))
    save_folder(network, processor, tmp_path)

    def lumina_layout(key, value):
        if not qk_norm(key):
            return value
        return value[:: value.shape[0] // shards].clone()  # one row per shard

    rewrite_weights(tmp_path, lumina_layout)
    assert load_file(str(tmp_path / "model.safetensors"))["model.layers.0.self_attn.q_norm.weight"].shape[0] == shards
    loaded = LuminaMGPTModel.load(str(tmp_path), "cpu").network  # the released 48 x 48 grid
    reference = LuminaMGPTModel.from_model(network, processor, grid=4)  # the tiny vocabulary's grid
    ours = LuminaMGPTModel.from_model(loaded, processor, grid=4)
    for layer, expected in zip(loaded.model.layers, network.model.layers, strict=True):
        for norm in ("q_norm", "k_norm"):
            assert torch.equal(getattr(layer.self_attn, norm).weight, getattr(expected.self_attn, norm).weight)
            assert torch.equal(getattr(layer.self_attn, norm).bias, getattr(expected.self_attn, norm).bias)
    ids = reference.prompt_ids("a red apple")
    with torch.no_grad():
        expected = network.model(input_ids=ids).last_hidden_state
        assert torch.equal(loaded.model(input_ids=ids).last_hidden_state, expected)
    assert torch.equal(ours.session("a red apple", 3.0).next_logits, reference.session("a red apple", 3.0).next_logits)


@pytest.mark.parametrize(
    ("key", "shape"),
    [
        ("model.layers.0.self_attn.q_norm.weight", (3, 8)),  # 3 shards cannot split 4 heads
        ("model.layers.1.self_attn.k_norm.bias", (2, 4)),  # not the head width
        ("model.layers.0.mlp.up_proj.weight", (32, 32)),  # not a norm at all
    ],
)
def test_a_checkpoint_of_the_wrong_shape_is_refused_in_one_line(tmp_path, monkeypatch, key, shape):
    monkeypatch.delenv(VQGAN_ENV_VAR, raising=False)
    network, processor = chameleon_parts()
    save_folder(network, processor, tmp_path)
    rewrite_weights(tmp_path, lambda name, value: torch.zeros(shape) if name == key else value)
    with pytest.raises(ModelUnavailable) as error:
        LuminaMGPTModel.load(str(tmp_path), "cpu")
    message = one_line(error)
    assert key in message and str(shape) in message


# ---- 5. the VQGAN loads strictly; the codebook comes from it -----------------------------------


def vq_state(seed: int = 1) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    decoder = VQGANDecoder(ChameleonVQVAEConfig(**chameleon_vq_config()))
    return {key: value.clone() for key, value in decoder.state_dict().items()}


def test_vqgan_refuses_keys_it_does_not_know(tmp_path):
    state = vq_state() | {"decoder.up.9.block.0.conv1.weight": torch.zeros(1)}
    torch.save({"state_dict": state}, tmp_path / "vqgan.ckpt")
    with pytest.raises(ModelUnavailable, match=r"decoder\.up\.9\.block\.0\.conv1\.weight") as error:
        VQGANDecoder(ChameleonVQVAEConfig(**chameleon_vq_config())).load_weights(tmp_path / "vqgan.ckpt")
    one_line(error)


@pytest.mark.parametrize("key", ["post_quant_conv.weight", "quantize.embedding.weight"])
def test_vqgan_refuses_a_checkpoint_without_the_codebook_or_post_quant_conv(tmp_path, key):
    state = vq_state()
    del state[key]
    torch.save({"state_dict": state}, tmp_path / "vqgan.ckpt")
    with pytest.raises(ModelUnavailable, match=key.replace(".", r"\.")) as error:
        VQGANDecoder(ChameleonVQVAEConfig(**chameleon_vq_config())).load_weights(tmp_path / "vqgan.ckpt")
    one_line(error)


def test_vqgan_ignores_the_encoder_and_training_loss_by_name(tmp_path):
    """The released taming checkpoint also holds the encoder, quant_conv and the training loss."""
    state = vq_state(3)
    extra = {"encoder.conv_in.weight": torch.zeros(2), "quant_conv.bias": torch.zeros(2)}
    extra["loss.discriminator.main.0.weight"] = torch.zeros(2)
    torch.save({"state_dict": {f"model.{key}": value for key, value in (state | extra).items()}}, tmp_path / "v.ckpt")
    decoder = VQGANDecoder(ChameleonVQVAEConfig(**chameleon_vq_config()))
    decoder.load_weights(tmp_path / "v.ckpt")
    assert all(torch.equal(decoder.state_dict()[key], value) for key, value in state.items())


def test_codebook_vectors_come_from_the_vqgan_checkpoint(tmp_path, monkeypatch):
    """LANTERN and GSD read token_vectors; transformers' copy of the VQ model is random where the
    transformers checkpoint lacks it (it only warns), the VQGAN checkpoint is what draws the pixels."""
    monkeypatch.delenv(VQGAN_ENV_VAR, raising=False)
    network, processor = chameleon_parts()
    decoder = VQGANDecoder.from_vqmodel(network.model.vqmodel)
    with torch.no_grad():
        decoder.quantize.embedding.weight.normal_(0, 2.0)  # differs from the network's copy
    save_folder(network, processor, tmp_path, decoder)
    for model in (LuminaMGPTModel.load(str(tmp_path), "cpu"), AnoleModel.load(str(tmp_path), "cpu")):
        codebook = decoder.quantize.embedding.weight[:CHAMELEON_CODES]
        assert torch.equal(model.token_vectors[:CHAMELEON_CODES], codebook)
        assert torch.equal(model.decoder.quantize.embedding.weight, decoder.quantize.embedding.weight)


# ---- 6. every load failure is one line --------------------------------------------------------


def out_of_memory(*args, **kwargs):
    raise torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 172.00 MiB. GPU 0 has a total capacity of 79.19 GiB\n"
        "of which 50.00 MiB is free. Including non-PyTorch memory, this process has 79.13 GiB in use."
    )


def test_out_of_memory_while_loading_is_one_line(tmp_path, monkeypatch):
    network, processor = chameleon_parts()
    network.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    monkeypatch.setattr(ChameleonForConditionalGeneration, "from_pretrained", out_of_memory)
    with pytest.raises(ModelUnavailable, match="memory") as error:
        hub.load_pretrained(
            "anole", ChameleonForConditionalGeneration, str(tmp_path), "cpu", default_id="x/y", env_var="NONE"
        )
    one_line(error)


def test_out_of_memory_while_moving_to_the_device_is_one_line(tmp_path, monkeypatch):
    network, processor = chameleon_parts()
    network.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    monkeypatch.setattr(ChameleonForConditionalGeneration, "to", out_of_memory)
    with pytest.raises(ModelUnavailable, match="memory") as error:
        hub.load_pretrained(
            "anole", ChameleonForConditionalGeneration, str(tmp_path), "cpu", default_id="x/y", env_var="NONE"
        )
    one_line(error)


def test_a_truncated_weights_file_is_one_line(tmp_path):
    network, processor = chameleon_parts()
    network.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    with open(tmp_path / "model.safetensors", "r+b") as file:
        file.truncate(1000)
    with pytest.raises(ModelUnavailable, match="cannot load") as error:
        hub.load_pretrained(
            "anole", ChameleonForConditionalGeneration, str(tmp_path), "cpu", default_id="x/y", env_var="NONE"
        )
    one_line(error)


def test_a_vocabulary_that_is_not_the_familys_is_one_line(tmp_path, monkeypatch):
    """The adapter's own checks on a loaded network (here: an image code without its token) refuse
    like the loading does."""
    monkeypatch.delenv(VQGAN_ENV_VAR, raising=False)
    network, processor = chameleon_parts()
    save_folder(network, processor, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["vocabulary_map"]["IMGIMGBZ"]  # code 1
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelUnavailable, match="without gaps") as error:
        AnoleModel.load(str(tmp_path), "cpu")
    assert one_line(error).startswith("anole: ")


def save_llamagen(model: LlamaGenModel, folder: Path, variant: str) -> None:
    vq = dict(model.vq.state_dict()) | {"encoder.conv_in.weight": torch.zeros(1)}
    torch.save({"model": model.gpt.state_dict(), "args": argparse.Namespace()}, folder / f"{variant}_T_8.pt")
    torch.save({"model": vq}, folder / f"vq_ds2_{variant}.pt")


def test_llamagen_wrong_shape_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(llamagen.HEADS_BY_WIDTH, 32, 4)
    c2i = FAMILIES["llamagen-c2i"].build()
    save_llamagen(c2i, tmp_path, "c2i")
    checkpoint = torch.load(tmp_path / "c2i_T_8.pt", weights_only=False)
    checkpoint["model"]["layers.1.attention.wo.weight"] = torch.zeros(32, 16)
    torch.save(checkpoint, tmp_path / "c2i_T_8.pt")
    with pytest.raises(ModelUnavailable, match=r"layers\.1\.attention\.wo\.weight") as error:
        LlamaGenModel.load(str(tmp_path), "cpu")
    one_line(error)


def test_llamagen_out_of_memory_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(llamagen.HEADS_BY_WIDTH, 32, 4)
    save_llamagen(FAMILIES["llamagen-c2i"].build(), tmp_path, "c2i")
    monkeypatch.setattr(LlamaGenTransformer, "to", out_of_memory)
    with pytest.raises(ModelUnavailable, match="memory") as error:
        LlamaGenModel.load(str(tmp_path), "cpu")
    one_line(error)


def test_llamagen_broken_t5_weights_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(llamagen.HEADS_BY_WIDTH, 32, 4)
    monkeypatch.delenv(llamagen.T5_ENV_VAR, raising=False)
    t2i = FAMILIES["llamagen-t2i"].build()
    save_llamagen(t2i, tmp_path, "t2i")
    t2i.text_encoder.save_pretrained(tmp_path / "t5")
    t2i.tokenizer.save_pretrained(tmp_path / "t5")
    with open(tmp_path / "t5" / "model.safetensors", "r+b") as file:
        file.truncate(100)
    with pytest.raises(ModelUnavailable, match="T5") as error:
        LlamaGenModel.load(str(tmp_path), "cpu", variant="t2i")
    one_line(error)
