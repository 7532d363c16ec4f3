"""The Janus-Pro adapter on a tiny random-weight `JanusForConditionalGeneration` built here (offline)."""

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    JanusConfig,
    JanusForConditionalGeneration,
    JanusImageProcessorPil,
    JanusProcessor,
    PreTrainedTokenizerFast,
)

from specviz.decoding import run
from specviz.models import hub
from specviz.models.errors import ModelUnavailable
from specviz.models.janus import ENV_VAR, JanusProModel
from specviz.models.protocol import ImageModel, Session
from specviz.models.registry import MODELS
from specviz.models.sampling import SamplingSettings

# float32 on CPU: a window pass and single-token passes differ only by summation order
MULTI_TOKEN_ATOL = 1e-4
HIDDEN = 32
CODES = 64
SPECIALS = ["<unk>", "<pad>", "<s>", "</s>", "<begin_of_image>", "<end_of_image>", "<image_placeholder>"]
WORDS = ["a", "red", "apple", "rocket", "smiling", "cat", "on", "the", "moon"]
BOS, PAD, BOI = 2, 1, 4
PROMPTS = ["a red apple", "smiling cat on the moon"]
JACOBI_FAMILY = ["jacobi", "sjd", "scd-mc", "scd-gs", "lantern", "gsd"]


def tiny_processor() -> JanusProcessor:
    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", BOS)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={
            "image_token": "<image_placeholder>",
            "boi_token": "<begin_of_image>",
            "eoi_token": "<end_of_image>",
        },
    )
    image_processor = JanusImageProcessorPil(image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5))
    return JanusProcessor(image_processor, tokenizer, num_image_tokens=16)


def tiny_config(projection_dim: int = HIDDEN) -> JanusConfig:
    return JanusConfig(
        text_config={
            "model_type": "llama",
            "vocab_size": 32,
            "hidden_size": HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 128,
            "pad_token_id": PAD,
            "bos_token_id": BOS,
            "eos_token_id": 3,
        },
        # 16 px images in 4 px patches: a 4x4 grid, so num_image_tokens 16; projection_dim = text hidden size
        vision_config={
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "image_size": 16,
            "patch_size": 4,
            "num_image_tokens": 16,
            "projection_dim": HIDDEN,
            "mlp_ratio": 2,
        },
        vq_config={
            "embed_dim": 8,
            "num_embeddings": CODES,
            "latent_channels": 8,
            "base_channels": 32,  # GroupNorm of 32 groups
            "channel_multiplier": [1, 1],
            "num_res_blocks": 1,
            "projection_dim": projection_dim,
            "image_token_embed_dim": HIDDEN,
        },
        image_token_id=6,
    )


def tiny_network(seed: int = 0) -> JanusForConditionalGeneration:
    torch.manual_seed(seed)
    network = JanusForConditionalGeneration(tiny_config()).eval()
    # the default init (std 0.02) makes every position predict nearly the same thing: widen the
    # generation path so tokens depend on the prompt, the guidance row and the previous tokens
    generation = network.model
    with torch.no_grad():
        for module in (
            generation.language_model,
            generation.generation_embeddings,
            generation.generation_aligner,
            generation.generation_head,
        ):
            for name, parameter in module.named_parameters():
                if parameter.dim() == 2:
                    parameter.normal_(0, 1.0 if "embed" in name else 1.5 / parameter.shape[-1] ** 0.5)
    config = network.generation_config
    config.bos_token_id, config.pad_token_id = BOS, PAD
    config.generation_kwargs = {"boi_token_id": BOI}
    return network


@pytest.fixture(scope="module")
def janus() -> JanusProModel:
    return JanusProModel.from_model(tiny_network(), tiny_processor())


def test_implements_the_protocol(janus):
    assert isinstance(janus, ImageModel)
    session = janus.session("a red apple", 5.0)
    assert isinstance(session, Session)
    assert (janus.geometry.rows, janus.geometry.cols, janus.geometry.vocab_size) == (4, 4, CODES)
    assert janus.geometry.seq_len == 16 and session.nfe == 1 and session.length == 0
    assert session.next_logits.shape == (CODES,)


def test_prompt_ends_with_begin_of_image_and_guidance_row_keeps_only_bos_and_boi(janus):
    ids = janus.prompt_ids("a red apple")
    assert ids[0, 0] == BOS and ids[0, -1] == BOI
    uncond = janus.unconditional_ids(ids)[0].tolist()
    assert uncond == [BOS] + [PAD] * (ids.shape[1] - 2) + [BOI]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_ar_reproduces_transformers_generate_greedy_with_guidance(janus, prompt):
    greedy = SamplingSettings(temperature=0, guidance_scale=5.0)
    ours = run(janus, "ar", prompt, 0, greedy).tokens
    assert ours == janus.transformers_generate(prompt, greedy, 0)
    # guidance matters here, so the equality above is not the conditional model's alone
    assert ours != run(janus, "ar", prompt, 0, SamplingSettings(temperature=0, guidance_scale=1.0)).tokens


@pytest.mark.parametrize(
    ("seed", "sampling"),
    [
        (0, SamplingSettings(temperature=1.0, guidance_scale=5.0)),
        (1, SamplingSettings(temperature=1.0, guidance_scale=5.0)),
        (2, SamplingSettings(temperature=0.7, top_k=16, guidance_scale=3.0)),
    ],
)
def test_ar_reproduces_transformers_generate_sampling_with_the_same_seed(janus, seed, sampling):
    """generate() draws from the global generator seeded with `seed`, our AR from a generator seeded
    with `seed`: the same stream, the same (V,) distributions, so the same tokens."""
    ours = run(janus, "ar", "a red apple", seed, sampling).tokens
    assert ours == janus.transformers_generate("a red apple", sampling, seed)


def test_one_forward_of_n_tokens_equals_n_single_forwards(janus):
    tokens = torch.randint(0, CODES, (10,), generator=torch.Generator().manual_seed(1))
    window = janus.session("a red apple", 5.0)
    together = window.forward(tokens)
    single = janus.session("a red apple", 5.0)
    one_by_one = []
    for token in tokens:
        one_by_one.append(single.forward(token.view(1))[0])
        single.commit(1)
    torch.testing.assert_close(together, torch.stack(one_by_one), atol=MULTI_TOKEN_ATOL, rtol=0)
    assert window.nfe == 2 and single.nfe == 11


def test_rollback_then_forward_reproduces_logits_exactly(janus):
    session = janus.session("rocket", 5.0)
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


def _uncached_head_logits(janus, ids, tokens):
    """Generation-head logits of every generated position by one uncached pass over the whole row."""
    network = janus.network
    embeds = torch.cat(
        [network.get_input_embeddings()(ids), network.prepare_embeddings_for_image_generation(tokens[None])], dim=1
    )
    with torch.no_grad():
        hidden = network.model.language_model(inputs_embeds=embeds).last_hidden_state[0]
    return network.model.generation_head(hidden[ids.shape[1] - 1 :])


def test_guidance_combines_raw_logits_of_the_two_rows(janus):
    tokens, scale = torch.tensor([3, 14, 15, 9]), 5.0
    session = janus.session("smiling cat", scale)
    got = torch.cat([session.next_logits[None], session.forward(tokens)])
    ids = janus.prompt_ids("smiling cat")
    cond = _uncached_head_logits(janus, ids, tokens)
    uncond = _uncached_head_logits(janus, janus.unconditional_ids(ids), tokens)
    torch.testing.assert_close(got, uncond + scale * (cond - uncond), atol=1e-3, rtol=0)


def _pixels(janus, tokens: torch.Tensor) -> torch.Tensor:
    """What `decode` should show for a full grid: the VQ decoder's pixels, unnormalised to uint8."""
    pixels = janus.network.decode_image_tokens(tokens[None])[0]
    return ((pixels * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)


def test_decode_returns_the_image_and_blanks_cells_not_generated(janus):
    tokens = torch.randint(0, CODES, (16,), generator=torch.Generator().manual_seed(2))
    size = 4 * 2 ** (len(janus.network.config.vq_config.channel_multiplier) - 1)  # grid x upsampling
    image = janus.decode(tokens)
    assert image.size == (size, size) and image.mode == "RGB"
    assert torch.equal(torch.from_numpy(np.array(image)), _pixels(janus, tokens))
    partial = torch.from_numpy(np.array(janus.decode(tokens[:5])))
    cell = size // 4
    assert (partial[cell * 2 :] == hub.BLANK).all()  # rows 2 and 3 not generated yet
    padded = torch.cat([tokens[:5], torch.zeros(11, dtype=torch.long)])  # missing cells decode as code 0
    assert torch.equal(partial[:cell], _pixels(janus, padded)[:cell])  # the first row is shown


@pytest.mark.parametrize("method", JACOBI_FAMILY)
def test_jacobi_family_runs_end_to_end(janus, method):
    sampling = SamplingSettings(temperature=1.0, top_k=32, guidance_scale=5.0)
    trace = run(janus, method, "a red apple", 3, sampling, params={"window": 4})
    assert len(trace.tokens) == 16 and all(0 <= t < CODES for t in trace.tokens)
    assert trace.nfe <= 17
    assert janus.decode(trace.tokens).size == janus.decode([]).size


@pytest.mark.parametrize("method", ["jacobi", "sjd", "scd-mc", "scd-gs"])
def test_greedy_jacobi_family_equals_greedy_ar(janus, method):
    greedy = SamplingSettings(temperature=0, guidance_scale=5.0)
    expected = run(janus, "ar", "smiling cat on the moon", 0, greedy).tokens
    assert run(janus, method, "smiling cat on the moon", 0, greedy, params={"window": 4}).tokens == expected


def test_codebook_vectors_for_relaxed_methods(janus):
    vectors = janus.session("a red apple", 5.0).token_vectors
    assert vectors.shape == (CODES, 8)
    torch.testing.assert_close(vectors.norm(dim=1), torch.ones(CODES))


def test_projection_dim_must_equal_the_text_hidden_size():
    network = JanusForConditionalGeneration(tiny_config(projection_dim=HIDDEN // 2)).eval()
    with pytest.raises(ValueError, match="projection_dim"):
        JanusProModel.from_model(network, tiny_processor())


def test_load_from_a_local_folder(tmp_path, janus):
    janus.network.save_pretrained(tmp_path)
    janus.processor.save_pretrained(tmp_path)
    loaded = JanusProModel.load(str(tmp_path), "cpu")
    assert loaded.network.dtype == torch.float32 and loaded.geometry == janus.geometry
    greedy = SamplingSettings(temperature=0, guidance_scale=5.0)
    assert run(loaded, "ar", "a red apple", 0, greedy).tokens == run(janus, "ar", "a red apple", 0, greedy).tokens


def test_missing_weights_say_what_to_pass(tmp_path):
    with pytest.raises(ModelUnavailable, match="--weights"):
        JanusProModel.load(str(tmp_path / "nowhere"), "cpu")


def test_unreachable_hub_says_what_to_pass(monkeypatch):
    from transformers import AutoConfig

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(AutoConfig, "from_pretrained", offline)
    with pytest.raises(ModelUnavailable, match=r"hub id deepseek-community/Janus-Pro-1B.*--weights PATH"):
        JanusProModel.load("deepseek-community/Janus-Pro-1B", "cpu")


def test_small_gpu_is_refused_with_the_memory_needed(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**20, 2**30))
    with pytest.raises(ModelUnavailable, match=r"needs about \d+\.\d GiB of GPU memory"):
        hub.check_gpu_memory("janus-pro", JanusForConditionalGeneration, tiny_config(), torch.device("cuda"))


def test_registered_after_tiny_and_offline_only_with_local_weights(monkeypatch, tmp_path):
    assert next(iter(MODELS)) == "tiny" and "janus-pro" in MODELS
    entry = MODELS["janus-pro"]
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert "--weights" in entry.offline()
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert entry.offline() is None
