"""The embedded text-to-emoji models behind the protocol: MiniLM prompt prefix, Llama over 1024 patch codes,
16x16 grid. Two weights folders ship: `tiny` (one design per emoji, learnt by heart: recognisable and nearly
certain) and `tiny-uncertain` (four designs per emoji and textured tokens: uncertain as real models are)."""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image
from transformers import DynamicCache

from specviz.core.errors import ModelUnavailable
from specviz.core.settings import SamplingSettings, SettingsError
from specviz.models.fast.fixed_passes import StaticPool
from specviz.models.networks.draft_head import HEAD_FILES, DraftHead
from specviz.models.protocol import BLANK, Geometry
from specviz.models.session import CachedSession, PromptRows, cache_keyword, prefilled_session, transformers_mask
from specviz.models.tiny.network import TinyConfig, TinyTextToImage
from specviz.models.tiny.text import TEXT_DIM, shared_text_encoder
from specviz.models.tiny.tokenizer import PatchTokenizer
from specviz.models.weights import NOT_IN_CHECKOUT, WeightsError, check_numbers, first_line, read_json, read_tensors

ASSETS = Path(__file__).resolve().parents[3] / "assets" / "tiny"
SHIPPED = {"tiny": ASSETS, "tiny-uncertain": ASSETS.with_name("tiny-uncertain")}  # model name -> its folder
WEIGHT_FILES = ("config.json", "model.safetensors", "codebook.safetensors")
# used when a weights folder's config.json names no sampling defaults
DEFAULT_SAMPLING = SamplingSettings(temperature=1.0, top_k=None, top_p=1.0, guidance_scale=1.5)


MAX_PARAMETERS = 200_000_000  # far above tiny's; refuses a config that would allocate gigabytes
CONFIG_BOUNDS = {
    "vocab_size": (int, 2, 65536),
    "rows": (int, 1, 64),
    "cols": (int, 1, 64),
    "hidden_size": (int, 8, 4096),
    "num_layers": (int, 1, 64),
    "num_heads": (int, 1, 64),
    "intermediate_size": (int, 8, 16384),
    "prefix_len": (int, 1, 64),
    "dropout": (float, 0.0, 1.0),
}


def _unusable(folder: Path, why: str) -> ModelUnavailable:
    return ModelUnavailable(
        f"tiny: the weights in {folder} cannot be used ({why}); reinstall the project or retrain with "
        "`python -m specviz.training.tiny`"
    )


def read_summary(folder: Path) -> tuple[TinyConfig, SamplingSettings]:
    """The network configuration and default sampling of a weights folder, checked before anything is
    allocated: a configuration that would need gigabytes is refused, not built."""
    try:
        summary = read_json(folder / "config.json")
        model = summary.get("model") if isinstance(summary, dict) else None
        if not isinstance(model, dict):
            raise WeightsError("config.json has no 'model' section")
        check_numbers(model, CONFIG_BOUNDS, TinyConfig, "model.")
    except WeightsError as error:
        raise _unusable(folder, str(error)) from None
    try:
        config = TinyConfig(**model)
    except TypeError as error:
        raise _unusable(folder, f"config.json: {first_line(error)}") from None
    if config.hidden_size % config.num_heads or config.text_dim != TEXT_DIM:
        raise _unusable(folder, "hidden_size must divide by num_heads, and text_dim must be 384 (MiniLM)")
    h, layers = config.hidden_size, config.num_layers
    parameters = layers * (4 * h * h + 3 * h * config.intermediate_size) + 2 * config.vocab_size * h
    if parameters > MAX_PARAMETERS:
        raise _unusable(folder, f"its configuration describes about {parameters / 1e9:.1f}B parameters")
    sampling = summary.get("sampling", DEFAULT_SAMPLING.to_dict())
    try:
        sampling = SamplingSettings(**sampling)
    except (TypeError, SettingsError) as error:
        raise _unusable(folder, f"config.json sampling: {first_line(error)}") from None
    return config, sampling


def _tensors(folder: Path, name: str) -> dict[str, torch.Tensor]:
    try:
        return read_tensors(folder / name)
    except WeightsError as error:
        raise _unusable(folder, str(error)) from None


class TinyModel:
    """An embedded text-to-emoji model (`python -m specviz.training.tiny` reproduces its weights)."""

    def __init__(
        self,
        network: TinyTextToImage,
        tokenizer: PatchTokenizer,
        device: torch.device,
        default_sampling: SamplingSettings = DEFAULT_SAMPLING,
        draft_head: DraftHead | None = None,
        name: str = "tiny",
        fast_path: bool = False,
    ):
        self.name = name
        self.network = network.eval().requires_grad_(False)
        self.draft_head = None if draft_head is None else draft_head.to(device).eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.device = device
        self.default_sampling = default_sampling
        config = network.config
        self.geometry = Geometry.plain_grid(config.rows, config.cols, config.vocab_size)
        # sessions over a static cache with fixed-width passes, CUDA graphs on a GPU (`fixed_passes`)
        self.fast_path = fast_path
        self.static = StaticPool.for_model(network.lm.config, self.geometry, device) if fast_path else None

    @classmethod
    def load(
        cls, weights: str | Path | None = None, device: str = "cpu", name: str = "tiny", fast_path: bool = False
    ) -> TinyModel:
        """The weights of a folder (default: the shipped ones of model `name`); `fast_path`: see `fixed_passes`."""
        folder = Path(weights) if weights else SHIPPED[name]
        missing = [file for file in WEIGHT_FILES if not (folder / file).is_file()]
        if missing:
            retrain = "retrain with `python -m specviz.training.tiny`"
            remedy = NOT_IN_CHECKOUT if folder in SHIPPED.values() else retrain
            raise ModelUnavailable(f"{name}: {', '.join(missing)} missing in {folder}; {remedy}")
        config, sampling = read_summary(folder)
        network = TinyTextToImage(config)
        state = {name: tensor.float() for name, tensor in _tensors(folder, "model.safetensors").items()}
        try:
            network.load_state_dict(state)
        except RuntimeError as error:
            raise _unusable(
                folder, f"model.safetensors does not fit config.json: {str(error).splitlines()[0]}"
            ) from None
        codebook = _tensors(folder, "codebook.safetensors").get("codebook")
        if codebook is None or codebook.shape != (config.vocab_size, 27):
            raise _unusable(
                folder, f"codebook.safetensors needs a 'codebook' tensor of shape ({config.vocab_size}, 27)"
            )
        head = None
        if all((folder / name).is_file() for name in HEAD_FILES):  # optional: the `head` drafter's weights
            try:
                head = DraftHead.load(folder, network.lm.get_input_embeddings(), network.lm.lm_head)
            except WeightsError as error:
                raise _unusable(folder, str(error)) from None
        place = torch.device(device)
        return cls(network.to(place), PatchTokenizer(codebook.to(place)), place, sampling, head, name, fast_path)

    @torch.inference_mode()
    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        net = self.network
        text = shared_text_encoder()([prompt]).to(self.device)
        prefix = net.prefix(text)
        if guidance_scale != 1.0:
            prefix = torch.cat([prefix, net.prefix(None, 1)])
        cache = DynamicCache(config=net.lm.config)
        hidden = net.lm.model(inputs_embeds=prefix, **cache_keyword(net.lm.model, cache), use_cache=True)
        hidden = hidden.last_hidden_state
        return prefilled_session(
            self.geometry,
            cache,
            PromptRows(prefix.shape[1]),
            net.lm.lm_head(hidden[:, -1]),
            self._run,
            guidance_scale,
            static=self.static,
            token_vectors=self.tokenizer.codebook,
            draft_head=self.draft_head,
            prefill_features=hidden[:, -1],
        )

    @torch.inference_mode()
    def reference_generate(self, prompt: str, sampling: SamplingSettings, seed: int) -> list[int]:
        """transformers' own `generate()` on this model, the speed bar for our AR loop.

        It has no batched classifier-free guidance for a prompt given as embeddings, so the
        comparison runs without guidance (scale 1) on both sides.
        """
        if sampling.guidance_scale != 1.0:
            raise ValueError("reference_generate compares without guidance; use guidance_scale=1")
        torch.manual_seed(seed)
        prefix = self.network.prefix(shared_text_encoder()([prompt]).to(self.device))
        length = self.geometry.seq_len
        out = self.network.lm.generate(
            inputs_embeds=prefix,
            max_new_tokens=length,
            min_new_tokens=length,
            do_sample=not sampling.greedy,
            temperature=sampling.temperature if not sampling.greedy else None,
            top_k=sampling.top_k or 0,
            top_p=sampling.top_p,
            eos_token_id=None,
            pad_token_id=0,
        )
        return out[0, -length:].tolist()

    def _run(self, tokens: torch.Tensor, cache: DynamicCache, mask: torch.Tensor | None, positions) -> torch.Tensor:
        lm = self.network.lm
        hidden = lm.model(
            input_ids=tokens,
            attention_mask=transformers_mask(mask, lm.config, lm.dtype),
            position_ids=positions,
            **cache_keyword(lm.model, cache),
            use_cache=True,
        ).last_hidden_state
        return lm.lm_head(hidden), hidden

    def decode(self, tokens: list[int] | torch.Tensor) -> Image.Image:
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=self.device).flatten()
        cells = self.geometry.rows * self.geometry.cols
        if len(tokens) > cells:
            raise ValueError(f"{len(tokens)} tokens for a grid of {cells} cells")
        full = torch.zeros(cells, dtype=torch.long, device=self.device)
        full[: len(tokens)] = tokens
        pixels = self.tokenizer.decode(full[None], self.geometry.rows, self.geometry.cols)[0]
        generated = (torch.arange(cells, device=self.device) < len(tokens)).view(self.geometry.rows, self.geometry.cols)
        patch = self.tokenizer.patch
        generated = generated.repeat_interleave(patch, 0).repeat_interleave(patch, 1)
        pixels[~generated] = BLANK
        return Image.fromarray(pixels.cpu().numpy())
