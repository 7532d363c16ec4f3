"""The Emu3 adapter on a tiny random-weight `Emu3ForConditionalGeneration` built here (offline)."""

import random

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    Emu3Config,
    Emu3ForConditionalGeneration,
    Emu3ImageProcessor,
    Emu3Processor,
    PreTrainedTokenizerFast,
)

from specviz.decoding import run
from specviz.models import hub
from specviz.models.emu3 import ENV_VAR, Emu3Model
from specviz.models.errors import ModelUnavailable
from specviz.models.protocol import IMAGE_CELL, ImageModel, Session
from specviz.models.registry import MODELS
from specviz.models.sampling import SamplingSettings

MULTI_TOKEN_ATOL = 1e-4  # float32 on CPU: summation order only
CODES = 48
ROWS = COLS = 4  # the processor's grid for image_area 32 * 32 (it divides by 8 per token)
SEQ_LEN = ROWS * (COLS + 1)
EOL = CODES  # method id of the end-of-line layout token
SPECIALS = [
    "<unk>",
    "<pad>",
    "<s>",
    "</s>",
    "<|image start|>",
    "<|image end|>",
    "<|image token|>",
    "<|extra_201|>",
    "<|extra_200|>",
    "<image>",
]
WORDS = ["a", "red", "apple", "rocket", "on", "the", "moon", "lowres", "blurry", "masterpiece", ",", ".", "*"]
WORDS += [str(digit) for digit in range(10)]  # the "H*W" size in the image prompt
PROMPTS = ["a red apple", "rocket on the moon"]
JACOBI_FAMILY = ["jacobi", "sjd", "scd-mc", "scd-gs", "lantern", "gsd"]


def tiny_processor() -> Emu3Processor:
    visual = [f"<|visual token {code:06d}|>" for code in range(CODES)]
    random.Random(0).shuffle(visual)  # BPE ids deliberately not in codebook order
    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS + visual)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={
            "image_token": "<image>",
            "boi_token": "<|image start|>",
            "eoi_token": "<|image end|>",
            "image_wrapper_token": "<|image token|>",
            "eof_token": "<|extra_201|>",
        },
    )
    return Emu3Processor(Emu3ImageProcessor(image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5)), tokenizer)


def tiny_network(vocabulary: dict[str, int], seed: int = 0) -> Emu3ForConditionalGeneration:
    torch.manual_seed(seed)
    config = Emu3Config(
        text_config={
            "vocab_size": 96,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
            "pad_token_id": 1,
            "bos_token_id": 2,
            "eos_token_id": 3,
        },
        vq_config={
            "codebook_size": CODES,
            "embed_dim": 4,
            "latent_channels": 4,
            "temporal_downsample_factor": 1,
            "base_channels": 32,  # GroupNorm of 32 groups
            "channel_multiplier": [1, 1],
            "num_res_blocks": 1,
            "attn_resolutions": [],
            "hidden_size": 32,
        },
        vocabulary_map=vocabulary,
    )
    network = Emu3ForConditionalGeneration(config).eval()
    # widen the default init (std 0.02) so tokens depend on the prompt, the guidance row and each other
    with torch.no_grad():
        for module in (network.model.text_model, network.lm_head):
            for name, parameter in module.named_parameters():
                if parameter.dim() == 2:
                    parameter.normal_(0, 1.0 if "embed" in name else 1.5 / parameter.shape[-1] ** 0.5)
    return network


def wrap(network, processor, **options) -> Emu3Model:
    # short prompt additions, so prompt and negative prompt rows have different lengths (left padding)
    options = {"image_area": 32 * 32, "positive_suffix": " masterpiece", "negative_prompt": "lowres, blurry"} | options
    return Emu3Model.from_model(network, processor, **options)


@pytest.fixture(scope="module")
def emu3() -> Emu3Model:
    processor = tiny_processor()
    return wrap(tiny_network(processor.tokenizer.get_vocab()), processor)


def test_implements_the_protocol_with_an_end_of_line_slot_after_every_row(emu3):
    assert isinstance(emu3, ImageModel)
    geometry = emu3.geometry
    assert (geometry.rows, geometry.cols, geometry.vocab_size, geometry.seq_len) == (ROWS, COLS, CODES + 1, SEQ_LEN)
    assert geometry.layout == ((IMAGE_CELL,) * COLS + (EOL,)) * ROWS
    session = emu3.session("a red apple", 3.0)
    assert isinstance(session, Session) and session.nfe == 1 and session.next_logits.shape == (CODES + 1,)
    # the prompt and negative rows differ in length here, so the padded path is the one under test
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
def test_ar_reproduces_transformers_generate_greedy_with_guidance(emu3, prompt):
    greedy = SamplingSettings(temperature=0, guidance_scale=3.0)
    ours = run(emu3, "ar", prompt, 0, greedy).tokens
    assert ours == emu3.transformers_generate(prompt, greedy, 0)
    assert ours != run(emu3, "ar", prompt, 0, SamplingSettings(temperature=0, guidance_scale=1.0)).tokens


def test_ar_reproduces_transformers_generate_greedy_without_guidance(emu3):
    greedy = SamplingSettings(temperature=0, guidance_scale=1.0)
    assert run(emu3, "ar", "a red apple", 0, greedy).tokens == emu3.transformers_generate("a red apple", greedy, 0)


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


def test_layout_slots_are_forced_one_hot(emu3):
    session = emu3.session("rocket", 3.0)
    assert session.next_logits[EOL] == float("-inf")  # position 0 is an image cell
    tokens = torch.tensor([5, 6, 7, 8, EOL, 1, 2, 3, 4, EOL, 9])
    logits = session.forward(tokens)  # rows for positions 1..11
    positions = torch.arange(1, 12)
    forced = (positions + 1) % (COLS + 1) == 0
    assert torch.all(logits[forced].argmax(-1) == EOL)
    assert torch.all(logits[forced].softmax(-1).max(-1).values == 1.0)
    assert torch.all(logits[~forced, EOL] == float("-inf")) and torch.isfinite(logits[~forced, :EOL]).all()


def test_one_forward_of_n_tokens_equals_n_single_forwards(emu3):
    tokens = torch.tensor([5, 6, 7, 8, EOL, 1, 2, 3, 4, EOL, 9, 10])
    window = emu3.session("a red apple", 3.0)
    together = window.forward(tokens)
    single = emu3.session("a red apple", 3.0)
    one_by_one = []
    for token in tokens:
        one_by_one.append(single.forward(token.view(1))[0])
        single.commit(1)
    torch.testing.assert_close(together, torch.stack(one_by_one), atol=MULTI_TOKEN_ATOL, rtol=0)
    assert window.nfe == 2 and single.nfe == 13


def test_rollback_then_forward_reproduces_logits_exactly(emu3):
    session = emu3.session("rocket", 3.0)
    session.forward(torch.tensor([5, 9, 40]))
    session.commit(3)
    drafts = torch.tensor([1, EOL, 3, 4])
    first = session.forward(drafts).clone()
    session.commit(0)
    session.forward(torch.tensor([7, EOL]))
    again = session.forward(drafts)
    assert torch.equal(first, again)
    session.commit(2)
    assert session.length == 5 and torch.equal(session.next_logits, first[1])


def _alone(emu3, ids: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Visual-token logits of every generated position: one uncached full-model pass over one row."""
    sequence = torch.cat([ids, emu3.method_to_text[tokens][None]], dim=1)
    with torch.no_grad():
        logits = emu3.network(input_ids=sequence).logits[0, ids.shape[1] - 1 :]
    return logits[:, emu3.visual_ids]


@pytest.mark.parametrize(("negative", "padded"), [("lowres, blurry", True), ("lowres blurry masterpiece ,", False)])
def test_guidance_combines_log_softmax_of_rows_each_run_alone(emu3, negative, padded):
    """Padded (negative prompt shorter) and unpadded (same length) batches give each row's own logits."""
    model = wrap(emu3.network, emu3.processor, negative_prompt=negative)
    assert (model.prompt_ids("a red apple").shape != model.negative_ids().shape) == padded
    tokens, scale = torch.tensor([3, 14, 15, 9, EOL, 2, 6]), 3.0
    session = model.session("a red apple", scale)
    got = torch.cat([session.next_logits[None], session.forward(tokens)])
    cond = _alone(model, model.prompt_ids("a red apple"), tokens).log_softmax(-1)
    uncond = _alone(model, model.negative_ids(), tokens).log_softmax(-1)
    image = torch.tensor([entry == IMAGE_CELL for entry in model.geometry.layout[: len(tokens) + 1]])
    expected = scale * (cond - uncond) + uncond
    torch.testing.assert_close(got[image, :CODES].log_softmax(-1), expected[image].log_softmax(-1), atol=1e-4, rtol=0)


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
    with pytest.raises(ModelUnavailable, match=r"hub id BAAI/Emu3-Gen-hf.*--weights PATH"):
        Emu3Model.load(None, "cpu")


def test_registered_after_tiny_and_offline_only_with_local_weights(monkeypatch, tmp_path):
    assert next(iter(MODELS)) == "tiny" and "emu3" in MODELS
    assert MODELS["emu3"].offline is not None
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert "--weights" in MODELS["emu3"].offline()
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert MODELS["emu3"].offline() is None
    defaults = Emu3Model.default_sampling
    assert (defaults.top_k, defaults.guidance_scale) == (2048, 3.0)
