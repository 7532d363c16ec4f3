"""Emu3 (transformers `Emu3ForConditionalGeneration`) behind the protocol.

Emu3 writes an image as text: rows of visual tokens (`<|visual token 000123|>`, one per VQ code),
an end-of-line token (`<|extra_200|>`) after every row, then end-of-frame, end-of-image and EOS.
Method ids are codebook indices 0..V-1, read from the token *names* (the BPE ids need not be in
codebook order), and the end-of-line is layout token V, forced one-hot after every row so every
method treats it as an always-accepted slot. The three closing tokens carry no information and are
added by `decode`.

Logits are the ordinary LM head restricted to the visual tokens (as the prefix constraint of
transformers' image-generation example does). Guidance follows transformers' `generate()` with a
negative prompt (`UnbatchedClassifierFreeGuidanceLogitsProcessor`): both rows are log-softmaxed and
combined as `scale * (cond - uncond) + uncond`. transformers log-softmaxes over the whole text
vocabulary and masks afterwards; doing it over the visual tokens shifts every row by a constant,
so the distribution (and anything temperature, top-k or top-p make of it) is the same.

The negative prompt is prefilled in its own batch row, left-padded to the prompt's length with zero
keys and values that the attention mask hides, with position ids counted from its first real token,
so each row sees exactly what it sees when run alone.
"""

from __future__ import annotations

import torch
from PIL import Image

from specviz.core.settings import SamplingSettings
from specviz.models import hub
from specviz.models.fast.fixed_passes import StaticPool
from specviz.models.protocol import IMAGE_CELL, Geometry
from specviz.models.session import CachedSession, image_head, separate_prompts_session

HUB_ID = "BAAI/Emu3-Gen-hf"
ENV_VAR = "SPECVIZ_EMU3_WEIGHTS"
# the Emu3 release's image-generation prompts (baaivision/Emu3, image_generation.py)
POSITIVE_SUFFIX = " masterpiece, film grained, best quality."
NEGATIVE_PROMPT = (
    "lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, cropped, worst "
    "quality, low quality, normal quality, jpeg artifacts, signature, watermark, username, blurry."
)
EOL_TOKEN = "<|extra_200|>"


def combine_log_softmax(raw: torch.Tensor, scale: float) -> torch.Tensor:
    """Emu3's guidance: scale * (log p_cond - log p_uncond) + log p_uncond; row 0 conditional.

    A token masked (-inf) in either row stays masked instead of turning into NaN.
    """
    if raw.shape[0] == 1:
        return raw[0]
    scores = raw.log_softmax(-1)
    cond, uncond = scores[0], scores[1]
    return (scale * (cond - uncond) + uncond).nan_to_num(nan=float("-inf"))


class Emu3Model:
    """A loaded Emu3 generation checkpoint; `from_model` wraps one built elsewhere."""

    name = "emu3"
    # the Emu3 release samples with top-k 2048 and guidance 3
    default_sampling = SamplingSettings(temperature=1.0, top_k=2048, top_p=1.0, guidance_scale=3.0)

    def __init__(
        self,
        network,
        processor,
        device: torch.device | str | None = None,
        *,
        ratio: str = "1:1",
        image_area: int | None = None,
        positive_suffix: str = POSITIVE_SUFFIX,
        negative_prompt: str = NEGATIVE_PROMPT,
        fast_path: bool = False,
    ):
        self.network = network.eval().requires_grad_(False)
        self.processor = processor
        self.device = torch.device(device) if device is not None else network.device
        self.ratio = ratio
        self.image_area = image_area or processor.image_area
        self.positive_suffix, self.negative_prompt = positive_suffix, negative_prompt
        rows, cols = processor.calculate_generate_size(ratio, self.image_area, processor.downsample_ratio)

        mapping = network.vocabulary_mapping
        img2bpe = mapping.img2bpe  # codebook index (from the token's name) -> BPE id
        codes = len(img2bpe)
        if sorted(img2bpe) != list(range(codes)):
            raise ValueError("emu3: the visual token names must number the codes 0..V-1 without gaps")
        codebook = network.config.vq_config.codebook_size
        if codes > codebook:
            raise ValueError(f"emu3: {codes} visual tokens but the VQ codebook has {codebook} codes")
        if mapping.eol_token_id is None:
            raise ValueError(f"emu3: the vocabulary has no end-of-line token {EOL_TOKEN}")
        self.image_vocab = codes
        self.end_of_line = codes  # method id of the end-of-line layout token
        self.geometry = Geometry(rows, cols, codes + 1, ((IMAGE_CELL,) * cols + (self.end_of_line,)) * rows)

        visual = torch.tensor([img2bpe[code] for code in range(codes)], dtype=torch.long)
        self.visual_ids = visual.to(self.device)
        self.method_to_text = torch.cat([visual, torch.tensor([mapping.eol_token_id])]).to(self.device)
        text_to_method = torch.full((network.config.text_config.vocab_size,), -1, dtype=torch.long)
        text_to_method[self.method_to_text.cpu()] = torch.arange(codes + 1)
        self.text_to_method = text_to_method.to(self.device)
        # visual-token logits, end-of-line masked (the session forces it)
        self._head = image_head(network.lm_head.weight.detach()[self.visual_ids].contiguous(), layout_tokens=1)
        self._closing = self._closing_ids(mapping.eol_token_id)

        embedding = network.model.vqmodel.quantize.embedding.weight.detach().float()[:codes]
        far = embedding.abs().max() * 1e4 + 1e4  # the layout token sits far from every code
        self.token_vectors = torch.cat([embedding, torch.full((1, embedding.shape[1]), float(far))]).to(self.device)
        self._mean, self._std = hub.normalisation(processor)
        # on the fast path, sessions over pooled static caches with fixed-width passes (`fixed_passes`)
        self.fast_path = fast_path
        text = network.model.text_model.config
        self.static = StaticPool.for_model(text, self.geometry, self.device) if fast_path else None

    @classmethod
    def from_model(cls, network, processor, device: torch.device | str | None = None, **options) -> Emu3Model:
        """Wrap an `Emu3ForConditionalGeneration` and an `Emu3Processor`; options as in the constructor."""
        return cls(network, processor, device, **options)

    @classmethod
    def load(cls, weights: str | None = None, device: str = "cpu", fast_path: bool = False) -> Emu3Model:
        from transformers import Emu3ForConditionalGeneration

        network, processor = hub.load_pretrained(
            "emu3", Emu3ForConditionalGeneration, weights, device, default_id=HUB_ID, env_var=ENV_VAR
        )
        return hub.adapted("emu3", device, lambda: cls(network, processor, device, fast_path=fast_path))

    def _closing_ids(self, fallback: int) -> list[int]:
        """End-of-frame, end-of-image and EOS ids, which close the sequence `decode_image_tokens` reads."""
        tokenizer = getattr(self.processor, "tokenizer", None)
        names = [getattr(self.processor, "eof_token", None), getattr(self.processor, "image_end_token", None)]
        ids = [tokenizer.convert_tokens_to_ids(name) if tokenizer and name else None for name in names]
        ids.append(getattr(tokenizer, "eos_token_id", None))
        return [fallback if i is None else int(i) for i in ids]

    # ---- prompts -------------------------------------------------------------------------------

    def _image_prompt(self, text: str) -> torch.Tensor:
        """(1, L) ids: BOS, the text, begin-of-image, "H*W" and the image wrapper token."""
        inputs = self.processor(
            text=text,
            return_for_image_generation=True,
            ratio=self.ratio,
            image_area=self.image_area,
            return_tensors="pt",
        )
        height, width = (int(v) for v in inputs["image_sizes"][0])
        if (height, width) != (self.geometry.rows, self.geometry.cols):
            raise ValueError(f"emu3: processor asks for a {height}x{width} grid, geometry is {self.geometry}")
        return inputs.input_ids.to(self.device)

    def prompt_ids(self, prompt: str) -> torch.Tensor:
        return self._image_prompt(prompt + self.positive_suffix)

    def negative_ids(self) -> torch.Tensor:
        """The unconditional row: the release's negative prompt, with the same image prefix."""
        return self._image_prompt(self.negative_prompt)

    # ---- sessions ------------------------------------------------------------------------------

    def session(self, prompt: str, guidance_scale: float) -> CachedSession:
        prompts = [self.prompt_ids(prompt)]
        if guidance_scale != 1.0:
            prompts.append(self.negative_ids())
        return separate_prompts_session(
            self.geometry,
            prompts,
            self.network.model.text_model,
            self.method_to_text,
            self._head,
            guidance_scale,
            combine=combine_log_softmax,
            token_vectors=self.token_vectors,
            static=self.static,
        )

    # ---- transformers' own loop ----------------------------------------------------------------

    @torch.inference_mode()
    def reference_generate(self, prompt: str, sampling: SamplingSettings, seed: int) -> list[int]:
        """transformers' `generate()` as its Emu3 image-generation example runs it (prefix constraint,
        negative prompt for guidance): the image and end-of-line tokens as method ids.

        Its sampler draws over the whole text vocabulary, ours over V + 1 ids, so sampled runs are
        the same distribution but not the same random stream; greedy runs match token for token.
        """
        out, start = self.run_generate(prompt, sampling, seed)
        return self.text_to_method[out[0, start:]].tolist()

    @torch.inference_mode()
    def run_generate(self, prompt: str, sampling: SamplingSettings, seed: int, **options):
        """(generate()'s output, prompt length) for `seq_len` new tokens; `options` go to generate()."""
        ids = self.prompt_ids(prompt)
        start, rows, cols = ids.shape[1], self.geometry.rows, self.geometry.cols
        visual = self.visual_ids.tolist()
        eol = int(self.method_to_text[-1])
        image_end = rows * (cols + 1)
        closing = self._closing

        def allowed(batch_id: int, sequence: torch.Tensor) -> list[int]:
            offset = sequence.shape[0] - start + 1  # 1 for the first generated token
            if offset > image_end:
                return [closing[min(offset - image_end - 1, 2)]]
            return [eol] if offset % (cols + 1) == 0 else visual

        options["do_sample"] = not sampling.greedy
        if not sampling.greedy:
            options.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p)
        if sampling.guidance_scale != 1.0:
            negative = self.negative_ids()
            options.update(negative_prompt_ids=negative, negative_prompt_attention_mask=torch.ones_like(negative))
        torch.manual_seed(seed)
        out = self.network.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=self.geometry.seq_len,
            prefix_allowed_tokens_fn=allowed,
            guidance_scale=sampling.guidance_scale,
            pad_token_id=closing[-1],
            **options,
        )
        return out, start

    # ---- pixels --------------------------------------------------------------------------------

    def text_tokens(self, tokens: list[int] | torch.Tensor) -> torch.Tensor:
        """Method ids of a full sequence -> the text-token sequence Emu3 decodes, closing tokens added."""
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=self.device).flatten()
        closing = torch.tensor(self._closing, dtype=torch.long, device=self.device)
        return torch.cat([self.method_to_text[tokens], closing])

    @torch.inference_mode()
    def decode(self, tokens: list[int] | torch.Tensor) -> Image.Image:
        geometry = self.geometry
        codes, generated = hub.grid_codes(tokens, geometry, self.image_vocab)
        layout = torch.tensor(geometry.layout, dtype=torch.long)
        sequence = layout.masked_scatter(layout == IMAGE_CELL, codes)  # cells not generated yet decode code 0
        pixels = self.network.decode_image_tokens(
            image_tokens=self.text_tokens(sequence)[None], height=geometry.rows, width=geometry.cols
        )[0]
        return hub.to_image(pixels, self._mean, self._std, generated)
