"""Registered model families: how to load each, and whether it can run offline here.

Light: every entry imports its model's code (and torch) only when it loads, reads settings or checks
its files, so the command line lists the models in its help without importing torch.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specviz.core.errors import ModelUnavailable, UnknownModel
from specviz.core.inputs import brief, look_up, shown_path
from specviz.core.settings import SamplingSettings

if TYPE_CHECKING:
    from specviz.models.protocol import ImageModel


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str
    load: Callable[..., ImageModel]
    offline: Callable[[], str | None]  # None when it can load with no network, else the reason
    # the loaded model's `default_sampling`, known without loading weights (the app shows it first)
    sampling: Callable[[], SamplingSettings]
    # the captions the weights were trained on, where the project knows them (the app offers them)
    known_prompts: Callable[[], list[str]] = list
    # tokens are vectors sampled by a diffusion head (a draft/target pair): methods for continuous tokens
    continuous: bool = False
    # the draft models `--draft` may name (a continuous pair whose draft is chosen at load)
    drafts: tuple[str, ...] = ()
    # a continuous pair loaded with a draft model (the speculative methods need one)
    has_draft: bool = False
    # generates the grid in a random order drawn per image (MAR): its traces record the order, which its
    # decoder takes; a raster model's decoder takes none
    random_order: bool = False
    # takes `fast_path` at load: a static cache, fixed-width passes and CUDA graphs (`fixed_passes`)
    fast_path: bool = False

    @property
    def class_conditional(self) -> bool:
        """Its prompts are ImageNet classes (an index or a name), not free text."""
        return self.known_prompts is _class_names


def _tiny_load(name: str, weights: str | None = None, device: str = "cpu", fast_path: bool = False) -> ImageModel:
    from specviz.models.tiny.adapter import TinyModel

    return TinyModel.load(weights, device, name, fast_path)


def _tiny_offline(name: str) -> str | None:
    from specviz.models.tiny.adapter import SHIPPED, WEIGHT_FILES

    missing = [file for file in WEIGHT_FILES if not (SHIPPED[name] / file).is_file()]
    return f"missing {', '.join(missing)} in {SHIPPED[name]}" if missing else None


def _tiny_sampling(name: str) -> SamplingSettings:
    from specviz.models.tiny.adapter import SHIPPED, read_summary

    return read_summary(SHIPPED[name])[1]


def _tiny_known_prompts(name: str = "tiny") -> list[str]:
    """prompts.json beside the shipped weights: the names of the emoji they were trained on."""
    from specviz.models.tiny.adapter import SHIPPED

    try:
        names = json.loads((SHIPPED[name] / "prompts.json").read_text())
    except (OSError, ValueError):
        return []
    return [entry for entry in names if isinstance(entry, str)] if isinstance(names, list) else []


def _tiny_entry(name: str, description: str) -> ModelEntry:
    return ModelEntry(
        name,
        description,
        functools.partial(_tiny_load, name),
        functools.partial(_tiny_offline, name),
        functools.partial(_tiny_sampling, name),
        functools.partial(_tiny_known_prompts, name),
        fast_path=True,
    )


def _tiny_continuous_load(weights: str | None = None, device: str = "cpu") -> ImageModel:
    from specviz.models.tiny_continuous.adapter import TinyContinuousModel

    return TinyContinuousModel.load(weights, device)


def _tiny_continuous_offline() -> str | None:
    from specviz.models.tiny_continuous.adapter import ASSETS, WEIGHT_FILES

    missing = [name for name in WEIGHT_FILES if not (ASSETS / name).is_file()]
    return f"missing {', '.join(missing)} in {ASSETS}" if missing else None


def _tiny_continuous_sampling() -> SamplingSettings:
    from specviz.models.tiny_continuous.adapter import read_sampling

    return read_sampling()


def _mar_load(name: str) -> Callable[..., ImageModel]:
    def load(weights: str | None = None, device: str = "cpu", draft: str | None = "default") -> ImageModel:
        from specviz.models.mar.adapter import MarPair

        return MarPair.load(name, weights, device, draft)

    return load


def _mar_offline(name: str) -> Callable[[], str | None]:
    def offline() -> str | None:
        from specviz.models.mar.adapter import offline_reason

        return offline_reason(name)

    return offline


def _mar_sampling(name: str) -> Callable[[], SamplingSettings]:
    def sampling() -> SamplingSettings:
        from specviz.models.mar.adapter import release_sampling

        return release_sampling(name)

    return sampling


def _class_names() -> list[str]:
    from specviz.models.imagenet import class_label, class_names

    return [class_label(index) for index in range(len(class_names()))]


def _janus_load(weights: str | None = None, device: str = "cpu", fast_path: bool = False) -> ImageModel:
    from specviz.models.janus.adapter import JanusProModel

    return JanusProModel.load(weights, device, fast_path=fast_path)


def _janus_offline() -> str | None:
    from specviz.models.hub import offline_reason
    from specviz.models.janus.adapter import ENV_VAR, HUB_ID

    return offline_reason(ENV_VAR, HUB_ID)


def _janus_sampling() -> SamplingSettings:
    from specviz.models.janus.adapter import JanusProModel

    return JanusProModel.default_sampling


def _emu3_load(weights: str | None = None, device: str = "cpu", fast_path: bool = False) -> ImageModel:
    from specviz.models.emu3.adapter import Emu3Model

    return Emu3Model.load(weights, device, fast_path=fast_path)


def _emu3_offline() -> str | None:
    from specviz.models.emu3.adapter import ENV_VAR, HUB_ID
    from specviz.models.hub import offline_reason

    return offline_reason(ENV_VAR, HUB_ID)


def _emu3_sampling() -> SamplingSettings:
    from specviz.models.emu3.adapter import Emu3Model

    return Emu3Model.default_sampling


def _anole_load(weights: str | None = None, device: str = "cpu", fast_path: bool = False) -> ImageModel:
    from specviz.models.chameleon.adapter import AnoleModel

    return AnoleModel.load(weights, device, fast_path=fast_path)


def _anole_offline() -> str | None:
    from specviz.models.chameleon.adapter import AnoleModel

    return AnoleModel.offline()


def _anole_sampling() -> SamplingSettings:
    from specviz.models.chameleon.adapter import AnoleModel

    return AnoleModel.default_sampling


def _lumina_load(weights: str | None = None, device: str = "cpu", fast_path: bool = False) -> ImageModel:
    from specviz.models.chameleon.adapter import LuminaMGPTModel

    return LuminaMGPTModel.load(weights, device, fast_path=fast_path)


def _lumina_offline() -> str | None:
    from specviz.models.chameleon.adapter import LuminaMGPTModel

    return LuminaMGPTModel.offline()


def _lumina_sampling() -> SamplingSettings:
    from specviz.models.chameleon.adapter import LuminaMGPTModel

    return LuminaMGPTModel.default_sampling


def _llamagen_load(variant: str) -> Callable[..., ImageModel]:
    def load(weights: str | None = None, device: str = "cpu", fast_path: bool = False) -> ImageModel:
        from specviz.models.llamagen.adapter import LlamaGenModel

        return LlamaGenModel.load(weights, device, variant=variant, fast_path=fast_path)

    return load


def _llamagen_offline(variant: str) -> Callable[[], str | None]:
    def offline() -> str | None:
        from specviz.models.llamagen.adapter import offline_reason

        return offline_reason(variant)

    return offline


def _llamagen_sampling(variant: str) -> Callable[[], SamplingSettings]:
    def sampling() -> SamplingSettings:
        from specviz.models.llamagen.adapter import RELEASE_SAMPLING

        return RELEASE_SAMPLING[variant]

    return sampling


MODELS: dict[str, ModelEntry] = {
    "tiny": _tiny_entry(
        "tiny",
        "embedded 12M-parameter text-to-emoji Llama over 1024 patch codes, 16x16 grid: one design per emoji, "
        "learnt by heart, so recognisable and nearly certain (OpenMoji, CC BY-SA 4.0)",
    ),
    "tiny-uncertain": _tiny_entry(
        "tiny-uncertain",
        "embedded 6M-parameter text-to-emoji Llama like tiny, trained on four designs per emoji with textured "
        "tokens, so uncertain as real models are; vaguer drawings (OpenMoji, Noto, Twemoji, Fluent)",
    ),
    "tiny-continuous": ModelEntry(
        "tiny-continuous",
        "embedded continuous-token pair for CSpD: a target and a smaller draft, causal Llamas over projected 3x3 "
        "patches (12 numbers per cell, 16x16 grid), each with a MAR-style diffusion head, trained on tiny-uncertain's "
        "four designs per emoji (OpenMoji, Noto, Twemoji, Fluent)",
        _tiny_continuous_load,
        _tiny_continuous_offline,
        _tiny_continuous_sampling,
        functools.partial(_tiny_known_prompts, "tiny-uncertain"),  # the same captions
        continuous=True,
        has_draft=True,
    ),
    "janus-pro": ModelEntry(
        "janus-pro",
        "Janus-Pro 1B (7B: --weights deepseek-community/Janus-Pro-7B), 384 px, 24x24 grid over 16384 codes, "
        "guidance 5; transformers weights, a GPU recommended",
        _janus_load,
        _janus_offline,
        _janus_sampling,
        fast_path=True,
    ),
    "emu3": ModelEntry(
        "emu3",
        "Emu3-Gen 8B, 720 px, 90x90 grid with an end-of-line slot after every row, 32768 codes, top-k 2048, "
        "guidance 3; transformers weights, a GPU with about 22 GiB",
        _emu3_load,
        _emu3_offline,
        _emu3_sampling,
        fast_path=True,
    ),
    "anole": ModelEntry(
        "anole",
        "Anole 7B (Chameleon), 512 px, 32x32 grid over 8192 codes, temperature 0.7, top-p 0.9, guidance 3; "
        "transformers weights plus the Chameleon tokenizer's vqgan.ckpt, a GPU with about 18 GiB",
        _anole_load,
        _anole_offline,
        _anole_sampling,
        fast_path=True,
    ),
    "lumina-mgpt": ModelEntry(
        "lumina-mgpt",
        "Lumina-mGPT 7B (Chameleon), 768 px, 48x48 grid with a row-end slot after every row, 8192 codes, "
        "top-k 2000, guidance 3; transformers weights plus the Chameleon tokenizer's vqgan.ckpt, a GPU with "
        "about 18 GiB",
        _lumina_load,
        _lumina_offline,
        _lumina_sampling,
        fast_path=True,
    ),
    "llamagen-c2i": ModelEntry(
        "llamagen-c2i",
        "LlamaGen-L class-conditional ImageNet (343M, c2i_L_256.pt + vq_ds16_c2i.pt), 256 px, 16x16 grid over "
        "16384 codes; prompt = class index or name; release defaults top-k 2000, guidance 4, temperature 1",
        _llamagen_load("c2i"),
        _llamagen_offline("c2i"),
        _llamagen_sampling("c2i"),
        _class_names,
        fast_path=True,
    ),
    "llamagen-t2i": ModelEntry(
        "llamagen-t2i",
        "LlamaGen-XL text-to-image (775M, t2i_XL_stage1_256.pt + vq_ds16_t2i.pt, FLAN-T5-XL text features), "
        "256 px, 16x16 grid over 16384 codes; release defaults top-k 1000, guidance 7.5",
        _llamagen_load("t2i"),
        _llamagen_offline("t2i"),
        _llamagen_sampling("t2i"),
        fast_path=True,
    ),
    "mar-b": ModelEntry(
        "mar-b",
        "MAR-B class-conditional ImageNet (208M; continuous tokens: 16x16 grid of KL-16 latents, 16 numbers each, "
        "a diffusion MLP head, random generation order), 256 px; prompt = class index or name; no draft (ar only); "
        "weights: mar-base.safetensors + kl16.safetensors of jadechoghari/mar",
        _mar_load("mar-b"),
        _mar_offline("mar-b"),
        _mar_sampling("mar-b"),
        _class_names,
        continuous=True,
        random_order=True,
    ),
    "mar-l": ModelEntry(
        "mar-l",
        "MAR-L class-conditional ImageNet (479M) with MAR-B drafting (CSpD's pair; --draft none for none), 256 px; "
        "weights: mar-large.safetensors, mar-base.safetensors, kl16.safetensors of jadechoghari/mar",
        _mar_load("mar-l"),
        _mar_offline("mar-l"),
        _mar_sampling("mar-l"),
        _class_names,
        continuous=True,
        drafts=("mar-b",),
        has_draft=True,
        random_order=True,
    ),
    "mar-h": ModelEntry(
        "mar-h",
        "MAR-H class-conditional ImageNet (943M) with MAR-B drafting (--draft mar-l or none), 256 px; weights: "
        "mar-huge.safetensors, the draft's, kl16.safetensors of jadechoghari/mar; a GPU recommended",
        _mar_load("mar-h"),
        _mar_offline("mar-h"),
        _mar_sampling("mar-h"),
        _class_names,
        continuous=True,
        drafts=("mar-b", "mar-l"),
        has_draft=True,
        random_order=True,
    ),
}


def get_entry(name: str) -> ModelEntry:
    return look_up(MODELS, name, "model", UnknownModel, listed="registered")


def load_model(
    name: str, weights: str | None = None, device: str = "cpu", draft: str | None = None, *, fast_path: bool = False
) -> ImageModel:
    """Load a registered model (a continuous pair with the draft `draft` names, "none" for none, where it
    takes one; on the fast path, where it has one); raises UnknownModel or ModelUnavailable with a clear message."""
    entry = get_entry(name)
    options: dict = {}
    if fast_path:
        if not entry.fast_path:
            takers = ", ".join(other.name for other in MODELS.values() if other.fast_path)
            raise ModelUnavailable(f"{name} has no fast path (--fast-path is for {takers})")
        options["fast_path"] = True
    if draft is not None:
        optional = entry.drafts or (entry.continuous and not entry.has_draft)  # mar-b: "none" is its only draft
        if not optional or (draft != "none" and not entry.drafts):
            raise ModelUnavailable(f"{name} takes no --draft (only mar-l and mar-h choose their draft model)")
        if draft != "none" and draft not in entry.drafts:
            raise ModelUnavailable(
                f"{name}: the draft model can be {', '.join(entry.drafts)} or none, not {brief(draft)}"
            )
        options["draft"] = None if draft == "none" else draft
    import torch

    try:
        return entry.load(weights=weights, device=device, **options)
    except torch.OutOfMemoryError as error:
        raise ModelUnavailable(f"{name}: out of memory while loading on {device} ({error})") from error
    except OSError as error:  # a weights path the file system refuses (a name too long, a loop of links)
        where = f"in {shown_path(weights)}" if weights else "shipped with the project"
        raise ModelUnavailable(f"{name}: cannot read the weights {where}: {error.strerror or error}") from None
