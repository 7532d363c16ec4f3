"""LlamaGen (Sun et al. 2024, "Autoregressive Model Beats Diffusion") behind the protocol.

LlamaGen is not in transformers, so the network is written here, with module names that match the
released checkpoints (`c2i_L_256.pt`, `t2i_XL_stage1_256.pt`, ...: a dict whose "model" entry is the
state dict):

- a Llama-style decoder: RMSNorm, attention with one fused `wqkv` projection (grouped KV heads
  allowed), SwiGLU feed-forward (`w1`, `w3`, `w2`), a final RMSNorm and an output head over the
  image codebook (16384 codes);
- the condition comes first in the sequence: class-conditional (c2i) models embed the ImageNet class
  as one token, with one extra row in the table for the null class that guidance uses; text-to-image
  (t2i) models project 120 FLAN-T5-XL feature vectors with a two-layer GELU MLP (`cap_proj`), and
  keep a learned 120-token unconditional caption for guidance;
- 2D rotary embeddings: the head dimension's rotation pairs are split in halves, the first rotated
  by the image row and the second by the column of the token's grid cell. Condition positions get
  the release's all-zero table (cosine and sine 0), which zeroes their queries and keys: their
  values are still read, with equal attention logits. The checkpoints were trained that way, so we
  keep it.

Generation follows the release's sampler: two batch rows when guidance is on (condition, null
condition), raw logits combined as `uncond + scale * (cond - uncond)` before temperature and top-k.
The input at sequence index `cond_tokens + i` is the token of grid cell i and predicts cell i + 1.
The network reads and extends a transformers cache through `update`, a `DynamicCache` or, on the fast
path, a `StaticCache` (whose `update` returns every slot: the session's mask spans them), and takes a
boolean attention mask and position ids (indices into the rotary table), so `CachedSession` crops,
gathers and masks it as it does the transformers families'; t2i caption padding is prompt padding to
the session.

The release cleans a caption (`caption.py`) before T5, as it did in training. The class-conditional
checkpoints are published in the hub repository FoundationVision/LlamaGen, the text-to-image ones in
peizesun/llamagen_t2i (LlamaGen's README). The VQ decoder lives in `vq.py` beside this file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from transformers import DynamicCache, PretrainedConfig

from specviz.core.errors import ModelUnavailable
from specviz.core.settings import SamplingSettings
from specviz.models import hub
from specviz.models.fast.fixed_passes import StaticPool
from specviz.models.imagenet import parse_class
from specviz.models.llamagen.caption import clean_caption
from specviz.models.llamagen.vq import VQDecoder, VQDecoderConfig
from specviz.models.protocol import Geometry
from specviz.models.session import CachedSession, PromptRows, prefilled_session

HUB_ID = "FoundationVision/LlamaGen"  # the class-conditional release
T2I_HUB_ID = "peizesun/llamagen_t2i"  # the text-to-image release
C2I_ENV_VAR = "SPECVIZ_LLAMAGEN_C2I_WEIGHTS"
T2I_ENV_VAR = "SPECVIZ_LLAMAGEN_T2I_WEIGHTS"
T5_ENV_VAR = "SPECVIZ_LLAMAGEN_T5_WEIGHTS"
T5_HUB_ID = "google/flan-t5-xl"
C2I_FILES = ("c2i_L_256.pt", "vq_ds16_c2i.pt")
T2I_FILES = ("t2i_XL_stage1_256.pt", "vq_ds16_t2i.pt")

# the release's sampling defaults (sample_c2i.py / sample_t2i.py), per variant; static so that the app
# can offer them before any weights are loaded
RELEASE_SAMPLING = {
    "c2i": SamplingSettings(temperature=1.0, top_k=2000, top_p=1.0, guidance_scale=4.0),
    "t2i": SamplingSettings(temperature=1.0, top_k=1000, top_p=1.0, guidance_scale=7.5),
}
# attention heads of the released GPT sizes, by width (the only shape a state dict does not show)
HEADS_BY_WIDTH = {768: 12, 1024: 16, 1280: 20, 1536: 24, 2560: 40, 2048: 32, 3200: 32, 4096: 32}


@dataclass(frozen=True)
class LlamaGenConfig:
    dim: int = 1024
    n_layer: int = 24
    n_head: int = 16
    n_kv_head: int | None = None
    multiple_of: int = 256  # the SwiGLU width is rounded up to a multiple of this
    ffn_dim_multiplier: float | None = None
    intermediate_size: int | None = None  # the SwiGLU width read from a checkpoint, overriding the rule
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    model_type: str = "c2i"  # "c2i" (class label) or "t2i" (FLAN-T5 caption features)
    num_classes: int = 1000
    class_dropout_prob: float = 0.1  # > 0: the class table has a null-class row for guidance
    caption_dim: int = 2048
    vocab_size: int = 16384
    cls_token_num: int = 1  # condition tokens: 1 for c2i, 120 for t2i
    block_size: int = 256  # image tokens: grid_size ** 2

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def grid_size(self) -> int:
        size = round(self.block_size**0.5)
        if size * size != self.block_size:
            raise ValueError(f"llamagen: block_size {self.block_size} is not a square grid")
        return size

    @property
    def ffn_hidden(self) -> int:
        if self.intermediate_size is not None:
            return self.intermediate_size
        hidden = int(2 * 4 * self.dim / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return -(-hidden // self.multiple_of) * self.multiple_of

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor], block_size: int, n_head: int | None = None):
        """The architecture of a released checkpoint from its shapes; heads from the width table."""
        vocab, dim = state["tok_embeddings.weight"].shape
        n_layer = 1 + max(int(key.split(".")[1]) for key in state if key.startswith("layers."))
        n_head = n_head or HEADS_BY_WIDTH.get(dim)
        if n_head is None:
            raise ValueError(f"llamagen: unknown width {dim}; known GPT widths are {sorted(HEADS_BY_WIDTH)}")
        head_dim = dim // n_head
        kv_heads = (state["layers.0.attention.wqkv.weight"].shape[0] - dim) // (2 * head_dim)
        hidden = state["layers.0.feed_forward.w1.weight"].shape[0]
        common = dict(dim=dim, n_layer=n_layer, n_head=n_head, n_kv_head=kv_heads, vocab_size=vocab)
        common.update(intermediate_size=hidden, block_size=block_size)
        if "cls_embedding.embedding_table.weight" in state:
            rows = state["cls_embedding.embedding_table.weight"].shape[0]
            return cls(model_type="c2i", num_classes=rows - 1, class_dropout_prob=0.1, cls_token_num=1, **common)
        tokens, caption_dim = state["cls_embedding.uncond_embedding"].shape
        return cls(model_type="t2i", caption_dim=caption_dim, cls_token_num=tokens, **common)


# ---------------------------------------------------------------------------------------------- network


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotary_table_2d(config: LlamaGenConfig) -> torch.Tensor:
    """(cls_token_num + grid**2, head_dim // 2, 2) cosine and sine of every sequence position.

    Pair j < head_dim // 4 rotates by row * freq_j, the others by col * freq_j; condition positions
    get zeros (see the module docstring).
    """
    grid, half = config.grid_size, config.head_dim // 2
    freqs = 1.0 / (config.rope_base ** (torch.arange(0, half, 2)[: half // 2].float() / half))
    angles = torch.outer(torch.arange(grid).float(), freqs)  # (grid, head_dim // 4)
    rows = angles[:, None, :].expand(grid, grid, -1)
    cols = angles[None, :, :].expand(grid, grid, -1)
    grid_angles = torch.cat([rows, cols], dim=-1).flatten(0, 1)  # (grid**2, head_dim // 2)
    table = torch.stack([grid_angles.cos(), grid_angles.sin()], dim=-1)
    return torch.cat([torch.zeros(config.cls_token_num, half, 2), table])


def apply_rotary(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x (B, S, H, D) rotated pairwise (adjacent dims) by table (S, D // 2, 2) or, one per row,
    (B, S, D // 2, 2); computed in float32."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    if table.dim() == 3:
        table = table[None]
    cos, sin = table[:, :, None, :, 0], table[:, :, None, :, 1]
    real, imag = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([real * cos - imag * sin, imag * cos + real * sin], dim=-1)
    return rotated.flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.n_head, self.kv_heads, self.head_dim = config.n_head, config.kv_heads, config.head_dim
        self.wqkv = nn.Linear(config.dim, (config.n_head + 2 * config.kv_heads) * config.head_dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)

    def forward(self, x, rotary, mask, cache: DynamicCache | None, layer: int) -> torch.Tensor:
        batch, length, dim = x.shape
        kv_dim = self.kv_heads * self.head_dim
        q, k, v = self.wqkv(x).split([dim, kv_dim, kv_dim], dim=-1)
        q = apply_rotary(q.view(batch, length, self.n_head, self.head_dim), rotary).transpose(1, 2)
        k = apply_rotary(k.view(batch, length, self.kv_heads, self.head_dim), rotary).transpose(1, 2)
        v = v.view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v, layer)
        groups = self.n_head // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(out.transpose(1, 2).reshape(batch, length, dim))


class FeedForward(nn.Module):
    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.ffn_hidden, bias=False)
        self.w3 = nn.Linear(config.dim, config.ffn_hidden, bias=False)
        self.w2 = nn.Linear(config.ffn_hidden, config.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)

    def forward(self, x, rotary, mask, cache, layer) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rotary, mask, cache, layer)
        return h + self.feed_forward(self.ffn_norm(h))


class LabelEmbedder(nn.Module):
    """Class index -> one token; index `num_classes` is the null class of guidance."""

    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.embedding_table = nn.Embedding(config.num_classes + int(config.class_dropout_prob > 0), config.dim)

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        return self.embedding_table(labels).unsqueeze(1)  # (B, 1, dim)


class CaptionMLP(nn.Module):
    def __init__(self, in_features: int, dim: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, dim, bias=False)
        self.fc2 = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class CaptionEmbedder(nn.Module):
    """T5 features (B, 120, caption_dim) -> condition tokens; `uncond_embedding` is guidance's caption."""

    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.cap_proj = CaptionMLP(config.caption_dim, config.dim)
        self.register_buffer("uncond_embedding", torch.zeros(config.cls_token_num, config.caption_dim))

    def forward(self, captions: torch.Tensor) -> torch.Tensor:
        return self.cap_proj(captions)


class LlamaGenTransformer(nn.Module):
    """The GPT of LlamaGen: `forward(embeds, cache)` -> float32 logits over the codebook."""

    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.config = config
        self.cls_embedding = LabelEmbedder(config) if config.model_type == "c2i" else CaptionEmbedder(config)
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layer))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        # float32 whatever the weights' dtype (not a buffer, so `.to(bfloat16)` leaves it alone)
        self.rotary = rotary_table_2d(config)

    def forward(
        self,
        embeds: torch.Tensor,
        cache: DynamicCache | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """embeds (B, S, dim) appended after the cache's positions. `attention_mask` (B, 1, S, keys)
        boolean (True attends) replaces the causal mask; `position_ids` (B, S), indices into the rotary
        table, replace the sequence indices after the cache (unchecked here: that would cost a sync)."""
        if self.rotary.device != embeds.device:
            self.rotary = self.rotary.to(embeds.device)
        start = 0 if cache is None else cache.get_seq_length()
        batch, length = embeds.shape[:2]
        if position_ids is None:
            if start + length > self.rotary.shape[0]:
                raise ValueError(
                    f"llamagen: position {start + length - 1} is past the sequence of {self.rotary.shape[0]}"
                )
            rotary = self.rotary[start : start + length]
        else:
            rotary = self.rotary[position_ids]
        mask = attention_mask
        if mask is None:
            mask = causal_mask(start, length, self.rotary.device).expand(batch, -1, -1, -1)
        h = embeds
        for index, layer in enumerate(self.layers):
            h = layer(h, rotary, mask, cache, index)
        return self.output(self.norm(h)).float()


def causal_mask(start: int, length: int, device: torch.device) -> torch.Tensor:
    """(1, 1, length, start + length) boolean: queries at start.. see every key up to themselves."""
    queries = torch.arange(start, start + length, device=device)[:, None]
    keys = torch.arange(start + length, device=device)[None, :]
    return (keys <= queries)[None, None]


def condition_mask(key_valid: torch.Tensor) -> torch.Tensor:
    """(B, 1, S, S) boolean mask of an uncached pass from the start whose keys `key_valid` (B, S) marks
    (t2i caption padding hidden): causal, and every query sees itself, so a padded query sees something."""
    length = key_valid.shape[1]
    mask = causal_mask(0, length, key_valid.device) & key_valid.bool()[:, None, None, :]
    return mask | torch.eye(length, dtype=torch.bool, device=key_valid.device)


# ---------------------------------------------------------------------------------------------- adapter


class LlamaGenModel:
    """A LlamaGen GPT and its VQ decoder behind the protocol; t2i models also hold a T5 encoder."""

    reference_generate = None  # not a transformers model: there is no generate() to compare with

    def __init__(
        self,
        gpt: LlamaGenTransformer,
        vq: VQDecoder,
        device: torch.device | str | None = None,
        text_encoder=None,
        tokenizer=None,
        *,
        fast_path: bool = False,
    ):
        config = gpt.config
        if vq.config.codebook_size != config.vocab_size:
            raise ValueError(
                f"llamagen: the GPT predicts {config.vocab_size} codes "
                f"but the VQ codebook has {vq.config.codebook_size}"
            )
        if config.model_type == "t2i" and (text_encoder is None or tokenizer is None):
            raise ValueError("llamagen: a text-to-image model needs the T5 text encoder and its tokenizer")
        self.gpt = gpt.eval().requires_grad_(False)
        self.vq = vq.eval().requires_grad_(False)
        self.text_encoder = text_encoder
        self.tokenizer = tokenizer
        self.device = torch.device(device) if device is not None else gpt.output.weight.device
        self.t2i = config.model_type == "t2i"
        self.name = "llamagen-t2i" if self.t2i else "llamagen-c2i"
        self.default_sampling = RELEASE_SAMPLING[config.model_type]
        grid = config.grid_size
        self.geometry = Geometry.plain_grid(grid, grid, config.vocab_size)
        with torch.no_grad():
            self.token_vectors = vq.quantize.vectors().detach().float()
        self._half = torch.tensor((0.5, 0.5, 0.5))
        # on the fast path, sessions over pooled static caches with fixed-width passes (`fixed_passes`); a
        # transformers `StaticCache` reads only its number of layers from a config
        self.fast_path = fast_path
        layers = PretrainedConfig(num_hidden_layers=config.n_layer)
        self.static = StaticPool.for_model(layers, self.geometry, self.device) if fast_path else None

    @classmethod
    def from_model(
        cls, gpt, vq, device=None, text_encoder=None, tokenizer=None, *, fast_path: bool = False
    ) -> LlamaGenModel:
        return cls(gpt, vq, device, text_encoder, tokenizer, fast_path=fast_path)

    # -- conditions

    def condition(self, prompt: str, guidance_scale: float) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(rows, T, dim) condition embeddings (row 1 the null condition when guidance is on) and,
        for t2i, the (rows, T) mask of caption tokens that may be attended."""
        guided = guidance_scale != 1.0
        embedder = self.gpt.cls_embedding
        if not self.t2i:
            label = parse_class(prompt, self.gpt.config.num_classes, "llamagen-c2i")
            labels = [label, self.gpt.config.num_classes] if guided else [label]
            return embedder(torch.tensor(labels, device=self.device)), None
        features, valid = self.caption_features(prompt)
        if guided:
            features = torch.cat([features, embedder.uncond_embedding[None].to(features.dtype)])
            valid = torch.cat([valid, valid])  # the release masks the null caption like the prompt
        return embedder(features), valid

    def caption_features(self, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(1, T, caption_dim) T5 features of the cleaned caption (twice, as the release's T5 embedder),
        left-padded with zeros as the release does, and the (1, T) mask."""
        tokens = self.tokenizer(
            [clean_caption(clean_caption(prompt))],
            max_length=self.gpt.config.cls_token_num,
            padding="max_length",
            truncation=True,
            return_tensors="pt",
        )
        ids, attention = tokens.input_ids.to(self.device), tokens.attention_mask.to(self.device)
        hidden = self.text_encoder(input_ids=ids, attention_mask=attention).last_hidden_state
        count = int(attention.sum())
        features = torch.zeros_like(hidden)
        features[:, features.shape[1] - count :] = hidden[:, :count]
        valid = torch.zeros_like(attention, dtype=torch.bool)
        valid[:, valid.shape[1] - count :] = True
        return features.to(self.gpt.output.weight.dtype), valid

    # -- protocol

    @torch.inference_mode()
    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        embeds, valid = self.condition(prompt, guidance_scale)
        cache = DynamicCache()
        logits = self.gpt(embeds, cache, attention_mask=None if valid is None else condition_mask(valid))
        return prefilled_session(
            self.geometry,
            cache,
            PromptRows(embeds.shape[1], visible=valid),  # positions count the padding: no shift
            logits[:, -1],
            self._run,
            guidance_scale,
            static=self.static,
            token_vectors=self.token_vectors,
        )

    def _run(self, tokens: torch.Tensor, cache: DynamicCache, mask: torch.Tensor | None, positions) -> torch.Tensor:
        return self.gpt(self.gpt.tok_embeddings(tokens.to(self.device)), cache, mask, positions)

    @torch.inference_mode()
    def decode(self, tokens: list[int] | torch.Tensor) -> Image.Image:
        codes, generated = hub.grid_codes(tokens, self.geometry, self.geometry.vocab_size)
        pixels = self.vq(codes.view(1, self.geometry.rows, self.geometry.cols).to(self.device))[0]  # in [-1, 1]
        return hub.to_image(pixels, self._half, self._half, generated)

    # -- loading

    @classmethod
    def load(
        cls,
        weights: str | os.PathLike | None = None,
        device: str = "cpu",
        variant: str = "c2i",
        fast_path: bool = False,
    ):
        """From a folder holding the GPT and VQ checkpoints (t2i: and a FLAN-T5-XL folder), or the hub."""
        name = f"llamagen-{variant}"
        device = torch.device(device)
        hub.check_device(name, device)
        gpt_path, vq_path = checkpoint_paths(name, weights, variant)
        dtype = hub.default_dtype(device)
        gpt_state, vq_state = hub.read_checkpoint(name, gpt_path), hub.read_checkpoint(name, vq_path)
        try:
            vq_config = VQDecoderConfig.from_state_dict(vq_state)
            block_size = (image_size_from_name(gpt_path.name, 256) // vq_config.downsampling) ** 2
            config = LlamaGenConfig.from_state_dict(gpt_state, block_size)
        except (KeyError, ValueError) as error:
            raise ModelUnavailable(f"{name}: {gpt_path} or {vq_path} is not a LlamaGen checkpoint ({error})") from error
        hub.check_gpu_memory(name, lambda: LlamaGenTransformer(config), device)
        try:
            gpt = build_gpt(config, gpt_state)
            vq = VQDecoder(vq_config)
            vq.load_released(vq_state)
            # the VQ decoder stays float32: it is small and bf16 costs colour precision
            gpt, vq = gpt.to(device, dtype), vq.to(device)
        except (torch.OutOfMemoryError, MemoryError) as error:
            raise hub.memory_unavailable(name, device, error) from error
        except (KeyError, RuntimeError) as error:
            raise ModelUnavailable(
                f"{name}: {gpt_path} or {vq_path} does not match LlamaGen's architecture ({hub.one_line(error)})"
            ) from error
        text_encoder = tokenizer = None
        if variant == "t2i":
            text_encoder, tokenizer = load_t5(name, weights, device, dtype)
        return cls(gpt, vq, device, text_encoder, tokenizer, fast_path=fast_path)


def build_gpt(config: LlamaGenConfig, state: dict[str, torch.Tensor]) -> LlamaGenTransformer:
    """A GPT with a released state dict loaded strictly (the stale `freqs_cis` some releases hold aside)."""
    gpt = LlamaGenTransformer(config)
    state = {key: value for key, value in state.items() if key != "freqs_cis"}
    gpt.load_state_dict(state, strict=True)
    return gpt


def image_size_from_name(filename: str, default: int) -> int:
    """256 for c2i_L_256.pt, 512 for t2i_XL_stage2_512.pt; `default` when the name does not say."""
    match = re.search(r"_(\d+)\.(pt|pth|safetensors)$", filename)
    return int(match.group(1)) if match else default


def checkpoint_paths(name: str, weights, variant: str) -> tuple[Path, Path]:
    """The GPT and VQ checkpoint files: in `weights` (a folder, or "GPT.pt,VQ.pt"), the folder named by
    the variant's environment variable, or downloaded from the release's hub repository."""
    gpt_file, vq_file = C2I_FILES if variant == "c2i" else T2I_FILES
    env_var = C2I_ENV_VAR if variant == "c2i" else T2I_ENV_VAR
    release = release_repository(variant)
    source = str(weights) if weights else os.environ.get(env_var)
    hint = (
        f"download {gpt_file} and {vq_file} from https://huggingface.co/{release} where you have network and "
        f"pass their folder with --weights PATH (or --weights GPT.pt,VQ.pt), or set {env_var}"
    )
    if source and "," in source:
        paths = tuple(Path(part.strip()).expanduser() for part in source.split(",", 1))
    elif source and hub.looks_like_path(source):
        folder = Path(source).expanduser()
        gpt_candidates = [folder / gpt_file, *sorted(folder.glob(f"{variant}_*.pt"))]
        vq_candidates = [folder / vq_file, *sorted(folder.glob("vq_*.pt"))]
        paths = (
            next((p for p in gpt_candidates if p.is_file()), folder / gpt_file),
            next((p for p in vq_candidates if p.is_file()), folder / vq_file),
        )
    else:
        repo = source or release
        hub.require_hub(name, repo, (gpt_file, vq_file), hint)
        try:
            from huggingface_hub import hf_hub_download

            return Path(hf_hub_download(repo, gpt_file)), Path(hf_hub_download(repo, vq_file))
        except Exception as error:
            raise ModelUnavailable(
                f"{name}: cannot fetch from hub id {repo} ({str(error).splitlines()[0]}); {hint}"
            ) from error
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ModelUnavailable(f"{name}: missing {', '.join(missing)}; {hint}")
    return paths


def release_repository(variant: str) -> str:
    """The hub repository the release publishes the variant's checkpoints in (LlamaGen's README)."""
    return HUB_ID if variant == "c2i" else T2I_HUB_ID


def offline_reason(variant: str) -> str | None:
    """None when the variant's checkpoints are in its environment variable's folder or the hub cache."""
    gpt_file, vq_file = C2I_FILES if variant == "c2i" else T2I_FILES
    env_var = C2I_ENV_VAR if variant == "c2i" else T2I_ENV_VAR
    release = release_repository(variant)
    local = os.environ.get(env_var)
    if local:
        folder = Path(local).expanduser()
        if (folder / gpt_file).is_file() and (folder / vq_file).is_file():
            return None
        return f"{env_var}={local} lacks {gpt_file} or {vq_file}"
    if hub.in_hub_cache(release, gpt_file, vq_file):
        return None
    return f"needs {gpt_file} and {vq_file} of {release}: pass --weights with their folder, or set {env_var}"


def load_t5(name: str, weights, device: torch.device, dtype: torch.dtype):
    """FLAN-T5-XL encoder and tokenizer: `t5/` or `flan-t5-xl/` beside the checkpoints, the folder named
    by SPECVIZ_LLAMAGEN_T5_WEIGHTS, or the hub id google/flan-t5-xl (cache or network)."""
    from transformers import AutoTokenizer, T5EncoderModel

    source = os.environ.get(T5_ENV_VAR)
    if not source and weights and "," not in str(weights):
        for sub in ("t5", "flan-t5-xl"):
            if (Path(weights).expanduser() / sub / "config.json").is_file():
                source = str(Path(weights).expanduser() / sub)
    source = source or T5_HUB_ID
    if source == T5_HUB_ID:
        hint = f"put {T5_HUB_ID} in a t5/ folder beside the checkpoints or set {T5_ENV_VAR}"
        hub.require_hub(name, T5_HUB_ID, ("config.json",), hint)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        encoder = T5EncoderModel.from_pretrained(source, dtype=dtype).to(device)
    except (torch.OutOfMemoryError, MemoryError) as error:
        raise hub.memory_unavailable(name, device, error) from error
    except Exception as error:  # whatever transformers, safetensors or the hub raise: one line
        raise ModelUnavailable(
            f"{name}: cannot load the FLAN-T5-XL text encoder from {source} ({hub.first_line(error)}); put "
            f"{T5_HUB_ID} in a t5/ folder beside the checkpoints or set {T5_ENV_VAR}"
        ) from error
    return encoder.eval().requires_grad_(False), tokenizer
