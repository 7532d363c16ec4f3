"""The `tiny` model behind the protocol: MiniLM prompt prefix, Llama over 1024 patch codes, 16x16 grid."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import DynamicCache

from specviz.models.errors import ModelUnavailable
from specviz.models.protocol import Geometry
from specviz.models.session import CachedSession, PromptRows, transformers_mask
from specviz.models.settings import SamplingSettings
from specviz.models.tiny.network import TinyConfig, TinyTextToImage
from specviz.models.tiny.text import shared_text_encoder
from specviz.models.tiny.tokenizer import PatchTokenizer

ASSETS = Path(__file__).resolve().parents[3] / "assets" / "tiny"
BLANK = 224  # grey of cells not generated yet, visible against the emoji's white background
WEIGHT_FILES = ("config.json", "model.safetensors", "codebook.safetensors")


class TinyModel:
    """The embedded text-to-emoji model (`python -m specviz.models.tiny.train` reproduces it)."""

    name = "tiny"
    # it memorises its training emoji, and its unconditional branch is weak: above about 2, guidance
    # pushes samples off the images it knows (measured: teacher-forced NLL 0.001 at scale 1, 0.08-0.19
    # at scale 3), so the default keeps guidance on but mild
    default_sampling = SamplingSettings(temperature=1.0, top_k=None, top_p=1.0, guidance_scale=1.5)

    def __init__(self, network: TinyTextToImage, tokenizer: PatchTokenizer, device: torch.device):
        self.network = network.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.device = device
        config = network.config
        self.geometry = Geometry.plain_grid(config.rows, config.cols, config.vocab_size)

    @classmethod
    def load(cls, weights: str | Path | None = None, device: str = "cpu") -> TinyModel:
        folder = Path(weights) if weights else ASSETS
        missing = [name for name in WEIGHT_FILES if not (folder / name).is_file()]
        if missing:
            raise ModelUnavailable(
                f"tiny: {', '.join(missing)} missing in {folder}; "
                "reinstall the project or retrain with `python -m specviz.models.tiny.train`"
            )
        summary = json.loads((folder / "config.json").read_text())
        network = TinyTextToImage(TinyConfig(**summary["model"]))
        state = {name: tensor.float() for name, tensor in load_file(str(folder / "model.safetensors")).items()}
        network.load_state_dict(state)
        codebook = load_file(str(folder / "codebook.safetensors"))["codebook"]
        return cls(network.to(device), PatchTokenizer(codebook.to(device)), torch.device(device))

    @torch.inference_mode()
    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        net = self.network
        text = shared_text_encoder()([prompt]).to(self.device)
        prefix = net.prefix(text)
        if guidance_scale != 1.0:
            prefix = torch.cat([prefix, net.prefix(None, 1)])
        cache = DynamicCache(config=net.lm.config)
        hidden = net.lm.model(inputs_embeds=prefix, past_key_values=cache, use_cache=True).last_hidden_state
        prefill_logits = net.lm.lm_head(hidden[:, -1])
        return CachedSession(
            self.geometry,
            cache,
            PromptRows(prefix.shape[1]),
            prefill_logits,
            self._run,
            guidance_scale,
            token_vectors=self.tokenizer.codebook,
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
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state
        return lm.lm_head(hidden)

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
