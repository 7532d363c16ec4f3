"""`tiny-continuous` behind the continuous protocol: the embedded target and draft, one prompt, one grid."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import DynamicCache

from specviz.models.continuous import ContinuousSession, PairSession
from specviz.models.diffusion_head import DiffusionHead
from specviz.models.errors import ModelUnavailable
from specviz.models.protocol import Geometry
from specviz.models.settings import SamplingSettings, SettingsError
from specviz.models.tiny.adapter import BLANK
from specviz.models.tiny.text import shared_text_encoder
from specviz.models.tiny_continuous.network import ContinuousConfig, ContinuousTextToImage
from specviz.models.tiny_continuous.projection import PatchProjection

ASSETS = Path(__file__).resolve().parents[3] / "assets" / "tiny-continuous"
WEIGHT_FILES = ("target.json", "target.safetensors", "draft.json", "draft.safetensors", "projection.safetensors")
DEFAULT_SAMPLING = SamplingSettings(temperature=1.0, top_k=None, top_p=1.0, guidance_scale=2.0)
MAX_CONFIG_BYTES = 1024 * 1024
CONFIG_LIMITS = {"hidden_size": 2048, "num_layers": 48, "intermediate_size": 8192, "head_width": 4096}


def _unusable(folder: Path, why: str) -> ModelUnavailable:
    return ModelUnavailable(
        f"tiny-continuous: {why} (in {folder}); reinstall the project or retrain with "
        "`python -m specviz.models.tiny_continuous.train --role target` and `--role draft`"
    )


def read_config(folder: Path, role: str) -> tuple[ContinuousConfig, dict]:
    """A role's architecture and its whole summary, refused with a clear message when malformed."""
    path = folder / f"{role}.json"
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise _unusable(folder, f"{role}.json is larger than {MAX_CONFIG_BYTES} bytes")
        summary = json.loads(path.read_text())
        config = ContinuousConfig(**summary["model"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise _unusable(folder, f"{role}.json is not a valid summary ({error})") from None
    for field, limit in CONFIG_LIMITS.items():
        value = getattr(config, field)
        if not isinstance(value, int) or not 0 < value <= limit:
            raise _unusable(folder, f"{role}.json: {field} must be an integer from 1 to {limit}")
    return config, summary


def read_sampling(folder: Path = ASSETS) -> SamplingSettings:
    """The pair's default sampling, written into target.json by measurement (else the built-in default)."""
    try:
        _, summary = read_config(folder, "target")
        return SamplingSettings(**summary.get("sampling", DEFAULT_SAMPLING.to_dict()))
    except (ModelUnavailable, TypeError, SettingsError):
        return DEFAULT_SAMPLING


class CachedContinuousSession(ContinuousSession):
    """One network of the pair over a transformers KV cache: row 0 the prompt, row 1 (with guidance)
    the unconditional prefix; both rows see the same generated tokens."""

    def __init__(self, network: ContinuousTextToImage, head: DiffusionHead, geometry: Geometry, text, guidance: float):
        prefix = network.prefix(text)
        if guidance != 1.0:
            prefix = torch.cat([prefix, network.prefix(None, 1)])
        self.network, self.prefix_len = network, prefix.shape[1]
        self.cache = DynamicCache(config=network.backbone.config)
        hidden = network.backbone(inputs_embeds=prefix, past_key_values=self.cache, use_cache=True).last_hidden_state
        super().__init__(head, geometry, network.config.token_dim, guidance, hidden[:, -1][None])

    def _run(self, vectors: torch.Tensor, length: int) -> torch.Tensor:
        rows = self.next_condition.shape[1]
        embeds = self.network.token_in(vectors.to(self.network.token_in.weight.dtype))[None].expand(rows, -1, -1)
        hidden = self.network.backbone(inputs_embeds=embeds, past_key_values=self.cache, use_cache=True)
        return hidden.last_hidden_state.transpose(0, 1)

    def _crop(self, length: int) -> None:
        surplus = self.cache.get_seq_length() - (self.prefix_len + length)
        if surplus > 0:
            self.cache.crop(-surplus)  # transformers 5 crops by a negative count


class TinyContinuousModel:
    """The embedded continuous pair (`python -m specviz.models.tiny_continuous.train` reproduces it)."""

    name = "tiny-continuous"
    reference_generate = None

    def __init__(
        self,
        target: ContinuousTextToImage,
        draft: ContinuousTextToImage,
        projection: PatchProjection,
        device: torch.device,
        default_sampling: SamplingSettings = DEFAULT_SAMPLING,
    ):
        self.target = target.to(device).eval().requires_grad_(False)
        self.draft = draft.to(device).eval().requires_grad_(False)
        self.projection = PatchProjection(projection.mean.to(device), projection.basis.to(device), projection.scale)
        self.device, self.default_sampling = device, default_sampling
        config = target.config
        self.token_dim = config.token_dim
        self.geometry = Geometry.plain_grid(config.rows, config.cols, 1)
        self.target_head = DiffusionHead(target.denoiser, config.sampling_steps)
        self.draft_head = DiffusionHead(draft.denoiser, draft.config.sampling_steps)

    @classmethod
    def load(cls, weights: str | Path | None = None, device: str = "cpu") -> TinyContinuousModel:
        folder = Path(weights) if weights else ASSETS
        missing = [name for name in WEIGHT_FILES if not (folder / name).is_file()]
        if missing:
            raise _unusable(folder, f"{', '.join(missing)} missing")
        networks = {}
        for role in ("target", "draft"):
            config, _ = read_config(folder, role)
            network = ContinuousTextToImage(config)
            try:
                state = {name: t.float() for name, t in load_file(str(folder / f"{role}.safetensors")).items()}
                network.load_state_dict(state)
            except (RuntimeError, OSError, ValueError) as error:
                message = str(error).splitlines()[0] if str(error) else type(error).__name__
                raise _unusable(folder, f"{role}.safetensors does not fit {role}.json: {message}") from None
            networks[role] = network
        target, draft = networks["target"].config, networks["draft"].config
        if (target.token_dim, target.rows, target.cols, target.sampling_steps) != (
            draft.token_dim,
            draft.rows,
            draft.cols,
            draft.sampling_steps,
        ):
            raise _unusable(folder, "target and draft must share token size, grid and denoising steps")
        try:
            projection = PatchProjection.from_state(load_file(str(folder / "projection.safetensors")))
        except (RuntimeError, OSError, KeyError, IndexError) as error:
            raise _unusable(folder, f"projection.safetensors is not readable: {error}") from None
        if projection.basis.shape != (27, target.token_dim):
            raise _unusable(folder, f"projection.safetensors needs a (27, {target.token_dim}) basis")
        return cls(networks["target"], networks["draft"], projection, torch.device(device), read_sampling(folder))

    @torch.inference_mode()
    def session(self, prompt: str, guidance_scale: float, seed: int = 0) -> PairSession:
        """Both models on one prompt; the grid is drawn in raster order, whatever the seed."""
        text = shared_text_encoder()([prompt]).to(self.device)
        return PairSession(
            CachedContinuousSession(self.target, self.target_head, self.geometry, text, guidance_scale),
            CachedContinuousSession(self.draft, self.draft_head, self.geometry, text, guidance_scale),
        )

    def decode(self, vectors: torch.Tensor | list) -> Image.Image:
        """Pixels of the first k tokens (k, d); cells not generated yet are grey."""
        rows, cols = self.geometry.rows, self.geometry.cols
        vectors = torch.as_tensor(vectors, dtype=torch.float32, device=self.device).reshape(-1, self.token_dim)
        if len(vectors) > rows * cols:
            raise ValueError(f"{len(vectors)} tokens for a grid of {rows * cols} cells")
        full = torch.zeros(rows * cols, self.token_dim, device=self.device)
        full[: len(vectors)] = vectors
        pixels = self.projection.decode(full[None], rows, cols)[0]
        generated = (torch.arange(rows * cols, device=self.device) < len(vectors)).view(rows, cols)
        generated = generated.repeat_interleave(3, 0).repeat_interleave(3, 1)
        pixels[~generated] = BLANK
        return Image.fromarray(pixels.cpu().numpy())
