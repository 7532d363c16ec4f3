"""MAR on tiny random-weight networks of the release's architecture: its sampling loop, the exact
speculative pass, the generation order in traces and images, and loading release checkpoints safely."""

from __future__ import annotations

import argparse
import copy
import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from specviz.cli import main
from specviz.core.errors import ModelUnavailable
from specviz.core.inputs import InputError
from specviz.core.settings import SamplingSettings
from specviz.decoding.runner import run
from specviz.metrics import cell_of_position
from specviz.models.imagenet import class_label, parse_class
from specviz.models.mar.adapter import MarPair, read_network, read_vae
from specviz.models.mar.network import Mar, MarConfig, official_state_dict
from specviz.models.mar.vae import LATENT_SCALE, KLDecoder
from specviz.models.protocol import UnsupportedMethod, decode_in_order
from specviz.models.registry import load_model
from specviz.trace import Trace

SMALL = MarConfig(
    width=32, depth=1, heads=2, head_width=32, head_blocks=1, grid=4, token_dim=4, buffer_size=2, num_classes=10,
    sampling_steps=6,
)  # fmt: skip
GUIDED = {"temperature": 1.0, "top_k": None, "top_p": 1.0, "guidance_scale": 3.0}


def random_mar(seed: int, config: MarConfig = SMALL) -> Mar:
    """Default initialisation, and random values where the release initialises zeros (position
    embeddings, mask token, the head's output layers), so that every part matters."""
    torch.manual_seed(seed)
    network = Mar(config)
    with torch.no_grad():
        for parameter in network.parameters():
            if not parameter.abs().sum():
                parameter.normal_(0, 0.05)
    return network


def small_vae() -> KLDecoder:
    torch.manual_seed(7)
    return KLDecoder(channels=SMALL.token_dim, base=32, multipliers=(1, 2))


def pair_of_random_mars() -> MarPair:
    """MAR-L drafted by MAR-B, both tiny random networks (a 4 x 4 grid of 4-number tokens)."""
    return MarPair("mar-l", random_mar(0), random_mar(1), small_vae(), torch.device("cpu"))


@pytest.fixture(scope="module")
def pair() -> MarPair:
    return pair_of_random_mars()


def literal_conditions(network: Mar, tokens: torch.Tensor, mask: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """MAR's forward_mae_encoder and forward_mae_decoder as the release writes them: masked tokens are
    dropped before the encoder (every row masks as many), and the decoder pads them with the mask token."""
    batch, buffer, width = tokens.shape[0], network.config.buffer_size, network.config.width
    x = network.z_proj(tokens)
    x = torch.cat([torch.zeros(batch, buffer, width), x], dim=1)
    kept = torch.cat([torch.ones(batch, buffer), 1 - mask], dim=1).bool()
    x[:, :buffer] = classes[:, None]
    x = network.z_proj_ln(x + network.encoder_pos_embed_learned)
    x = x[kept].reshape(batch, -1, width)
    for block in network.encoder_blocks:
        x = block(x)
    x = network.decoder_embed(network.encoder_norm(x))
    padded = network.mask_token.repeat(batch, kept.shape[1], 1).clone()
    padded[kept] = x.reshape(-1, width)
    x = padded + network.decoder_pos_embed_learned
    for block in network.decoder_blocks:
        x = block(x)
    return network.decoder_norm(x)[:, buffer:] + network.diffusion_pos_embed_learned


def respaced(steps: int) -> tuple[np.ndarray, ...]:
    """Improved DDPM's respacing of the 1000-step cosine schedule, in float64 as the release computes it."""
    t = np.arange(1001) / 1000
    f = np.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    full = np.cumprod(1 - np.minimum(1 - f[1:] / f[:-1], 0.999))
    stride = 999 / (steps - 1)
    used = sorted({round(i * stride) for i in range(steps)})
    alpha_bar = full[used]
    previous = np.append(1.0, alpha_bar[:-1])
    betas = 1 - alpha_bar / previous
    posterior = betas * (1 - previous) / (1 - alpha_bar)
    log_posterior = np.log(np.append(posterior[1], posterior[1:]))
    return np.array(used), betas, alpha_bar, previous, log_posterior


def reference_ar(network: Mar, label: int, guidance: float, seed: int) -> torch.Tensor:
    """MAR's sample_tokens with num_iter = 256 (here the grid's size: one token per step), its cosine
    masking schedule and linear guidance schedule, and the diffusion head's p_sample_loop written out;
    specviz's one convention added: the last denoising step keeps its noise. Noise per token (x_T,
    then one draw per step) from the seed."""
    config = network.config
    length, dim = config.seq_len, config.token_dim
    order = torch.randperm(length, generator=torch.Generator().manual_seed(seed))
    generator = torch.Generator().manual_seed(seed)
    used, betas, alpha_bar, previous, log_posterior = respaced(config.sampling_steps)
    tokens, mask = torch.zeros(1, length, dim), torch.ones(1, length)
    classes = torch.cat([network.class_emb.weight[label][None], network.fake_latent])
    for step in range(length):
        z = literal_conditions(network, tokens.repeat(2, 1, 1), mask.repeat(2, 1), classes)[:, order[step]]
        mask_len = math.floor(length * math.cos(math.pi / 2 * (step + 1) / length))
        mask_len = max(1, min(int(mask.sum()) - 1, mask_len))
        scale = 1 + (guidance - 1) * (length - mask_len) / length
        noise = torch.randn(1, config.sampling_steps + 1, dim, generator=generator)[0]
        x = noise[0]
        for k, i in enumerate(reversed(range(len(used)))):
            t = torch.tensor([used[i]] * 2)
            eps, v = network.denoiser(x.repeat(2, 1), t, z)
            eps = eps[1] + scale * (eps[0] - eps[1])
            fraction = (v[0] + 1) / 2
            log_var = fraction * math.log(betas[i]) + (1 - fraction) * log_posterior[i]
            x0 = x / math.sqrt(alpha_bar[i]) - math.sqrt(1 / alpha_bar[i] - 1) * eps
            mean = (betas[i] * math.sqrt(previous[i]) / (1 - alpha_bar[i])) * x0 + (
                (1 - previous[i]) * math.sqrt(1 - betas[i]) / (1 - alpha_bar[i])
            ) * x
            x = mean + torch.exp(0.5 * log_var) * noise[k + 1]
        tokens[0, order[step]] = x
        mask[0, order[step]] = 0
    return tokens[0, order]


@torch.inference_mode()
def test_ar_is_mars_own_sampling_loop(pair):
    trace = run(pair, "ar", "3", 5, sampling=SamplingSettings(**GUIDED))
    expected = reference_ar(pair.target, 3, GUIDED["guidance_scale"], 5)
    ours = torch.tensor(trace.vectors)
    assert torch.allclose(ours, expected, rtol=1e-3, atol=1e-3 * expected.abs().max()), (ours - expected).abs().max()
    assert trace.nfe == SMALL.seq_len  # one pass per token after the first's prefill, as MAR's 256 iterations


@torch.inference_mode()
def test_a_target_pass_conditions_each_draft_on_the_drafts_before_it():
    """With the draft a copy of the target, every path ratio is exactly 1 only if the batched target pass
    gives draft j the condition sequential MAR gave it (drafts 1..j-1 known): the CSpD authors' pass,
    with every draft of the block masked, would not."""
    target = random_mar(0)
    twin = MarPair("mar-l", target, copy.deepcopy(target), small_vae(), torch.device("cpu"))
    trace = run(twin, "cspd-exact", "3", 2, params={"gamma": 5, "prefill": 0.0})
    ratios = [r for it in trace.iterations for r in it.ratio]
    assert len(ratios) >= SMALL.seq_len // 2 and min(ratios) > 0.99  # float32 densities of paths near 1e4
    session = twin.session("3", 3.0, seed=2).target
    drafts = torch.randn(5, SMALL.token_dim)
    rows = session.forward(drafts)  # row j: the position after drafts[: j + 1]
    classes = torch.cat([target.class_emb.weight[3][None], target.fake_latent])
    order = list(session.geometry.order)
    for j in range(4):
        tokens, mask = torch.zeros(1, SMALL.seq_len, SMALL.token_dim), torch.ones(1, SMALL.seq_len)
        tokens[0, order[: j + 1]], mask[0, order[: j + 1]] = drafts[: j + 1], 0
        expected = literal_conditions(target, tokens.repeat(2, 1, 1), mask.repeat(2, 1), classes)[:, order[j + 1]]
        assert torch.allclose(rows[j], expected, atol=1e-5)


@pytest.mark.parametrize("method", ["cspd", "cspd-exact", "ar-draft"])
def test_speculative_methods_run_and_their_trace_and_image_follow_the_order(pair, method, tmp_path):
    trace = run(pair, method, "golden retriever" if SMALL.num_classes > 207 else "7", 4, params=None)
    assert len(trace.vectors) == SMALL.seq_len and trace.draft_nfe > 0
    order = trace.geometry.order
    assert sorted(order) == list(range(SMALL.seq_len))
    assert list(cell_of_position(trace)) == order
    trace.save(tmp_path / "trace.json")
    assert Trace.load(tmp_path / "trace.json").geometry.order == order
    partial = np.asarray(decode_in_order(pair, trace.vectors[:3], order))
    cell = partial.shape[0] // SMALL.grid
    drawn = {(c // SMALL.grid, c % SMALL.grid) for c in order[:3]}
    for row in range(SMALL.grid):
        for col in range(SMALL.grid):
            block = partial[row * cell : (row + 1) * cell, col * cell : (col + 1) * cell]
            assert ((block == 224).all()) != ((row, col) in drawn)  # grey exactly where nothing is drawn yet


def test_the_order_comes_from_the_seed_and_draft_and_target_share_it(pair):
    one, other, again = (pair.session("3", 3.0, seed=s) for s in (0, 1, 0))
    assert one.target.geometry.order == one.draft.geometry.order == again.target.geometry.order
    assert one.target.geometry.order != other.target.geometry.order


def test_without_a_draft_only_the_target_runs(pair):
    alone = MarPair("mar-b", pair.target, None, pair.vae, torch.device("cpu"))
    assert len(run(alone, "ar", "3", 0).vectors) == SMALL.seq_len
    for method in ("cspd", "cspd-exact", "ar-draft"):
        with pytest.raises(UnsupportedMethod, match="needs a draft model"):
            run(alone, method, "3", 0)


def test_class_prompts_by_index_or_any_name():
    assert parse_class("207", 1000) == 207 and parse_class("  Golden  Retriever ", 1000) == 207
    assert parse_class("red panda", 1000) == parse_class("lesser panda", 1000) == 387
    assert class_label(88) == "macaw" and class_label(517) == "crane (517)"  # 134, the bird, is "crane"
    assert all(parse_class(class_label(index), 1000) == index for index in range(1000))  # the app's list
    with pytest.raises(InputError, match="ImageNet class index 0-999 or a class name"):
        parse_class("a photo of a dog", 1000, "mar-l")
    with pytest.raises(InputError, match="out of range"):
        parse_class("12", 10)


def test_a_text_prompt_on_a_class_model_is_a_message(pair, capsys):
    with pytest.raises(InputError, match="mar-l: the prompt must be an ImageNet class"):
        run(pair, "ar", "a red car", 0)
    assert main(["run", "--model", "tiny", "--class", "207", "--out", "/tmp/never"]) == 2
    assert "--class is for class-conditional models" in capsys.readouterr().err


def release_keys(config: MarConfig) -> list[str]:
    """The names of a release checkpoint (timm's ViT blocks, DiffLoss's SimpleMLPAdaLN), as models/mar.py
    and models/diffloss.py name them."""
    block = ["norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2"]
    names = ["class_emb.weight", "fake_latent", "encoder_pos_embed_learned", "mask_token", "decoder_pos_embed_learned"]
    names += ["diffusion_pos_embed_learned"]
    layers = ["z_proj", "z_proj_ln", "encoder_norm", "decoder_embed", "decoder_norm"]
    for part in ("encoder_blocks", "decoder_blocks"):
        layers += [f"{part}.{i}.{name}" for i in range(config.depth) for name in block]
    net = "diffloss.net"
    layers += [f"{net}.time_embed.mlp.0", f"{net}.time_embed.mlp.2", f"{net}.cond_embed", f"{net}.input_proj"]
    for i in range(config.head_blocks):
        layers += [f"{net}.res_blocks.{i}.{name}" for name in ("in_ln", "mlp.0", "mlp.2", "adaLN_modulation.1")]
    layers += [f"{net}.final_layer.linear", f"{net}.final_layer.adaLN_modulation.1"]
    return names + [f"{layer}.{kind}" for layer in layers for kind in ("weight", "bias")]


def release_checkpoint(network: Mar) -> dict[str, torch.Tensor]:
    """Our tensors under the release's names (the renaming checked against `release_keys`)."""
    ours = network.state_dict()
    keys = release_keys(network.config)
    renamed = official_state_dict(dict.fromkeys(keys, torch.zeros(0)))
    assert sorted(renamed) == sorted(ours), set(renamed) ^ set(ours)
    return {key: ours[new].clone() for key, new in zip(keys, renamed, strict=True)}


def test_a_release_checkpoint_loads_its_ema_weights_without_pickled_code(tmp_path):
    trained, ema = random_mar(3), random_mar(4)
    checkpoint = {
        "model": release_checkpoint(trained),
        "model_ema": release_checkpoint(ema),
        "epoch": 799,
        "args": argparse.Namespace(model="mar_large", diffloss_d=8),  # the release saves its arguments
    }
    torch.save(checkpoint, tmp_path / "checkpoint-last.pth")
    loaded = read_network("mar-l", SMALL, tmp_path / "checkpoint-last.pth")
    for key, value in ema.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    torch.save({"model": release_checkpoint(trained), "hook": SMALL}, tmp_path / "unsafe.pth")  # a foreign class
    with pytest.raises(ModelUnavailable, match=r"cannot read .* safely"):
        read_network("mar-l", SMALL, tmp_path / "unsafe.pth")
    wider = MarConfig(**{**SMALL.to_dict(), "width": 64})
    with pytest.raises(ModelUnavailable, match="does not fit mar-l"):
        read_network("mar-l", wider, tmp_path / "checkpoint-last.pth")


def test_the_kl16_decoder_draws_tokens_at_the_vae_scale():
    vae = small_vae()
    tokens = torch.randn(1, SMALL.token_dim, SMALL.grid, SMALL.grid)
    pixels = vae(tokens)
    assert pixels.shape == (1, 3, SMALL.grid * 2, SMALL.grid * 2)
    assert torch.allclose(pixels, vae.decoder(vae.post_quant_conv(tokens / LATENT_SCALE)))


def test_missing_weights_and_wrong_drafts_say_what_to_do(tmp_path):
    with pytest.raises(ModelUnavailable, match="jadechoghari/mar"):
        load_model("mar-l", str(tmp_path))
    with pytest.raises(ModelUnavailable, match="takes no --draft"):
        load_model("tiny", draft="mar-b")
    with pytest.raises(ModelUnavailable, match="mar-b or none, not 'mar-h'"):
        load_model("mar-l", str(tmp_path), draft="mar-h")
    with pytest.raises(ModelUnavailable, match=r"holds none of mar-base\.safetensors"):
        load_model("mar-b", str(tmp_path), draft="none")  # mar-b's only draft is none
    save_file({"encoder.conv_in.weight": torch.zeros(1)}, str(tmp_path / "kl16.safetensors"))
    with pytest.raises(ModelUnavailable, match="not MAR's KL-16 VAE"):
        read_vae("mar-l", tmp_path / "kl16.safetensors")


def test_models_lists_the_mar_family(capsys):
    assert main(["models"]) == 0
    listed = capsys.readouterr().out
    for name in ("mar-b", "mar-l", "mar-h"):
        assert name in listed
    assert "jadechoghari/mar" in listed


def test_the_cost_table_times_passes_heads_and_the_cost_ratio():
    from specviz.models.mar.cost import cost_table, measure

    bigger = MarConfig(**{**SMALL.to_dict(), "width": 64, "depth": 2})
    costs = {
        name: measure(name, torch.device("cpu"), [1, 3], repeats=1, config=config)
        for name, config in (("small", SMALL), ("bigger", bigger))
    }
    assert all(cost.backbone_ms > 0 and cost.head_ms > 0 for rows in costs.values() for cost in rows)
    table = cost_table(costs, torch.device("cpu"))
    assert "| small | 3 |" in table and "| c |" in table
    draft = min(costs, key=lambda name: costs[name][0].token_ms)
    assert f"| {draft} | " in table.split("| c |")[1]


def test_the_app_offers_what_each_mar_can_run():
    from specviz.ui.controls import known_prompts, methods_for

    assert methods_for("mar-b") == ["ar"]  # no draft: the target alone
    assert {"cspd", "cspd-exact", "ar-draft"} <= set(methods_for("mar-l"))
    names, info = known_prompts("mar-h")
    assert len(names) == 1000 and names[207] == "golden retriever" and "ImageNet classes" in info


@torch.inference_mode()
def test_a_session_rolled_back_or_truncated_has_the_conditions_of_a_fresh_one(pair):
    """The continuous protocol's contract: commit keeps a prefix of the last forward, truncate forgets
    committed tokens, and either way the next condition is the one a fresh session fed the same tokens has."""
    tokens = torch.randn(6, SMALL.token_dim)
    session = pair.session("3", 3.0, seed=9).target
    session.forward(tokens[:5])
    session.commit(3)
    session.truncate(2)
    session.forward(tokens[2:4])
    session.commit(1)  # committed: tokens[:3]
    fresh = pair.session("3", 3.0, seed=9).target
    fresh.forward(tokens[:3])
    fresh.commit(3)
    assert session.position == fresh.position == 3
    assert torch.allclose(session.next_condition, fresh.next_condition, atol=1e-6)
    assert session.nfe == 3 and fresh.nfe == 2  # a prefill and one pass per forward, none for a truncation
