"""The Emu3 adapter on a tiny random-weight `Emu3ForConditionalGeneration` (model_zoo.py, offline).
The protocol contract is in test_contract.py."""

import numpy as np
import pytest
import torch
from model_zoo import EMU3_CODES as CODES
from model_zoo import EMU3_COLS as COLS
from model_zoo import EMU3_ROWS as ROWS
from model_zoo import FAMILIES, emu3_wrap

from specviz.core.errors import ModelUnavailable
from specviz.core.settings import SamplingSettings
from specviz.decoding import run
from specviz.models import hub
from specviz.models.emu3.adapter import ENV_VAR, Emu3Model
from specviz.models.protocol import IMAGE_CELL
from specviz.models.registry import MODELS

SEQ_LEN = ROWS * (COLS + 1)
EOL = CODES  # method id of the end-of-line layout token
PROMPTS = ["a red apple", "rocket on the moon"]
JACOBI_FAMILY = ["jacobi", "sjd", "scd-mc", "scd-gs", "lantern", "gsd"]


@pytest.fixture(scope="module")
def emu3() -> Emu3Model:
    return FAMILIES["emu3"].build()


def test_an_end_of_line_slot_after_every_row(emu3):
    geometry = emu3.geometry
    assert (geometry.rows, geometry.cols, geometry.vocab_size, geometry.seq_len) == (ROWS, COLS, CODES + 1, SEQ_LEN)
    assert geometry.layout == ((IMAGE_CELL,) * COLS + (EOL,)) * ROWS
    # the prompt and negative rows differ in length here, so the contract tests the padded path
    assert emu3.prompt_ids("a red apple").shape[1] != emu3.negative_ids().shape[1]


def test_token_names_map_into_the_codebook(emu3):
    vocab = emu3.processor.tokenizer.get_vocab()
    expected = [vocab[f"<|visual token {code:06d}|>"] for code in range(CODES)]
    assert emu3.visual_ids.tolist() == expected
    assert expected != sorted(expected)  # BPE order is not codebook order in this vocabulary
    assert int(emu3.method_to_text[EOL]) == vocab["<|extra_200|>"]
    tokens = torch.randint(0, CODES, (ROWS, COLS), generator=torch.Generator().manual_seed(3))
    sequence = torch.cat([tokens, torch.full((ROWS, 1), EOL)], dim=1).flatten()
    # transformers' own BPE -> codebook conversion reads our sequence back as the same codes ...
    text = emu3.text_tokens(sequence)[None, :-3].view(1, ROWS, COLS + 1)
    assert torch.equal(emu3.network.vocabulary_mapping.convert_bpe2img(text)[0].long(), tokens)
    # ... and decode shows exactly what the VQ decoder makes of those codes
    pixels = emu3.network.model.vqmodel.decode(tokens[None])[0]
    expected_pixels = ((pixels * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0)
    assert torch.equal(torch.from_numpy(np.array(emu3.decode(sequence))), expected_pixels)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_ar_reproduces_reference_generate_greedy_with_guidance(emu3, prompt):
    greedy = SamplingSettings(temperature=0, guidance_scale=3.0)
    ours = run(emu3, "ar", prompt, 0, greedy).tokens
    assert ours == emu3.reference_generate(prompt, greedy, 0)
    assert ours != run(emu3, "ar", prompt, 0, SamplingSettings(temperature=0, guidance_scale=1.0)).tokens


def test_ar_reproduces_reference_generate_greedy_without_guidance(emu3):
    greedy = SamplingSettings(temperature=0, guidance_scale=1.0)
    assert run(emu3, "ar", "a red apple", 0, greedy).tokens == emu3.reference_generate("a red apple", greedy, 0)


def test_sampling_distribution_equals_generate_at_every_position(emu3):
    """generate() samples over the whole text vocabulary, we over V + 1 ids: not one random stream,
    but at every position of generate()'s own sampled sequence our p equals its distribution."""
    sampling = SamplingSettings(temperature=0.8, top_k=12, guidance_scale=3.0)
    out, start = emu3.run_generate("a red apple", sampling, 5, output_scores=True, return_dict_in_generate=True)
    text = out.sequences[0, start:]
    tokens = emu3.text_to_method[text]
    assert (tokens >= 0).all()
    theirs = torch.stack(out.scores)[:, 0].softmax(-1)[:, emu3.method_to_text]  # (seq_len, V + 1)
    session = emu3.session("a red apple", sampling.guidance_scale)
    logits = torch.cat([session.next_logits[None], session.forward(tokens[:-1])])
    ours = sampling.probabilities(logits)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_rows_of_the_same_length_take_the_unpadded_path_with_the_same_logits(emu3):
    """The contract checks left-padded rows; a negative prompt as long as the prompt needs no mask."""
    family = FAMILIES["emu3"]
    model = emu3_wrap(emu3.network, emu3.processor, negative_prompt="lowres blurry masterpiece ,")
    assert model.prompt_ids("a red apple").shape == model.negative_ids().shape
    tokens, scale = torch.tensor([3, 14, 15, 9, EOL, 2, 6]), 3.0
    session = model.session("a red apple", scale)
    got = torch.cat([session.next_logits[None], session.forward(tokens)])
    expected = family.combine(family.uncached(model, "a red apple", scale, tokens), scale)
    image = torch.tensor([entry == IMAGE_CELL for entry in model.geometry.layout[: len(tokens) + 1]])
    torch.testing.assert_close(got[image], expected[image], atol=1e-4, rtol=0)


def test_decode_returns_the_image_and_blanks_cells_not_generated(emu3):
    size = COLS * 2 ** (len(emu3.network.config.vq_config.channel_multiplier) - 1)
    full = emu3.decode(run(emu3, "ar", "a red apple", 0).tokens)
    assert full.size == (size, size) and full.mode == "RGB"
    partial = torch.from_numpy(np.array(emu3.decode([1, 2, 3, 4, EOL, 5])))  # row 0 and one cell of row 1
    cell = size // ROWS
    assert (partial[cell * 2 :] == hub.BLANK).all()
    assert (partial[cell : cell * 2, cell:] == hub.BLANK).all()
    assert not (partial[:cell] == hub.BLANK).all()


@pytest.mark.parametrize("method", JACOBI_FAMILY)
def test_jacobi_family_runs_end_to_end(emu3, method):
    sampling = SamplingSettings(temperature=1.0, top_k=20, guidance_scale=3.0)
    trace = run(emu3, method, "a red apple", 3, sampling, params={"window": 4})
    assert len(trace.tokens) == SEQ_LEN
    layout = emu3.geometry.layout
    assert all(t == EOL if entry == EOL else 0 <= t < CODES for t, entry in zip(trace.tokens, layout, strict=True))
    assert emu3.decode(trace.tokens).size == emu3.decode([]).size


@pytest.mark.parametrize("method", ["jacobi", "sjd", "scd-mc", "scd-gs"])
def test_greedy_jacobi_family_equals_greedy_ar(emu3, method):
    greedy = SamplingSettings(temperature=0, guidance_scale=3.0)
    expected = run(emu3, "ar", "rocket on the moon", 0, greedy).tokens
    assert run(emu3, method, "rocket on the moon", 0, greedy, params={"window": 4}).tokens == expected


def test_codebook_vectors_put_the_end_of_line_far_away(emu3):
    vectors = emu3.session("a red apple", 3.0).token_vectors
    assert vectors.shape == (CODES + 1, 4)
    codebook = emu3.network.model.vqmodel.quantize.embedding.weight[:CODES]
    assert torch.equal(vectors[:CODES], codebook)
    assert torch.cdist(vectors[EOL:], vectors[:CODES]).min() > 1e3 * torch.cdist(codebook, codebook).max()


def test_load_from_a_local_folder(tmp_path, emu3):
    emu3.network.save_pretrained(tmp_path)
    emu3.processor.save_pretrained(tmp_path)
    loaded = Emu3Model.load(str(tmp_path), "cpu")
    assert loaded.network.dtype == torch.float32
    assert loaded.visual_ids.tolist() == emu3.visual_ids.tolist()
    # the processor's own image area (720 px, 90 x 90 tokens) unless one is given
    assert (loaded.geometry.rows, loaded.geometry.cols) == (90, 90)


def test_missing_weights_say_what_to_pass(tmp_path):
    with pytest.raises(ModelUnavailable, match="--weights"):
        Emu3Model.load(str(tmp_path / "nowhere"), "cpu")


def test_unreachable_hub_says_what_to_pass(monkeypatch):
    from transformers import AutoConfig

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(AutoConfig, "from_pretrained", offline)
    monkeypatch.setattr(hub, "hub_unreachable", lambda timeout=3.0: None)  # the hub answers, the files do not
    with pytest.raises(ModelUnavailable, match=r"hub id BAAI/Emu3-Gen-hf.*--weights PATH"):
        Emu3Model.load(None, "cpu")


def test_registered_after_tiny_and_offline_only_with_local_weights(monkeypatch, tmp_path):
    assert next(iter(MODELS)) == "tiny" and "emu3" in MODELS
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert "--weights" in MODELS["emu3"].offline()
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert MODELS["emu3"].offline() is None
    defaults = Emu3Model.default_sampling
    assert (defaults.top_k, defaults.guidance_scale) == (2048, 3.0)
