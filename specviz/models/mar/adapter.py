"""MAR-B, MAR-L and MAR-H behind the continuous protocol: a target, an optional smaller draft, one order.

How MAR generates, and what specviz runs. MAR fills the 16 x 16 grid in a random order drawn per
image, in `num_iter` steps of a cosine schedule; every token of a step is sampled from the same
context (the tokens of earlier steps), with bidirectional attention. With `num_iter` = 256, the
setting of the release's evaluation and of the CSpD authors' demo, the schedule yields exactly one
token per step: MAR is then an AR model over a random order, and that is the model specviz runs
(`ar` is MAR with num_iter 256, token for token). The order comes from the run's seed, and draft and
target share it.

How a target pass verifies gamma drafts, exactly. The condition of draft j must see the tokens before
it in the order, drafts 1..j-1 included. One pass runs gamma rows of the same grid, row j with the
first (position + j) tokens of the order known, and reads each row's condition at its own cell: one
batched pass, and each draft's condition is the one sequential MAR would have given it.

The CSpD authors' code (`MarkXCloud/CSpD`) departs from this: the target predicts all drafts of a
block from one context in which every draft is still masked (so draft j's target density ignores
drafts 1..j-1 while the draft's did not), judges each token alone with no cut at the first rejection,
and keeps every later draft. That makes the target's "distribution" a different model's; specviz
does not reproduce it.

Guidance follows MAR's linear schedule (the paper: "classifier-free guidance the same way as MAR
does"): the token at position k (0-based, one per step) is sampled with scale 1 + (w - 1) (k + 1) / 256,
w the guidance setting (the last token's is the one before's), in draft and target alike and wherever
a method evaluates a density at k. (The CSpD code gives every draft of a block the scale of the
block's last; its demo sidesteps that with a constant schedule.) The release's settings: w 2.9 for
MAR-B, 3.0 for MAR-L, 3.2 for MAR-H, temperature 1, 100 denoising steps. The last denoising step
keeps its noise, as for every head in specviz (see `specviz.models.networks.diffusion_head`); its standard
deviation is about 0.006 at 100 steps (tokens have a standard deviation near 1), invisible in the image.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from PIL import Image

from specviz.core.errors import ModelUnavailable
from specviz.core.settings import SamplingSettings
from specviz.models import hub
from specviz.models.continuous import ContinuousSession, PairSession
from specviz.models.imagenet import parse_class
from specviz.models.mar.network import RELEASES, Mar, MarConfig, official_state_dict
from specviz.models.mar.vae import KLDecoder
from specviz.models.networks.diffusion_head import DiffusionHead
from specviz.models.protocol import IMAGE_CELL, Geometry

HUB_ID = "jadechoghari/mar"  # the release's weights converted to safetensors
HUB_FILES = {"mar-b": "mar-base.safetensors", "mar-l": "mar-large.safetensors", "mar-h": "mar-huge.safetensors"}
RELEASE_FOLDERS = {"mar-b": "mar_base", "mar-l": "mar_large", "mar-h": "mar_huge"}  # util/download.py's layout
VAE_FILES = ("kl16.safetensors", "vae/kl16.ckpt", "kl16.ckpt")
ENV_VAR = "SPECVIZ_MAR_WEIGHTS"
DRAFTS = {"mar-b": None, "mar-l": "mar-b", "mar-h": "mar-b"}  # the paper's pairs (MAR-L may also draft MAR-H)
# the release's evaluation settings (README of LTH14/mar), the linear schedule's final scale
RELEASE_GUIDANCE = {"mar-b": 2.9, "mar-l": 3.0, "mar-h": 3.2}


def release_sampling(name: str) -> SamplingSettings:
    return SamplingSettings(temperature=1.0, top_k=None, top_p=1.0, guidance_scale=RELEASE_GUIDANCE[name])


HINT = (
    f"download {', '.join(HUB_FILES.values())} and kl16.safetensors from https://huggingface.co/{HUB_ID} (or the "
    "release's checkpoint-last.pth files and kl16.ckpt with LTH14/mar's util/download.py) where you have network "
    f"and pass their folder with --weights PATH, or set {ENV_VAR}"
)


class MarSession(ContinuousSession):
    """One MAR network generating in `order` (a permutation of the raster cells). MAR has no cache:
    every pass runs the whole grid, and a truncation only forgets tokens."""

    def __init__(self, network: Mar, head: DiffusionHead, label: int, guidance: float, order: torch.Tensor):
        config = network.config
        self.network, self.order = network, order
        self.rank = torch.empty_like(order)
        self.rank[order] = torch.arange(len(order), device=order.device)  # position of each cell
        self.classes = network.class_embeddings(label, guidance != 1.0)
        layout = (IMAGE_CELL,) * config.seq_len
        geometry = Geometry(config.grid, config.grid, 1, layout, tuple(order.tolist()))
        first = self._pass(torch.zeros(0, config.token_dim, device=order.device), [0])
        super().__init__(head, geometry, config.token_dim, guidance, first)

    def _pass(self, tokens: torch.Tensor, known: list[int]) -> torch.Tensor:
        """(n, G, H) conditions: row i for position known[i], with the first known[i] tokens of the order
        (`tokens`, in generation order) given and the rest masked; one batched backbone pass."""
        config, rows = self.network.config, self.classes.shape[0]
        grid = torch.zeros(config.seq_len, config.token_dim, device=self.order.device)
        grid[self.order[: len(tokens)]] = tokens.to(grid.dtype)
        counts = torch.tensor(known, device=self.order.device)
        visible = (self.rank[None] < counts[:, None]).repeat_interleave(rows, 0)  # (n G, L)
        batch = len(known) * rows
        z = self.network.conditions(grid[None].expand(batch, -1, -1), visible, self.classes.repeat(len(known), 1))
        cells = self.order[counts.clamp(max=config.seq_len - 1)].repeat_interleave(rows)
        return z[torch.arange(batch, device=z.device), cells].float().view(len(known), rows, -1)

    def guidance_at(self, positions: torch.Tensor) -> torch.Tensor:
        """MAR's linear schedule: 1 + (w - 1) (L - m) / L, m the tokens still masked after the k-th
        token's step, L - k - 1, except at the last step, where MAR's count stops at 1."""
        length = self.geometry.seq_len
        known = (positions.to(torch.float32) + 1).clamp(max=length - 1) / length
        return (1 + (self.guidance_scale - 1) * known).to(self.order.device)

    def _run(self, vectors: torch.Tensor, length: int) -> torch.Tensor:
        tokens = torch.cat([torch.stack(self.vectors[:length]), vectors]) if length else vectors
        return self._pass(tokens, [length + i + 1 for i in range(len(vectors))])

    def _crop(self, length: int) -> None:
        """Nothing cached: the committed tokens are all MAR keeps."""


class MarPair:
    """A MAR target with an optional smaller MAR draft (same tokenizer, same order) and the KL-16 decoder."""

    reference_generate = None  # MAR is not a transformers model: its own loop is `ar`

    def __init__(
        self,
        name: str,
        target: Mar,
        draft: Mar | None,
        vae: KLDecoder,
        device: torch.device,
        default_sampling: SamplingSettings | None = None,
    ):
        self.name, self.device = name, device
        self.default_sampling = default_sampling or release_sampling(name)
        backbone_dtype = hub.default_dtype(device)
        self.target, self.draft = (self._prepare(network, backbone_dtype) for network in (target, draft))
        self.vae = vae.to(device).eval().requires_grad_(False)
        config = target.config
        self.token_dim, self.num_classes = config.token_dim, config.num_classes
        self.geometry = Geometry.plain_grid(config.grid, config.grid, 1)
        self.target_head = DiffusionHead(target.denoiser, config.sampling_steps, x0_limit=math.inf)
        self.draft_head = DiffusionHead(draft.denoiser, config.sampling_steps, x0_limit=math.inf) if draft else None

    def _prepare(self, network: Mar | None, dtype: torch.dtype) -> Mar | None:
        """On the device, the backbone in bf16 on CUDA; the diffusion head stays float32 (densities)."""
        if network is None:
            return None
        network = network.to(self.device).eval().requires_grad_(False)
        for name, parameter in network.named_parameters():
            if not name.startswith("denoiser."):
                parameter.data = parameter.data.to(dtype)
        return network

    @property
    def has_draft(self) -> bool:
        return self.draft is not None

    @torch.inference_mode()
    def session(self, prompt: str, guidance_scale: float, seed: int = 0) -> PairSession:
        """Target and draft on one ImageNet class, generating in the order the seed draws."""
        label = parse_class(prompt, self.num_classes, self.name)
        seq_len = self.geometry.seq_len
        order = torch.randperm(seq_len, generator=torch.Generator().manual_seed(seed)).to(self.device)
        target = MarSession(self.target, self.target_head, label, guidance_scale, order)
        draft = MarSession(self.draft, self.draft_head, label, guidance_scale, order) if self.draft else None
        return PairSession(target, draft)

    @torch.inference_mode()
    def decode(self, vectors: torch.Tensor | list, order: list[int] | tuple[int, ...] | None = None) -> Image.Image:
        """Pixels of the first k tokens (k, d) in generation order (`order`: their cells; raster when
        None); cells not generated yet are grey."""
        grid, dim = self.geometry.rows, self.token_dim
        vectors = torch.as_tensor(vectors, dtype=torch.float32, device=self.device).reshape(-1, dim)
        if len(vectors) > grid * grid:
            raise ValueError(f"{len(vectors)} tokens for a grid of {grid * grid} cells")
        cells = torch.as_tensor(list(order) if order is not None else range(grid * grid), device=self.device)
        latents = torch.zeros(grid * grid, dim, device=self.device)
        latents[cells[: len(vectors)]] = vectors
        generated = torch.zeros(grid * grid, dtype=torch.bool)
        generated[cells[: len(vectors)].cpu()] = True
        pixels = self.vae(latents.T.reshape(1, dim, grid, grid))[0]
        half = torch.full((3,), 0.5)
        return hub.to_image(pixels, half, half, generated.view(grid, grid))

    @classmethod
    def load(cls, name: str, weights: str | None = None, device: str = "cpu", draft: str | None = "default") -> MarPair:
        """`name` from the release's weights, with `draft` (a smaller MAR, None for none; by default the
        paper's: MAR-B for MAR-L and MAR-H)."""
        device = torch.device(device)
        draft = DRAFTS[name] if draft == "default" else draft
        if draft is not None and (draft not in RELEASES or draft == name):
            raise ModelUnavailable(f"{name}: the draft must be another MAR ({', '.join(RELEASES)}), not {draft!r}")
        hub.check_device(name, device)
        configs = [RELEASES[name]] + ([RELEASES[draft]] if draft else [])
        hub.check_gpu_memory(name, lambda: torch.nn.ModuleList(Mar(config) for config in configs), device)
        source = hub.resolve_weights(weights, ENV_VAR, HUB_ID)
        target = read_network(name, RELEASES[name], weight_file(name, source))
        draft_network = read_network(draft, RELEASES[draft], weight_file(draft, source)) if draft else None
        return cls(name, target, draft_network, read_vae(name, vae_file(name, source)), device)


def read_network(name: str, config: MarConfig, path: Path) -> Mar:
    """A MAR network from a release checkpoint (its EMA weights where it holds them) or safetensors file."""
    state = official_state_dict(hub.read_checkpoint(name, path, prefer=("model_ema", "model", "state_dict")))
    network = Mar(config)
    try:
        network.load_state_dict({key: value.float() for key, value in state.items()})
    except RuntimeError as error:
        first = str(error).splitlines()[1].strip() if "\n" in str(error) else str(error)
        raise ModelUnavailable(f"{name}: {path} does not fit {name}'s architecture ({first[:300]})") from None
    return network


def read_vae(name: str, path: Path) -> KLDecoder:
    """The KL-16 decoder from MAR's `kl16.ckpt` or `kl16.safetensors` (latent-diffusion key names)."""
    vae = KLDecoder()
    try:
        vae.load_state_dict(KLDecoder.decoder_state(hub.read_checkpoint(name, path)))
    except RuntimeError as error:
        first = str(error).splitlines()[1].strip() if "\n" in str(error) else str(error)
        raise ModelUnavailable(
            f"{name}: {path} is not MAR's KL-16 VAE in its release's key names ({first[:300]})"
        ) from None
    return vae


def _find(name: str, source: str, candidates: list[str], hub_file: str) -> Path:
    """The first candidate file in the folder `source`, or `hub_file` of hub repository `source`."""
    if hub.looks_like_path(source):
        folder = Path(source).expanduser()
        for candidate in candidates:
            if (folder / candidate).is_file():
                return folder / candidate
        raise ModelUnavailable(f"{name}: {folder} holds none of {', '.join(candidates)}; {HINT}")
    hub.require_hub(name, source, (hub_file,), HINT)
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(source, hub_file))
    except Exception as error:
        raise ModelUnavailable(f"{name}: cannot fetch {hub_file} from {source} ({error}); {HINT}") from error


def weight_file(name: str, source: str) -> Path:
    folder = RELEASE_FOLDERS[name]
    candidates = [HUB_FILES[name], f"{folder}/checkpoint-last.pth", f"mar/{folder}/checkpoint-last.pth"]
    return _find(name, source, candidates, HUB_FILES[name])


def vae_file(name: str, source: str) -> Path:
    return _find(name, source, list(VAE_FILES), VAE_FILES[0])


def offline_reason(name: str) -> str | None:
    """None when `name`'s weights (and its default draft's, and the VAE) are in SPECVIZ_MAR_WEIGHTS's
    folder or the hub cache, else why not."""
    needed = [n for n in (name, DRAFTS[name]) if n]
    local = os.environ.get(ENV_VAR)
    try:
        if local:
            for n in needed:
                weight_file(n, local)
            vae_file(name, local)
            return None
    except ModelUnavailable:
        return f"{ENV_VAR}={local} lacks the weights of {' and '.join(needed)} or kl16"
    if hub.in_hub_cache(HUB_ID, *(HUB_FILES[n] for n in needed), VAE_FILES[0]):
        return None
    return f"needs {' and '.join(HUB_FILES[n] for n in needed)} and kl16.safetensors of {HUB_ID}: {HINT}"
