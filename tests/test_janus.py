"""The Janus-Pro adapter on a tiny random-weight `JanusForConditionalGeneration` (model_zoo.py, offline).
The protocol contract is in test_contract.py."""

import numpy as np
import pytest
import torch
from model_zoo import FAMILIES, janus_config, janus_processor
from model_zoo import JANUS_BOI as BOI
from model_zoo import JANUS_BOS as BOS
from model_zoo import JANUS_CODES as CODES
from model_zoo import JANUS_HIDDEN as HIDDEN
from model_zoo import JANUS_PAD as PAD
from transformers import JanusForConditionalGeneration

from specviz.core.errors import ModelUnavailable
from specviz.core.settings import SamplingSettings
from specviz.decoding import run
from specviz.models import hub
from specviz.models.janus.adapter import ENV_VAR, JanusProModel
from specviz.models.registry import MODELS

PROMPTS = ["a red apple", "smiling cat on the moon"]
JACOBI_FAMILY = ["jacobi", "sjd", "scd-mc", "scd-gs", "lantern", "gsd"]


@pytest.fixture(scope="module")
def janus() -> JanusProModel:
    return FAMILIES["janus-pro"].build()


def test_geometry_is_the_vq_grid_over_the_codebook(janus):
    assert (janus.geometry.rows, janus.geometry.cols, janus.geometry.vocab_size) == (4, 4, CODES)
    assert janus.geometry.seq_len == 16 and janus.reference_generate is not None


def test_prompt_ends_with_begin_of_image_and_guidance_row_keeps_only_bos_and_boi(janus):
    ids = janus.prompt_ids("a red apple")
    assert ids[0, 0] == BOS and ids[0, -1] == BOI
    uncond = janus.unconditional_ids(ids)[0].tolist()
    assert uncond == [BOS] + [PAD] * (ids.shape[1] - 2) + [BOI]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_ar_reproduces_reference_generate_greedy_with_guidance(janus, prompt):
    greedy = SamplingSettings(temperature=0, guidance_scale=5.0)
    ours = run(janus, "ar", prompt, 0, greedy).tokens
    assert ours == janus.reference_generate(prompt, greedy, 0)
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
def test_ar_reproduces_reference_generate_sampling_with_the_same_seed(janus, seed, sampling):
    """generate() draws from the global generator seeded with `seed`, our AR from a generator seeded
    with `seed`: the same stream, the same (V,) distributions, so the same tokens."""
    ours = run(janus, "ar", "a red apple", seed, sampling).tokens
    assert ours == janus.reference_generate("a red apple", sampling, seed)


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
    network = JanusForConditionalGeneration(janus_config(projection_dim=HIDDEN // 2)).eval()
    with pytest.raises(ValueError, match="projection_dim"):
        JanusProModel.from_model(network, janus_processor())


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
    monkeypatch.setattr(hub, "hub_unreachable", lambda timeout=3.0: None)  # the hub answers, the files do not
    with pytest.raises(ModelUnavailable, match=r"hub id deepseek-community/Janus-Pro-1B.*--weights PATH"):
        JanusProModel.load("deepseek-community/Janus-Pro-1B", "cpu")


def test_an_offline_hub_is_reported_at_once(monkeypatch):
    monkeypatch.setattr(hub, "hub_unreachable", lambda timeout=3.0: "cannot reach huggingface.co (no network)")
    with pytest.raises(ModelUnavailable, match=r"not in the local hub cache and the hub is offline.*--weights PATH"):
        JanusProModel.load("deepseek-community/Janus-Pro-1B", "cpu")


def test_small_gpu_is_refused_with_the_memory_needed(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**20, 2**30))
    with pytest.raises(ModelUnavailable, match=r"needs about \d+\.\d GiB of GPU memory"):
        hub.check_gpu_memory(
            "janus-pro", lambda: JanusForConditionalGeneration._from_config(janus_config()), torch.device("cuda")
        )


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
