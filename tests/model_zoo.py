"""Tiny random-weight models of every family's real classes, and each family's uncached reference.

Everything is built offline: tokenizers from word lists, transformers configs two layers deep, our
own LlamaGen classes. `FAMILIES` lists them for the protocol contract (test_contract.py); each
family's own tests use the same builders. The uncached reference of a family (one plain forward of the
whole sequence per guidance row, against the network, not the adapter's session) is the package's
`specviz.models.reference`, which `check-model` runs on a user's weights.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    ChameleonConfig,
    ChameleonForConditionalGeneration,
    ChameleonImageProcessor,
    ChameleonProcessor,
    Emu3Config,
    Emu3ForConditionalGeneration,
    Emu3ImageProcessor,
    Emu3Processor,
    JanusConfig,
    JanusForConditionalGeneration,
    JanusImageProcessorPil,
    JanusProcessor,
    PreTrainedTokenizerFast,
    T5Config,
    T5EncoderModel,
)

from specviz.models.chameleon.adapter import AnoleModel, LuminaMGPTModel
from specviz.models.emu3.adapter import Emu3Model, combine_log_softmax
from specviz.models.janus.adapter import JanusProModel
from specviz.models.llamagen.adapter import (
    LlamaGenConfig,
    LlamaGenModel,
    LlamaGenTransformer,
)
from specviz.models.llamagen.vq import VQDecoder, VQDecoderConfig
from specviz.models.protocol import IMAGE_CELL, ImageModel
from specviz.models.reference import (
    UncachedFn,
    chameleon_uncached,
    emu3_uncached,
    janus_uncached,
    llamagen_uncached,
    tiny_uncached,
)
from specviz.models.session import CombineFn, combine_guidance
from specviz.models.tiny.adapter import TinyModel


def widen(modules) -> None:
    """Widen the default init (std 0.02), under which every position predicts nearly the same thing,
    so that tokens depend on the prompt, the guidance row and each other."""
    with torch.no_grad():
        for module in modules:
            for name, parameter in module.named_parameters():
                if parameter.dim() == 2:
                    parameter.normal_(0, 1.0 if "embed" in name else 1.5 / parameter.shape[-1] ** 0.5)


# ---- Janus-Pro ---------------------------------------------------------------------------------

JANUS_HIDDEN = 32
JANUS_CODES = 64
JANUS_SPECIALS = ["<unk>", "<pad>", "<s>", "</s>", "<begin_of_image>", "<end_of_image>", "<image_placeholder>"]
JANUS_WORDS = ["a", "red", "apple", "rocket", "smiling", "cat", "on", "the", "moon"]
JANUS_BOS, JANUS_PAD, JANUS_BOI = 2, 1, 4


def janus_processor() -> JanusProcessor:
    vocab = {token: i for i, token in enumerate(JANUS_SPECIALS + JANUS_WORDS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", JANUS_BOS)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={
            "image_token": "<image_placeholder>",
            "boi_token": "<begin_of_image>",
            "eoi_token": "<end_of_image>",
        },
    )
    image_processor = JanusImageProcessorPil(image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5))
    return JanusProcessor(image_processor, tokenizer, num_image_tokens=16)


def janus_config(projection_dim: int = JANUS_HIDDEN) -> JanusConfig:
    return JanusConfig(
        text_config={
            "model_type": "llama",
            "vocab_size": 32,
            "hidden_size": JANUS_HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 128,
            "pad_token_id": JANUS_PAD,
            "bos_token_id": JANUS_BOS,
            "eos_token_id": 3,
        },
        # 16 px images in 4 px patches: a 4x4 grid, so num_image_tokens 16; projection_dim = text hidden size
        vision_config={
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "image_size": 16,
            "patch_size": 4,
            "num_image_tokens": 16,
            "projection_dim": JANUS_HIDDEN,
            "mlp_ratio": 2,
        },
        vq_config={
            "embed_dim": 8,
            "num_embeddings": JANUS_CODES,
            "latent_channels": 8,
            "base_channels": 32,  # GroupNorm of 32 groups
            "channel_multiplier": [1, 1],
            "num_res_blocks": 1,
            "projection_dim": projection_dim,
            "image_token_embed_dim": JANUS_HIDDEN,
        },
        image_token_id=6,
    )


def janus_network(seed: int = 0) -> JanusForConditionalGeneration:
    torch.manual_seed(seed)
    network = JanusForConditionalGeneration(janus_config()).eval()
    generation = network.model
    widen(
        [
            generation.language_model,
            generation.generation_embeddings,
            generation.generation_aligner,
            generation.generation_head,
        ]
    )
    config = network.generation_config
    config.bos_token_id, config.pad_token_id = JANUS_BOS, JANUS_PAD
    config.generation_kwargs = {"boi_token_id": JANUS_BOI}
    return network


def janus(*, fast_path: bool = False) -> JanusProModel:
    return JanusProModel.from_model(janus_network(), janus_processor(), fast_path=fast_path)


# ---- Emu3 --------------------------------------------------------------------------------------

EMU3_CODES = 48
EMU3_ROWS = EMU3_COLS = 4  # the processor's grid for image_area 32 * 32 (it divides by 8 per token)
EMU3_SPECIALS = [
    "<unk>",
    "<pad>",
    "<s>",
    "</s>",
    "<|image start|>",
    "<|image end|>",
    "<|image token|>",
    "<|extra_201|>",
    "<|extra_200|>",
    "<image>",
]
EMU3_WORDS = ["a", "red", "apple", "rocket", "on", "the", "moon", "lowres", "blurry", "masterpiece", ",", ".", "*"]
EMU3_WORDS += [str(digit) for digit in range(10)]  # the "H*W" size in the image prompt


def emu3_processor() -> Emu3Processor:
    visual = [f"<|visual token {code:06d}|>" for code in range(EMU3_CODES)]
    random.Random(0).shuffle(visual)  # BPE ids deliberately not in codebook order
    vocab = {token: i for i, token in enumerate(EMU3_SPECIALS + EMU3_WORDS + visual)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={
            "image_token": "<image>",
            "boi_token": "<|image start|>",
            "eoi_token": "<|image end|>",
            "image_wrapper_token": "<|image token|>",
            "eof_token": "<|extra_201|>",
        },
    )
    return Emu3Processor(Emu3ImageProcessor(image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5)), tokenizer)


def emu3_network(vocabulary: dict[str, int], seed: int = 0, attention: str = "sdpa") -> Emu3ForConditionalGeneration:
    torch.manual_seed(seed)
    config = Emu3Config(
        text_config={
            "vocab_size": 96,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
            "pad_token_id": 1,
            "bos_token_id": 2,
            "eos_token_id": 3,
        },
        vq_config={
            "codebook_size": EMU3_CODES,
            "embed_dim": 4,
            "latent_channels": 4,
            "temporal_downsample_factor": 1,
            "base_channels": 32,  # GroupNorm of 32 groups
            "channel_multiplier": [1, 1],
            "num_res_blocks": 1,
            "attn_resolutions": [],
            "hidden_size": 32,
        },
        vocabulary_map=vocabulary,
    )
    network = Emu3ForConditionalGeneration(config).eval()
    network.set_attn_implementation(attention)
    widen([network.model.text_model, network.lm_head])
    return network


def emu3_wrap(network, processor, **options) -> Emu3Model:
    # short prompt additions, so prompt and negative prompt rows have different lengths (left padding)
    options = {"image_area": 32 * 32, "positive_suffix": " masterpiece", "negative_prompt": "lowres, blurry"} | options
    return Emu3Model.from_model(network, processor, **options)


def emu3(attention: str = "sdpa", *, fast_path: bool = False) -> Emu3Model:
    processor = emu3_processor()
    network = emu3_network(processor.tokenizer.get_vocab(), attention=attention)
    return emu3_wrap(network, processor, fast_path=fast_path)


# ---- Anole and Lumina-mGPT ---------------------------------------------------------------------

CHAMELEON_CODES = 48
CHAMELEON_GRID = 4  # tiny grid side; the releases use 32 (Anole) and 48 (Lumina-mGPT)
CHAMELEON_SPECIALS = [
    "<s>",
    "<pad>",
    "</s>",
    "<unk>",
    "<racm3:break>",
    "<eoss>",
    "<reserved08799>",
    "<reserved08706>",
    "<reserved08802>",  # Lumina-mGPT's resolution token for 2 patches of 32 px (a 4-token side)
    "<image>",
]
CHAMELEON_WORDS = ["a", "red", "apple", "rocket", "on", "the", "moon", "Generate", "an", "image", "of", ":"]


def image_token_name(code: int) -> str:
    """Chameleon's name for codebook index `code`: its digits spelled with A-J, between IMGIMG and Z."""
    return "IMGIMG" + "".join(chr(ord("A") + int(digit)) for digit in str(code)) + "Z"


def chameleon_vocab() -> dict[str, int]:
    images = [image_token_name(code) for code in range(CHAMELEON_CODES)]
    random.Random(0).shuffle(images)  # BPE ids deliberately not in codebook order
    return {token: i for i, token in enumerate(CHAMELEON_SPECIALS + CHAMELEON_WORDS + images)}


def chameleon_processor(vocab: dict[str, int]) -> ChameleonProcessor:
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    tokenizer.boi_token, tokenizer.eoi_token, tokenizer.image_token = "<racm3:break>", "<eoss>", "<image>"
    return ChameleonProcessor(ChameleonImageProcessor(), tokenizer, image_seq_length=CHAMELEON_GRID**2)


def chameleon_vq_config(levels: int = 2) -> dict:
    return {
        "embed_dim": 4,
        "num_embeddings": CHAMELEON_CODES,
        "latent_channels": 32,
        "resolution": 8 * 2 ** (levels - 1),
        "base_channels": 32,  # GroupNorm of 32 groups
        "channel_multiplier": [1] * levels,
        "num_res_blocks": 1,
        "attn_resolutions": [],
    }


def chameleon_network(vocab: dict[str, int], seed: int = 0) -> ChameleonForConditionalGeneration:
    torch.manual_seed(seed)
    config = ChameleonConfig(
        vocab_size=len(vocab) + 4,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        vq_config=chameleon_vq_config(),
        vocabulary_map=vocab,
    )
    network = ChameleonForConditionalGeneration(config).eval()
    widen([network.model.layers])
    with torch.no_grad():
        network.model.embed_tokens.weight.normal_(0, 1.0)
    widen([network.lm_head])
    with torch.no_grad():
        for parameter in network.model.vqmodel.parameters():
            parameter.normal_(0, 0.3)
    return network


def chameleon_parts() -> tuple[ChameleonForConditionalGeneration, ChameleonProcessor]:
    vocab = chameleon_vocab()
    return chameleon_network(vocab), chameleon_processor(vocab)


def anole(*, fast_path: bool = False) -> AnoleModel:
    return AnoleModel.from_model(*chameleon_parts(), grid=CHAMELEON_GRID, fast_path=fast_path)


def lumina(*, fast_path: bool = False) -> LuminaMGPTModel:
    return LuminaMGPTModel.from_model(*chameleon_parts(), grid=CHAMELEON_GRID, fast_path=fast_path)


# ---- LlamaGen ----------------------------------------------------------------------------------

LLAMAGEN_CODES = 64
LLAMAGEN_CLASSES = 10
LLAMAGEN_VQ = VQDecoderConfig(
    codebook_size=LLAMAGEN_CODES, codebook_embed_dim=8, z_channels=32, base_channels=32, channel_multipliers=(1, 2)
)
T5_WORDS = ["<pad>", "</s>", "<unk>", "a", "red", "apple", "smiling", "cat", "on", "the", "moon"]


def llamagen_config(**overrides) -> LlamaGenConfig:
    """A few-thousand-parameter LlamaGen: 4x4 grid, 64 codes, 10 classes."""
    base = LlamaGenConfig(
        dim=32,
        n_layer=2,
        n_head=4,
        n_kv_head=2,
        multiple_of=16,
        vocab_size=LLAMAGEN_CODES,
        block_size=16,
        num_classes=LLAMAGEN_CLASSES,
    )
    return replace(base, **overrides)


def llamagen_vq(seed: int = 1) -> VQDecoder:
    torch.manual_seed(seed)
    return VQDecoder(LLAMAGEN_VQ).eval()


def llamagen_c2i(seed: int = 0, *, fast_path: bool = False) -> LlamaGenModel:
    torch.manual_seed(seed)
    return LlamaGenModel.from_model(LlamaGenTransformer(llamagen_config()), llamagen_vq(), fast_path=fast_path)


def tiny_t5() -> tuple[T5EncoderModel, PreTrainedTokenizerFast]:
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(T5_WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    torch.manual_seed(2)
    config = T5Config(vocab_size=len(T5_WORDS), d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, pad_token_id=0)
    return T5EncoderModel(config).eval(), tokenizer


def llamagen_t2i(*, fast_path: bool = False) -> LlamaGenModel:
    torch.manual_seed(3)
    gpt = LlamaGenTransformer(llamagen_config(model_type="t2i", caption_dim=16, cls_token_num=8))
    with torch.no_grad():
        gpt.cls_embedding.uncond_embedding.normal_(0, 0.25)  # the release draws it at random, then trains it
    encoder, tokenizer = tiny_t5()
    return LlamaGenModel.from_model(gpt, llamagen_vq(), text_encoder=encoder, tokenizer=tokenizer, fast_path=fast_path)


# ---- the embedded model ------------------------------------------------------------------------


# ---- every family ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """A family's test model, a prompt and guidance scale that suit it, and its uncached reference.
    `build(fast_path=True)` builds the same model (the same seeded weights) on its fast path."""

    name: str
    build: Callable[..., ImageModel]
    prompt: str
    guidance_scale: float
    uncached: UncachedFn
    combine: CombineFn = combine_guidance


FAMILIES = {
    family.name: family
    for family in [
        Family("tiny", TinyModel.load, "red apple", 3.0, tiny_uncached),
        Family("janus-pro", janus, "a red apple", 5.0, janus_uncached),
        Family("emu3", emu3, "a red apple", 3.0, emu3_uncached, combine_log_softmax),
        Family("anole", anole, "a red apple", 3.0, chameleon_uncached),
        Family("lumina-mgpt", lumina, "a red apple", 3.0, chameleon_uncached),
        Family("llamagen-c2i", llamagen_c2i, "3", 4.0, llamagen_uncached),
        Family("llamagen-t2i", llamagen_t2i, "a red apple", 7.5, llamagen_uncached),
    ]
}


def valid_tokens(model: ImageModel, count: int, seed: int = 3, start: int = 0) -> torch.Tensor:
    """`count` method ids for positions start.. : random image codes, the forced token at layout slots."""
    layout = model.geometry.layout
    codes = model.geometry.vocab_size - len({entry for entry in layout if entry != IMAGE_CELL})
    drawn = torch.randint(0, codes, (count,), generator=torch.Generator().manual_seed(seed))
    forced = torch.tensor(layout[start : start + count])
    return torch.where(forced == IMAGE_CELL, drawn, forced)
