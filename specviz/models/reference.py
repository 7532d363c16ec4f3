"""Each family's uncached reference: one plain forward of the whole sequence per guidance row, written
against the family's network, not the adapter's session, cache or fast path.

A cached session's logits must equal these (the contract tests check it on random weights; `check-model`
on a user's weights). Only the prompt's ids, the unconditional row and the map from method ids to the
network's vocabulary come from the adapter, as they are what the authors' code builds and a reference of
our own would only copy them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specviz.models.chameleon.adapter import ChameleonImageModel
from specviz.models.emu3.adapter import Emu3Model, combine_log_softmax
from specviz.models.janus.adapter import JanusProModel
from specviz.models.llamagen.adapter import LlamaGenModel, condition_mask, parse_class
from specviz.models.protocol import IMAGE_CELL, ImageModel
from specviz.models.session import CombineFn, combine_guidance
from specviz.models.tiny.adapter import TinyModel
from specviz.models.tiny.text import shared_text_encoder

# (model, prompt, guidance scale, tokens (n,)) -> raw logits (rows, n + 1, V) of every generated position
UncachedFn = Callable[[ImageModel, str, float, torch.Tensor], torch.Tensor]


@torch.no_grad()
def janus_uncached(model: JanusProModel, prompt: str, scale: float, tokens: torch.Tensor) -> torch.Tensor:
    """The language model over the prompt's embeddings and the generated tokens' image embeddings, then
    Janus's generation head."""
    network = model.network
    ids = model.prompt_ids(prompt)
    rows = [ids, model.unconditional_ids(ids)] if scale != 1.0 else [ids]
    generated = network.prepare_embeddings_for_image_generation(tokens[None].to(ids.device))
    raw = []
    for row in rows:
        embeds = torch.cat([network.get_input_embeddings()(row), generated], dim=1)
        hidden = network.model.language_model(inputs_embeds=embeds).last_hidden_state[0]
        raw.append(network.model.generation_head(hidden[row.shape[1] - 1 :]))
    return torch.stack(raw)


@torch.no_grad()
def emu3_uncached(model: Emu3Model, prompt: str, scale: float, tokens: torch.Tensor) -> torch.Tensor:
    """The full LM head at the visual tokens, the end-of-line column masked as the adapter does."""
    rows = [model.prompt_ids(prompt), model.negative_ids()] if scale != 1.0 else [model.prompt_ids(prompt)]
    raw = []
    for ids in rows:
        sequence = torch.cat([ids, model.method_to_text[tokens.to(ids.device)][None]], dim=1)
        logits = model.network(input_ids=sequence).logits[0, ids.shape[1] - 1 :, model.visual_ids]
        raw.append(torch.cat([logits, torch.full((len(logits), 1), float("-inf"), device=logits.device)], dim=1))
    return torch.stack(raw)


@torch.no_grad()
def chameleon_uncached(model: ChameleonImageModel, prompt: str, scale: float, tokens: torch.Tensor) -> torch.Tensor:
    """lm_head(hidden) at the image ids (transformers' forward masks them all), row end masked."""
    rows = [model.prompt_ids(prompt), model.unconditional_ids()] if scale != 1.0 else [model.prompt_ids(prompt)]
    raw = []
    for ids in rows:
        sequence = torch.cat([ids, model.method_to_text[tokens.to(ids.device)][None]], dim=1)
        hidden = model.network.model(input_ids=sequence).last_hidden_state[0, ids.shape[1] - 1 :]
        logits = model.network.lm_head(hidden)[:, model.image_ids]
        if model.row_ends:
            logits = torch.cat([logits, torch.full((len(logits), 1), float("-inf"), device=logits.device)], dim=1)
        raw.append(logits)
    return torch.stack(raw)


@torch.no_grad()
def llamagen_uncached(model: LlamaGenModel, prompt: str, scale: float, tokens: torch.Tensor) -> torch.Tensor:
    """c2i: the class's and the null class's embedding rows; t2i: the caption's features and the
    learned null caption, caption padding hidden."""
    gpt = model.gpt
    tokens = tokens.to(model.device)
    if model.t2i:
        features, valid = model.caption_features(prompt)
        captions = [features, gpt.cls_embedding.uncond_embedding[None]] if scale != 1.0 else [features]
        conditions = [gpt.cls_embedding(caption) for caption in captions]
        key_valid = torch.cat([valid, torch.ones(1, len(tokens), dtype=torch.bool, device=valid.device)], dim=1)
        mask = condition_mask(key_valid)
    else:
        table = gpt.cls_embedding.embedding_table.weight
        labels = [parse_class(prompt, gpt.config.num_classes)]
        labels += [gpt.config.num_classes] if scale != 1.0 else []
        conditions = [table[label].view(1, 1, -1) for label in labels]
        mask = None
    raw = []
    for condition in conditions:
        sequence = torch.cat([condition, gpt.tok_embeddings(tokens[None])], dim=1)
        raw.append(gpt(sequence, attention_mask=mask)[0, condition.shape[1] - 1 :])
    return torch.stack(raw)


@torch.no_grad()
def tiny_uncached(model: TinyModel, prompt: str, scale: float, tokens: torch.Tensor) -> torch.Tensor:
    """The prompt's prefix and the learned null prefix."""
    network = model.network
    text = shared_text_encoder()([prompt]).to(model.device)
    prefixes = [network.prefix(text), network.prefix(None, 1)] if scale != 1.0 else [network.prefix(text)]
    raw = []
    for prefix in prefixes:
        embeds = torch.cat([prefix, network.embed_tokens(tokens[None].to(model.device))], dim=1)
        raw.append(network.lm(inputs_embeds=embeds).logits[0, network.config.prefix_len - 1 :])
    return torch.stack(raw)


REFERENCES: dict[type, tuple[UncachedFn, CombineFn]] = {
    JanusProModel: (janus_uncached, combine_guidance),
    Emu3Model: (emu3_uncached, combine_log_softmax),
    ChameleonImageModel: (chameleon_uncached, combine_guidance),
    LlamaGenModel: (llamagen_uncached, combine_guidance),
    TinyModel: (tiny_uncached, combine_guidance),
}


def reference_of(model: ImageModel) -> tuple[UncachedFn, CombineFn] | None:
    """The model's family's uncached forward and its guidance combination; None for a model with none."""
    for family, reference in REFERENCES.items():
        if isinstance(model, family):
            return reference
    return None


def uncached_logits(model: ImageModel, prompt: str, scale: float, tokens: torch.Tensor) -> torch.Tensor:
    """The combined logits (n + 1, V) of every position from the first, given `tokens` (n,) before them."""
    reference = reference_of(model)
    if reference is None:
        raise ValueError(f"{getattr(model, 'name', 'this model')} has no uncached reference")
    uncached, combine = reference
    return combine(uncached(model, prompt, scale, tokens), scale)


def uncached_greedy(model: ImageModel, prompt: str, scale: float, count: int | None = None) -> list[int]:
    """Greedy decoding of the first `count` positions (all by default) by uncached full passes over every
    row, layout slots forced."""
    tokens: list[int] = []
    for entry in model.geometry.layout[:count]:
        if entry != IMAGE_CELL:
            tokens.append(entry)
            continue
        logits = uncached_logits(model, prompt, scale, torch.tensor(tokens, dtype=torch.long))[-1]
        tokens.append(int(logits.argmax()))
    return tokens
