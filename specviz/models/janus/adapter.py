"""Janus-Pro (transformers `JanusForConditionalGeneration`) behind the protocol.

Image generation in Janus does not use the language-model head: the next image token's logits come
from the generation head (`model.model.generation_head`) on the last hidden state, and a generated
token enters the sequence through the generation embeddings and aligner
(`prepare_embeddings_for_image_generation`). Guidance follows transformers' own `generate()` for
`generation_mode="image"`: a second batch row holds the prompt with every token except BOS and
begin-of-image replaced by padding (still attended to), and the two rows' raw logits are combined
as `uncond + scale * (cond - uncond)`. transformers uses a static cache there; we use a
`DynamicCache` so rejected drafts can be cropped, or on the fast path (`fast_path=True`) a pooled static
cache whose write position the session moves back on the device.

The grid is the VQ model's latent grid (24 x 24 for the 384 px Janus-Pro); the token space is the
image codebook (16384 codes), so method ids are codebook ids, and there are no layout slots.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from PIL import Image
from transformers import DynamicCache

from specviz.core.settings import SamplingSettings
from specviz.models import hub
from specviz.models.fast.fixed_passes import StaticPool
from specviz.models.protocol import Geometry
from specviz.models.session import CachedSession, PromptRows, cache_keyword, prefilled_session, transformers_mask

HUB_ID = "deepseek-community/Janus-Pro-1B"
ENV_VAR = "SPECVIZ_JANUS_WEIGHTS"


class JanusProModel:
    """A loaded Janus(-Pro) checkpoint generating images; `from_model` wraps one built elsewhere."""

    name = "janus-pro"
    # the Janus-Pro release samples at temperature 1 with guidance 5, no truncation
    default_sampling = SamplingSettings(temperature=1.0, top_k=None, top_p=1.0, guidance_scale=5.0)

    def __init__(self, network, processor, device: torch.device | str | None = None, *, fast_path: bool = False):
        self.network = network.eval().requires_grad_(False)
        self.processor = processor
        self.device = torch.device(device) if device is not None else network.device
        config = network.config
        vq = network.model.vqmodel
        rows, cols = vq.quantize.quant_state_dims
        num_image_tokens = config.vision_config.num_image_tokens
        if rows * cols != num_image_tokens:
            raise ValueError(
                f"janus: the VQ grid is {rows}x{cols} but vision_config.num_image_tokens is {num_image_tokens}"
            )
        hidden = config.text_config.hidden_size
        if vq.config.projection_dim != hidden or vq.config.image_token_embed_dim != hidden:
            raise ValueError(
                "janus: image generation needs vq_config.projection_dim and image_token_embed_dim equal to the "
                f"text hidden size {hidden}, got {vq.config.projection_dim} and {vq.config.image_token_embed_dim}"
            )
        self.geometry = Geometry.plain_grid(rows, cols, vq.config.num_embeddings)
        self.bos_token_id, self.pad_token_id, self.boi_token_id = self._special_ids()
        # the decoder looks codes up L2-normalised (`get_codebook_entry`): that is the space they live in
        self.token_vectors = F.normalize(vq.quantize.embedding.weight.detach().float(), dim=-1)
        self._mean, self._std = hub.normalisation(processor)
        # on the fast path, sessions over pooled static caches with fixed-width passes (`fixed_passes`)
        self.fast_path = fast_path
        text = config.text_config
        self.static = StaticPool.for_model(text, self.geometry, self.device) if fast_path else None

    @classmethod
    def from_model(
        cls, network, processor, device: torch.device | str | None = None, *, fast_path: bool = False
    ) -> JanusProModel:
        """Wrap a `JanusForConditionalGeneration` and a `JanusProcessor` (or anything callable like one)."""
        return cls(network, processor, device, fast_path=fast_path)

    @classmethod
    def load(cls, weights: str | None = None, device: str = "cpu", fast_path: bool = False) -> JanusProModel:
        from transformers import JanusForConditionalGeneration

        network, processor = hub.load_pretrained(
            "janus-pro",
            JanusForConditionalGeneration,
            weights,
            device,
            default_id=HUB_ID,
            env_var=ENV_VAR,
            smaller=HUB_ID,
        )
        return hub.adapted("janus-pro", device, lambda: cls(network, processor, device, fast_path=fast_path))

    def _special_ids(self) -> tuple[int, int, int]:
        """BOS, pad and begin-of-image ids, as `generate()` reads them (generation config first)."""
        generation = self.network.generation_config
        tokenizer = getattr(self.processor, "tokenizer", None)
        bos = generation.bos_token_id
        pad = generation.pad_token_id
        boi = (getattr(generation, "generation_kwargs", None) or {}).get("boi_token_id")
        if tokenizer is not None:
            bos = tokenizer.bos_token_id if bos is None else bos
            pad = tokenizer.pad_token_id if pad is None else pad
            if boi is None and getattr(tokenizer, "boi_token", None):
                boi = tokenizer.convert_tokens_to_ids(tokenizer.boi_token)
        if None in (bos, pad, boi):
            raise ValueError(f"janus: need BOS, pad and begin-of-image token ids, got {bos}, {pad}, {boi}")
        return int(bos), int(pad), int(boi)

    def prompt_ids(self, prompt: str) -> torch.Tensor:
        """(1, L) ids of the image-generation prompt: chat template (when the processor has one), then
        the processor in image mode, which appends begin-of-image."""
        text = prompt
        if getattr(self.processor, "chat_template", None):
            messages = [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
            text = self.processor.apply_chat_template(messages, add_generation_prompt=True)
        ids = self.processor(text=text, generation_mode="image", return_tensors="pt").input_ids
        return ids.to(self.device)

    def unconditional_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """The guidance row: every token but BOS and begin-of-image replaced by padding."""
        keep = (ids == self.bos_token_id) | (ids == self.boi_token_id)
        return ids.masked_fill(~keep, self.pad_token_id)

    @torch.inference_mode()
    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        ids = self.prompt_ids(prompt)
        if guidance_scale != 1.0:
            ids = torch.cat([ids, self.unconditional_ids(ids)])  # same length: no padding (pads are attended)
        network = self.network
        embeds = network.get_input_embeddings()(ids)
        cache = DynamicCache(config=network.config.text_config)
        language_model = network.model.language_model
        hidden = language_model(inputs_embeds=embeds, **cache_keyword(language_model, cache), use_cache=True)
        prefill_logits = network.model.generation_head(hidden.last_hidden_state[:, -1])
        return prefilled_session(
            self.geometry,
            cache,
            PromptRows(ids.shape[1]),
            prefill_logits,
            self._run,
            guidance_scale,
            static=self.static,
            token_vectors=self.token_vectors,
        )

    def _run(self, tokens: torch.Tensor, cache: DynamicCache, mask: torch.Tensor | None, positions) -> torch.Tensor:
        network = self.network
        language_model = network.model.language_model
        hidden = language_model(
            inputs_embeds=network.prepare_embeddings_for_image_generation(tokens),
            attention_mask=transformers_mask(mask, language_model.config, language_model.dtype),
            position_ids=positions,
            **cache_keyword(language_model, cache),
            use_cache=True,
        )
        return network.model.generation_head(hidden.last_hidden_state)

    @torch.inference_mode()
    def reference_generate(self, prompt: str, sampling: SamplingSettings, seed: int) -> list[int]:
        """transformers' own image `generate()` on the same prompt: codebook ids, one per grid cell.

        Its random stream is the global one seeded with `seed`, the same stream our `ar` draws from
        with a generator seeded with `seed`, so sampled runs match too. It always forms guidance from
        two rows and needs a scale above 1.
        """
        if sampling.guidance_scale <= 1.0:
            raise ValueError("transformers' Janus image generate() always applies guidance; use a scale above 1")
        ids = self.prompt_ids(prompt)
        options = {"do_sample": not sampling.greedy}
        if not sampling.greedy:
            options.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p)
        torch.manual_seed(seed)
        out = self.network.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            generation_mode="image",
            guidance_scale=sampling.guidance_scale,
            bos_token_id=self.bos_token_id,
            pad_token_id=self.pad_token_id,
            generation_kwargs={"boi_token_id": self.boi_token_id},
            **options,
        )
        return out[0].tolist()

    @torch.inference_mode()
    def decode(self, tokens: list[int] | torch.Tensor) -> Image.Image:
        codes, generated = hub.grid_codes(tokens, self.geometry, self.geometry.vocab_size)
        pixels = self.network.decode_image_tokens(codes[None].to(self.device))[0].permute(2, 0, 1)  # in [-1, 1]
        return hub.to_image(pixels, self._mean, self._std, generated)
