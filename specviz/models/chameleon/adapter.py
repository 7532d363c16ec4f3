"""Anole and Lumina-mGPT (transformers `ChameleonForConditionalGeneration`) behind the protocol.

Both are Chameleon 7B models that write an image as a run of image tokens after begin-of-image
(`<racm3:break>`). Image tokens are BPE ids named `IMGIMG...Z` in the vocabulary; the name spells the
VQGAN codebook index (transformers' `vocabulary_mapping.bpe2img`). Method ids are codebook indices
0..V-1, so the BPE ids need not be in codebook order.

Logits: transformers' `forward` masks every image token (Chameleon's released checkpoint was not
meant to draw), so we take `model.model(...).last_hidden_state` and apply the LM head rows of the
image tokens ourselves, in codebook order. Guidance uses a conditional and an unconditional batch
row, combined on raw logits as `uncond + scale * (cond - uncond)`:
- Anole (its `text2image.py` on Chameleon's inference code): rows `[BOS, text, EOT, BOI]` and
  `[BOS, BOI]`, EOT being the end-of-turn `<reserved08706>` (the sep token transformers'
  `ChameleonProcessor` appends to the text too). The `ImageDecoder`'s "image-conditioned" row keeps
  only BOS, image tokens and image delimiters, so for a text-only prompt it equals the unconditional
  row and its three-way guidance reduces to this; a plain 32 x 32 grid at 512 px.
- Lumina-mGPT (`LLMImageStartTriggeredUnbatchedClassifierFreeGuidanceLogitsProcessor`): the
  unconditional row is the image part only, `[BOI, height token, width token]`; the two resolution
  tokens `<reserved{8800 + px // 32:05d}>` are part of the prefill; every row of 48 image tokens
  (768 px) ends with `<reserved08799>`, a forced layout slot (method id V).
Guidance on raw logits and on log-softmaxed scores give the same distribution (they differ by a
constant per position), and restricting to image tokens before or after combining changes nothing.

Each row is prefilled alone; shorter rows are left-padded with zero keys and values that the
attention mask hides, with position ids counted from each row's first real token, so every row sees
what it sees when run alone.

Pixels: transformers has no VQGAN decoder; `specviz.models.networks.vqgan` implements it and loads the
released `tokenizer/vqgan.ckpt` (or a safetensors conversion). The codebook vectors LANTERN and GSD
read come from that checkpoint too: transformers' copy of the VQ model is left random (with a
warning) where a transformers checkpoint lacks it.

Lumina-mGPT's own Chameleon class keeps each query/key norm per model-parallel shard,
`(model_parallel_size, head_dim)`, repeated over the shard's heads; transformers keeps one per head.
`expand_qk_norm` loads the former as the latter, which is the same network.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch
from PIL import Image

from specviz.core.errors import ModelUnavailable
from specviz.core.settings import SamplingSettings
from specviz.models import hub
from specviz.models.fast.fixed_passes import StaticPool
from specviz.models.networks.vqgan import VQGANDecoder
from specviz.models.protocol import IMAGE_CELL, Geometry
from specviz.models.session import CachedSession, image_head, separate_prompts_session

BOI_TOKEN = "<racm3:break>"
ROW_END_TOKEN = "<reserved08799>"  # Lumina-mGPT's end of an image row
END_OF_TURN_TOKEN = "<reserved08706>"  # Chameleon's end of a turn (`eot_id`, the processor's sep token)
VQGAN_ENV_VAR = "SPECVIZ_CHAMELEON_VQGAN"
VQGAN_FILES = (
    "vqgan.safetensors",
    "vqgan.ckpt",
    "tokenizer/vqgan.safetensors",
    "tokenizer/vqgan.ckpt",
    "chameleon/tokenizer/vqgan.ckpt",
)
MEAN = STD = torch.tensor((0.5, 0.5, 0.5))  # the VQGAN decodes to [-1, 1]
QK_NORM_KEY = re.compile(r"\.self_attn\.[qk]_norm\.(weight|bias)$")


def grid_token(grids: int) -> str:
    """Lumina-mGPT's resolution token for a side of `grids` 32-pixel patches (two image tokens each)."""
    return f"<reserved{8800 + grids:05d}>"


def expand_qk_norm(key: str, tensor: torch.Tensor, shape: torch.Size) -> torch.Tensor | None:
    """A query/key norm stored per model-parallel shard, (shards, head_dim) as Lumina-mGPT's
    `ChameleonLayerNorm` holds it, in transformers' per-head layout (heads, head_dim): each shard's row
    repeated over its heads, as Lumina's `repeat_param` does. None for any other mismatch."""
    if not QK_NORM_KEY.search(key) or tensor.dim() != 2 or len(shape) != 2 or tensor.shape[1] != shape[1]:
        return None
    shards, heads = tensor.shape[0], shape[0]
    if shards == 0 or heads % shards:
        return None
    return tensor.repeat_interleave(heads // shards, dim=0)


def find_vqgan(folder: str | os.PathLike | None) -> Path | None:
    """The tokenizer checkpoint: `SPECVIZ_CHAMELEON_VQGAN`, else a known file name inside `folder`."""
    named = os.environ.get(VQGAN_ENV_VAR)
    if named:
        return Path(named).expanduser()
    if folder is None:
        return None
    folder = Path(folder).expanduser()
    for name in VQGAN_FILES:
        if (folder / name).is_file():
            return folder / name
    return None


class ChameleonImageModel:
    """Shared by Anole and Lumina-mGPT; `from_model` wraps a network built elsewhere."""

    name = "chameleon"
    hub_id = ""
    env_var = ""
    default_grid = 32
    row_ends = False
    default_sampling = SamplingSettings()
    # transformers' `forward` masks every image token, so its `generate()` cannot draw an image
    reference_generate = None

    def __init__(
        self,
        network,
        processor,
        device: torch.device | str | None = None,
        *,
        decoder: VQGANDecoder | None = None,
        grid: int | None = None,
        fast_path: bool = False,
    ):
        self.network = network.eval().requires_grad_(False)
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.device = torch.device(device) if device is not None else network.device
        vocab = network.config.vocabulary_map or self.tokenizer.get_vocab()
        self._vocab = vocab
        side = grid or self.default_grid
        if self.row_ends and side % 2:
            raise ValueError(f"{self.name}: the grid side must be even (two tokens per 32-pixel patch), got {side}")
        self.grid = side

        img2bpe = network.model.vocabulary_mapping.img2bpe  # codebook index -> BPE id
        codes = len(img2bpe)
        if sorted(img2bpe) != list(range(codes)):
            raise ValueError(f"{self.name}: the image token names must number the codes 0..V-1 without gaps")
        codebook = network.config.vq_config.num_embeddings
        if codes > codebook:
            raise ValueError(f"{self.name}: {codes} image tokens but the VQ codebook has {codebook} codes")
        self.image_vocab = codes
        image_ids = torch.tensor([img2bpe[code] for code in range(codes)], dtype=torch.long)
        self.image_ids = image_ids.to(self.device)
        if self.row_ends:
            self.row_end = codes  # method id of the row-end layout token
            self.geometry = Geometry(side, side, codes + 1, ((IMAGE_CELL,) * side + (self.row_end,)) * side)
            method_to_text = torch.cat([image_ids, torch.tensor([self._token_id(ROW_END_TOKEN)])])
        else:
            self.row_end = None
            self.geometry = Geometry.plain_grid(side, side, codes)
            method_to_text = image_ids
        self.method_to_text = method_to_text.to(self.device)
        # image-token logits in codebook order, the row end masked (the session forces it)
        head = network.lm_head.weight.detach()[self.image_ids].contiguous()
        self._head = image_head(head, layout_tokens=int(self.row_ends))

        self.decoder = decoder if decoder is not None else VQGANDecoder.from_vqmodel(network.model.vqmodel)
        # the codebook that draws the pixels (see the module docstring)
        embedding = self.decoder.quantize.embedding.weight.detach().float()[:codes]
        if self.row_ends:
            far = embedding.abs().max() * 1e4 + 1e4  # the layout token sits far from every code
            embedding = torch.cat([embedding, torch.full((1, embedding.shape[1]), float(far))])
        self.token_vectors = embedding.to(self.device)
        # on the fast path, sessions over pooled static caches with fixed-width passes (`fixed_passes`)
        self.fast_path = fast_path
        self.static = StaticPool.for_model(network.model.config, self.geometry, self.device) if fast_path else None

    @classmethod
    def from_model(cls, network, processor, device=None, **options):
        """Wrap a `ChameleonForConditionalGeneration` and its processor (or tokenizer)."""
        return cls(network, processor, device, **options)

    @classmethod
    def load(cls, weights: str | None = None, device: str = "cpu", fast_path: bool = False):
        from transformers import ChameleonForConditionalGeneration

        source = hub.resolve_weights(weights, cls.env_var, cls.hub_id)
        folder = Path(source).expanduser() if hub.looks_like_path(source) else None
        vqgan = find_vqgan(folder)
        if vqgan is None or not vqgan.is_file():
            where = f"{vqgan} does not exist" if vqgan else "no tokenizer checkpoint found"
            raise ModelUnavailable(
                f"{cls.name}: {where}. transformers' Chameleon has no image decoder, so specviz needs the "
                f"released VQGAN tokenizer weights: put tokenizer/vqgan.ckpt (or vqgan.safetensors) in the "
                f"--weights folder, or set {VQGAN_ENV_VAR}=PATH"
            )
        network, processor = hub.load_pretrained(
            cls.name,
            ChameleonForConditionalGeneration,
            source,
            device,
            default_id=cls.hub_id,
            env_var=cls.env_var,
            reshape=expand_qk_norm,
        )

        def build() -> ChameleonImageModel:
            decoder = VQGANDecoder.from_vqmodel(network.model.vqmodel)
            decoder.load_weights(vqgan)
            return cls(network, processor, device, decoder=decoder, fast_path=fast_path)

        return hub.adapted(cls.name, device, build)

    @classmethod
    def offline(cls) -> str | None:
        """None when the network and the VQGAN decoder can load with no network, else why not."""
        reason = hub.offline_reason(cls.env_var, cls.hub_id)
        if reason:
            return reason
        vqgan = find_vqgan(os.environ.get(cls.env_var))
        if vqgan is None or not vqgan.is_file():
            return f"needs the Chameleon tokenizer's vqgan.ckpt: put it in the weights folder or set {VQGAN_ENV_VAR}"
        return None

    def _token_id(self, name: str) -> int:
        if name not in self._vocab:
            raise ValueError(f"{self.name}: the vocabulary has no {name} token")
        return int(self._vocab[name])

    def _text_ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _bos(self) -> list[int]:
        bos = getattr(self.tokenizer, "bos_token_id", None)
        bos = self.network.config.bos_token_id if bos is None else bos
        return [int(bos)] if bos is not None else []

    # ---- prompts (subclasses) ------------------------------------------------------------------

    def prompt_ids(self, prompt: str) -> torch.Tensor:
        raise NotImplementedError

    def unconditional_ids(self) -> torch.Tensor:
        raise NotImplementedError

    def _tensor(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor([ids], dtype=torch.long, device=self.device)

    # ---- sessions ------------------------------------------------------------------------------

    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        prompts = [self.prompt_ids(prompt)]
        if guidance_scale != 1.0:
            prompts.append(self.unconditional_ids())
        return separate_prompts_session(
            self.geometry,
            prompts,
            self.network.model,
            self.method_to_text,
            self._head,
            guidance_scale,
            token_vectors=self.token_vectors,
            static=self.static,
        )

    # ---- pixels --------------------------------------------------------------------------------

    @torch.inference_mode()
    def decode(self, tokens: list[int] | torch.Tensor) -> Image.Image:
        """Pixels of a possibly partial sequence; cells not generated yet are blank."""
        geometry = self.geometry
        codes, generated = hub.grid_codes(tokens, geometry, self.image_vocab)
        pixels = self.decoder(codes.view(1, geometry.rows, geometry.cols))[0]
        return hub.to_image(pixels, MEAN, STD, generated)


class AnoleModel(ChameleonImageModel):
    """Anole 7B (GAIR-NLP), 512 px: a 32 x 32 grid over 8192 codes, no layout tokens."""

    name = "anole"
    hub_id = "leloy/Anole-7b-v0.1-hf"
    env_var = "SPECVIZ_ANOLE_WEIGHTS"
    default_grid = 32
    row_ends = False
    # Chameleon's inference `Options.Image`, which Anole's text2image.py uses: temperature 0.7,
    # top-p 0.9, text guidance 3 (its image guidance 1.2 has no effect on a text-only prompt)
    default_sampling = SamplingSettings(temperature=0.7, top_k=None, top_p=0.9, guidance_scale=3.0)

    def prompt_ids(self, prompt: str) -> torch.Tensor:
        """[BOS, text, end of turn, begin-of-image], as Anole's text2image.py sends it."""
        turn = [*self._bos(), *self._text_ids(prompt), self._token_id(END_OF_TURN_TOKEN)]
        return self._tensor([*turn, self._token_id(BOI_TOKEN)])

    def unconditional_ids(self) -> torch.Tensor:
        """[BOS, begin-of-image]: the `ImageDecoder`'s unconditional row."""
        return self._tensor([*self._bos(), self._token_id(BOI_TOKEN)])


class LuminaMGPTModel(ChameleonImageModel):
    """Lumina-mGPT 7B (Alpha-VLLM), 768 px: 48 rows of 48 image tokens, each row closed by a row end."""

    name = "lumina-mgpt"
    hub_id = "Alpha-VLLM/Lumina-mGPT-7B-768"
    env_var = "SPECVIZ_LUMINA_MGPT_WEIGHTS"
    default_grid = 48
    row_ends = True
    # the defaults of Lumina-mGPT's inference solver (`create_logits_processor`: guidance 3, image top-k 2000)
    # at temperature 1; its image generation demo (demos/demo_image_generation.py) starts at guidance 3 and
    # image top-k 4000, its README's example at guidance 4 and image top-k 2000
    default_sampling = SamplingSettings(temperature=1.0, top_k=2000, top_p=1.0, guidance_scale=3.0)

    @property
    def pixels(self) -> int:
        return self.grid * 16

    def image_prefix(self) -> list[int]:
        """Begin-of-image, then the height and width tokens (32-pixel patches each)."""
        side = self._token_id(grid_token(self.grid // 2))
        return [self._token_id(BOI_TOKEN), side, side]

    def prompt_ids(self, prompt: str) -> torch.Tensor:
        size = self.pixels
        text = f"Generate an image of {size}x{size} according to the following prompt:\n{prompt}"
        turn = [*self._bos(), *self._text_ids(text), self._token_id(END_OF_TURN_TOKEN)]
        return self._tensor(turn + self.image_prefix())

    def unconditional_ids(self) -> torch.Tensor:
        return self._tensor(self.image_prefix())
