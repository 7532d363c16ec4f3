"""`tiny-continuous` behind the continuous protocol: the embedded target and draft, one prompt, one grid."""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image
from transformers import DynamicCache

from specviz.core.errors import ModelUnavailable
from specviz.core.settings import SamplingSettings, SettingsError
from specviz.models.continuous import ContinuousSession, PairSession
from specviz.models.networks.diffusion_head import DiffusionHead
from specviz.models.protocol import BLANK, Geometry
from specviz.models.session import cache_keyword
from specviz.models.tiny.text import TEXT_DIM, shared_text_encoder
from specviz.models.tiny.tokenizer import PATCH
from specviz.models.tiny_continuous.network import ContinuousConfig, ContinuousTextToImage
from specviz.models.tiny_continuous.projection import PatchProjection
from specviz.models.weights import NOT_IN_CHECKOUT, WeightsError, check_numbers, first_line, read_json, read_tensors

ASSETS = Path(__file__).resolve().parents[3] / "assets" / "tiny-continuous"
WEIGHT_FILES = ("target.json", "target.safetensors", "draft.json", "draft.safetensors", "projection.safetensors")
DEFAULT_SAMPLING = SamplingSettings(temperature=1.0, top_k=None, top_p=1.0, guidance_scale=2.0)
CONFIG_BOUNDS = {  # checked before anything is built from a summary's "model" section
    "vocab_size": (int, 1, 65536),
    "rows": (int, 1, 64),
    "cols": (int, 1, 64),
    "hidden_size": (int, 8, 2048),
    "num_layers": (int, 1, 48),
    "num_heads": (int, 1, 64),
    "intermediate_size": (int, 8, 8192),
    "prefix_len": (int, 1, 64),
    "text_dim": (int, TEXT_DIM, TEXT_DIM),
    "dropout": (float, 0.0, 1.0),
    "token_dim": (int, 1, PATCH * PATCH * 3),
    "head_width": (int, 1, 4096),
    "head_blocks": (int, 1, 64),
    "sampling_steps": (int, 1, 1000),
}


def _unusable(folder: Path, why: str) -> ModelUnavailable:
    return ModelUnavailable(
        f"tiny-continuous: {why} (in {folder}); reinstall the project or retrain with "
        "`python -m specviz.training.tiny_continuous --role target` and `--role draft`"
    )


def read_config(folder: Path, role: str) -> tuple[ContinuousConfig, dict]:
    """A role's architecture and its whole summary, refused with a clear message when malformed."""
    try:
        summary = read_json(folder / f"{role}.json")
        model = summary.get("model") if isinstance(summary, dict) else None
        if not isinstance(model, dict):
            raise WeightsError(f"{role}.json has no 'model' section")
        check_numbers(model, CONFIG_BOUNDS, ContinuousConfig, f"{role}.json: model.")
        config = ContinuousConfig(**model)
    except WeightsError as error:
        raise _unusable(folder, str(error)) from None
    except TypeError as error:
        raise _unusable(folder, f"{role}.json is not a valid summary ({first_line(error)})") from None
    if config.hidden_size % config.num_heads:
        raise _unusable(folder, f"{role}.json: model.hidden_size must divide by model.num_heads")
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
        cache = cache_keyword(network.backbone, self.cache)
        hidden = network.backbone(inputs_embeds=prefix, **cache, use_cache=True).last_hidden_state
        super().__init__(head, geometry, network.config.token_dim, guidance, hidden[:, -1][None])

    def _run(self, vectors: torch.Tensor, length: int) -> torch.Tensor:
        rows = self.next_condition.shape[1]
        embeds = self.network.token_in(vectors.to(self.network.token_in.weight.dtype))[None].expand(rows, -1, -1)
        hidden = self.network.backbone(
            inputs_embeds=embeds, **cache_keyword(self.network.backbone, self.cache), use_cache=True
        )
        return hidden.last_hidden_state.transpose(0, 1)

    def _crop(self, length: int) -> None:
        surplus = self.cache.get_seq_length() - (self.prefix_len + length)
        if surplus > 0:
            self.cache.crop(-surplus)  # transformers 5 crops by a negative count


class TinyContinuousModel:
    """The embedded continuous pair (`python -m specviz.training.tiny_continuous` reproduces it)."""

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
        if missing and folder == ASSETS:
            raise ModelUnavailable(f"tiny-continuous: {', '.join(missing)} missing in {folder}; {NOT_IN_CHECKOUT}")
        if missing:
            raise _unusable(folder, f"{', '.join(missing)} missing")
        networks = {}
        for role in ("target", "draft"):
            config, _ = read_config(folder, role)
            network = ContinuousTextToImage(config)
            try:
                state = {name: t.float() for name, t in read_tensors(folder / f"{role}.safetensors").items()}
            except WeightsError as error:
                raise _unusable(folder, str(error)) from None
            try:
                network.load_state_dict(state)
            except RuntimeError as error:
                raise _unusable(folder, f"{role}.safetensors does not fit {role}.json: {first_line(error)}") from None
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
            projection = PatchProjection.from_state(read_tensors(folder / "projection.safetensors"))
        except WeightsError as error:
            raise _unusable(folder, str(error)) from None
        except (KeyError, IndexError) as error:
            raise _unusable(folder, f"projection.safetensors lacks a tensor: {first_line(error)}") from None
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
