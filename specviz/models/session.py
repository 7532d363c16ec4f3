"""The session layer every family shares: KV-cached passes over chains and draft trees.

A session holds one batch row for the prompt and, when guidance is on, a second row for the
unconditional prompt; both rows see the same generated tokens. The model-specific part is one
function, `run(tokens, cache, attention_mask, position_ids) -> raw logits`. The session owns the
rest: the attention mask (prompt padding hidden, a draft tree's ancestor mask), the position ids,
guidance, layout forcing, and which cache entries survive a commit. Rejected drafts are cropped
from the cache (`crop(-n)`, a negative count in transformers 5); an accepted tree path that is not
the first tokens appended is gathered into place first, as EAGLE does.

A plain chain pass over unpadded prompts passes no mask and no positions, so the model takes its
own causal fast path. Over a static cache (`specviz.models.fast.fixed_passes`, the fast path, which
`prefilled_session` moves a prefilled prompt onto) every pass passes both: its keys span the cache's
whole length, the slots not written yet included.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache, StaticCache

from specviz.models.fast.fixed_passes import RunFn, StaticPool, rewind_static_cache
from specviz.models.protocol import IMAGE_CELL, Geometry
from specviz.models.syncing import intended_sync

CombineFn = Callable[[torch.Tensor, float], torch.Tensor]


def combine_guidance(raw: torch.Tensor, scale: float) -> torch.Tensor:
    """uncond + scale * (cond - uncond) on raw logits; row 0 is conditional, row 1 unconditional.

    A token masked (-inf) in either row stays masked instead of turning into NaN.
    """
    if raw.shape[0] == 1:
        return raw[0]
    cond, uncond = raw[0], raw[1]
    return (uncond + scale * (cond - uncond)).nan_to_num(nan=float("-inf"))


@dataclass(frozen=True)
class PromptRows:
    """Where the prefilled prompt rows sit in the cache.

    `width` cache entries precede the first generated token in every row. `visible` (rows, width)
    marks the prompt keys that may be attended (None: all), `first_position` (rows,) the position id
    of each row's first generated token (None: `width`); left-padded rows need both.
    """

    width: int
    visible: torch.Tensor | None = None
    first_position: torch.Tensor | None = None

    @classmethod
    def left_padded(cls, lengths: Sequence[int], device: torch.device) -> PromptRows:
        """Rows of these prompt lengths, shorter ones padded on the left to the longest."""
        width = max(lengths)
        if all(length == width for length in lengths):
            return cls(width)
        lengths = torch.tensor(lengths, device=device)
        visible = torch.arange(width, device=device)[None, :] >= (width - lengths)[:, None]
        return cls(width, visible, lengths)

    @property
    def plain(self) -> bool:
        """No prompt key hidden and positions counted from the cache length: no mask needed."""
        hidden = self.visible is not None and not bool(self.visible.all())
        shifted = self.first_position is not None and bool((self.first_position != self.width).any())
        return not hidden and not shifted


def tree_structure(parents: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, n) ancestor mask (each token sees itself and its ancestors) and (n,) depths of a draft tree.

    `parents[i]` is the index of token i's parent, or -1 for a child of the committed prefix;
    parents come before their children.
    """
    depth: list[int] = []
    paths: list[list[int]] = []
    for index, parent in enumerate(parents):
        if not -1 <= parent < index:
            raise ValueError(f"parents[{index}] = {parent}: a parent is -1 or the index of an earlier token")
        paths.append([*paths[parent], index] if parent >= 0 else [index])
        depth.append(len(paths[-1]) - 1)
    queries = [index for index, path in enumerate(paths) for _ in path]
    keys = [key for path in paths for key in path]
    ancestors = torch.zeros(len(parents), len(parents), dtype=torch.bool)
    ancestors[queries, keys] = True
    return ancestors, torch.tensor(depth)


@dataclass(frozen=True)
class TreeMask:
    """A draft tree as a pass needs it: `parents` on the host (to check a kept path), the ancestor mask
    (n, n) and the depths (n,) on the device. Built once per tree, in one copy to the device, so that
    the pass itself copies nothing there."""

    parents: list[int]
    ancestors: torch.Tensor  # (n, n) bool
    depth: torch.Tensor  # (n,) long

    @classmethod
    def on(cls, device: torch.device, parents: Sequence[int], *also: torch.Tensor) -> tuple[TreeMask, list]:
        """The tree's mask on `device`, and any further host tensors `also` sent in the same copy (as long)."""
        ancestors, depth = tree_structure(parents)
        n = len(parents)
        parts = [ancestors.view(-1).long(), depth, *(part.reshape(-1).long() for part in also)]
        with intended_sync():  # the tree's one copy to the device
            packed = torch.cat(parts).to(device)
        pieces = list(packed.split([part.numel() for part in parts]))
        mask = cls(list(parents), pieces[0].view(n, n).bool(), pieces[1])
        return mask, [piece.view(part.shape) for piece, part in zip(pieces[2:], also, strict=True)]


class CachedSession:
    """Implements the `Session` protocol over a prefilled cache and a model's `run` function."""

    def __init__(
        self,
        geometry: Geometry,
        cache: Any,
        prompt: PromptRows,
        prefill_logits: torch.Tensor,
        run: RunFn,
        guidance_scale: float,
        *,
        combine: CombineFn = combine_guidance,
        token_vectors: torch.Tensor | None = None,
        draft_head: Any = None,
        prefill_features: torch.Tensor | None = None,
    ):
        self.geometry = geometry
        self.token_vectors = token_vectors
        # an EAGLE head for this model (`specviz.models.networks.draft_head`), the prompt's last hidden state
        # (rows, H), and the last forward's hidden states (rows, n, H) it reads; None without a head
        self.draft_head = draft_head
        self.prefill_features = prefill_features
        self.features: torch.Tensor | None = None
        self.position = 0
        self.nfe = 1
        self.tokens_fed = 0  # tokens run through the model after the prefill, rejected ones included
        self._cache = cache
        self._prompt = prompt
        # a static cache's keys span its whole length: every pass needs a mask, padded to that length
        self._static_length = cache.get_max_length() if isinstance(cache, StaticCache) else None
        self._plain_prompt = prompt.plain and self._static_length is None
        self._run = run
        self._scale = guidance_scale
        self._combine = combine
        self._rows = prefill_logits.shape[0]
        self._device = prefill_logits.device
        self._pending = 0  # tokens in the cache after the committed prefix
        self._parents: list[int] | None = None  # the last forward's tree; None for a chain
        self._last: torch.Tensor | None = None
        # after a `forward_at`: the sequence position of every generated token in the cache, in cache
        # order, and whether it is still seen (a replaced stand-in is not); None while the cache is a prefix
        self._held: torch.Tensor | None = None
        self._live: torch.Tensor | None = None
        # the positions of the last `forward_at` with `sees`, on the device and on the host
        self._pending_positions: torch.Tensor | None = None
        self._pending_held: list[int] = []
        self._has_layout = any(entry != IMAGE_CELL for entry in geometry.layout)
        # the forced token of every position, and a sentinel for positions past the end
        self._layout_device = torch.tensor([*geometry.layout, IMAGE_CELL], device=self._device)
        self._token_ids = torch.arange(geometry.vocab_size, device=self._device)
        self._next = self._force(combine(prefill_logits.float(), guidance_scale).unsqueeze(0), 0, None)[0]

    @property
    def next_logits(self) -> torch.Tensor:
        return self._next

    @property
    def guidance_scale(self) -> float:
        return self._scale

    @property
    def widest_pass(self) -> int | None:
        """The most tokens one pass may feed (fixed-width passes over a static cache), None: no bound."""
        return getattr(self._run, "widest", None)

    def forward(
        self, tokens: torch.Tensor, parents: Sequence[int] | torch.Tensor | TreeMask | None = None
    ) -> torch.Tensor:
        if self._held is not None:
            raise ValueError("this session holds tokens out of raster order (forward_at); continue with forward_at")
        tokens = tokens.reshape(-1)
        count = tokens.shape[0]
        self._drop_pending(self._pending)
        depth = mask = positions = None  # a chain over plain prompts: the model's own causal fast path
        if parents is not None:
            if not isinstance(parents, TreeMask):  # a tree given by its parents: its mask goes to the device now
                host = parents.tolist() if isinstance(parents, torch.Tensor) else parents
                parents, _ = TreeMask.on(self._device, [int(p) for p in host])
            if len(parents.parents) != count:
                raise ValueError(f"{len(parents.parents)} parents for {count} tokens")
            depth = parents.depth
            mask, positions = self._attention(parents.ancestors, depth)
            parents = parents.parents
        elif not self._plain_prompt:
            causal = torch.ones(count, count, dtype=torch.bool, device=self._device).tril()
            mask, positions = self._attention(causal, torch.arange(count, device=self._device))
        with torch.inference_mode():
            raw = self._run(tokens.reshape(1, -1).expand(self._rows, -1), self._cache, mask, positions)
        if isinstance(raw, tuple):
            raw, self.features = raw
        self._pending, self._parents = count, parents
        self.nfe += 1
        self.tokens_fed += count
        self._last = self._force(self._combine(raw.float(), self._scale), self.position + 1, depth)
        return self._last

    def forward_at(
        self, tokens: torch.Tensor, positions: Sequence[int], sees: torch.Tensor | None = None
    ) -> torch.Tensor:
        """One pass feeding tokens at sequence positions out of raster order (several image rows in flight,
        as ZipAR and PJD decode): token i sits at `positions[i]`, and row i of the (n, V) logits is the
        distribution of position `positions[i] + 1`.

        Without `sees` the tokens are decided and stay: token i sees the prompt and every token held at an
        earlier position (this pass's included); a token fed at a position already held replaces the one
        there (a stand-in fed before its position was decided), which no later token sees. With `sees`,
        an (n, n) boolean host tensor, the pass is one of drafts (PJD): token i sees the prompt, every token
        held at an earlier position, itself, and those of this pass with `sees[i, j]`; positions
        may repeat, and none of the pass's tokens stays unless `keep` names it.

        Once a session has passed tokens this way its raster prefix (`position`, `commit`) no longer
        describes it, so `forward` refuses."""
        held = [int(position) for position in positions]
        tokens = tokens.reshape(-1)
        count = len(held)
        if len(tokens) != count or (sees is None and len(set(held)) != count):
            raise ValueError(f"{len(tokens)} tokens need {len(tokens)} distinct positions, got {held}")
        if not all(0 <= position < self.geometry.seq_len for position in held):
            raise ValueError(f"positions must lie in the sequence of {self.geometry.seq_len}, got {held}")
        if sees is not None and sees.shape != (count, count):
            raise ValueError(f"sees must be an ({count}, {count}) mask, got {tuple(sees.shape)}")
        self._drop_pending(self._pending)
        if self._held is None:  # the committed raster prefix, as held positions
            self._held = torch.arange(self.position, device=self._device)
            self._live = torch.ones(self.position, dtype=torch.bool, device=self._device)
        with intended_sync():  # the pass's positions (and what its tokens see), in one copy to the device
            if sees is None:
                new = torch.tensor(held, device=self._device)
            else:
                packed = torch.cat([torch.tensor(held), sees.reshape(-1).long()]).to(self._device)
                new, among = packed[:count], packed[count:].view(count, count).bool()
        if sees is None:
            self._live = torch.cat([self._live & ~torch.isin(self._held, new), torch.ones_like(new, dtype=torch.bool)])
            self._held = torch.cat([self._held, new])
            seen = self._live[None, :] & (self._held[None, :] <= new[:, None])  # (n, tokens held)
        else:
            earlier = self._live[None, :] & (self._held[None, :] < new[:, None])
            itself = torch.eye(count, dtype=torch.bool, device=self._device)
            seen = torch.cat([earlier, among | itself], dim=1)
            self._pending, self._pending_positions, self._pending_held = count, new, held
        prompt, rows = self._prompt, self._rows
        visible = prompt.visible
        if visible is None:
            visible = torch.ones(rows, prompt.width, dtype=torch.bool, device=self._device)
        mask = torch.cat([visible[:, None, :].expand(rows, count, -1), seen.expand(rows, -1, -1)], dim=-1)
        mask = self._to_cache_length(mask)
        first = prompt.first_position
        if first is None:
            first = torch.full((rows,), prompt.width, device=self._device)
        with torch.inference_mode():
            raw = self._run(
                tokens.reshape(1, -1).expand(rows, -1), self._cache, mask[:, None], first[:, None] + new[None, :]
            )
        if isinstance(raw, tuple):
            raw, self.features = raw
        self.nfe += 1
        self.tokens_fed += count
        return self._force(self._combine(raw.float(), self._scale), 1, new)

    def keep(self, indices: Sequence[int]) -> None:
        """Keep the tokens at `indices` of the last `forward_at` with `sees` (decided ones: accepted drafts, a
        row's head) and drop the rest from the cache; a kept token replaces the one held at its position,
        which no later token sees."""
        kept = [int(index) for index in indices]
        if not all(0 <= index < self._pending for index in kept):
            raise ValueError(f"cannot keep {kept} of the {self._pending} tokens of the last pass")
        if len({self._pending_held[index] for index in kept}) != len(kept):
            raise ValueError(f"the tokens kept, {kept}, must lie at distinct positions")
        if not kept:
            self._drop_pending(self._pending)
            return
        start = self._prompt.width + len(self._held)
        if kept == list(range(len(kept))):
            new = self._pending_positions[: len(kept)]
        else:
            new = self._pending_positions[self._gather(kept, start)]
        self._drop_pending(self._pending - len(kept))
        self._live = torch.cat([self._live & ~torch.isin(self._held, new), torch.ones_like(new, dtype=torch.bool)])
        self._held = torch.cat([self._held, new])

    def commit(self, keep: int | Sequence[int] | torch.Tensor) -> None:
        """Keep the first `keep` tokens of the last forward, or the root-to-node path `keep` of its tree."""
        if isinstance(keep, torch.Tensor):
            keep = keep.tolist()
        if isinstance(keep, Sequence):
            path = [int(index) for index in keep]
        else:
            count = operator.index(keep)
            if not 0 <= count <= self._pending:
                raise ValueError(f"cannot commit {count} of {self._pending} appended tokens")
            path = list(range(count))
        self._check_path(path)
        count = len(path)
        if path != list(range(count)):
            self._gather(path, self._prompt.width + self.position)
        self._drop_pending(self._pending - count)
        if count:
            self._next = self._last[path[-1]]
            self.position += count

    def _check_path(self, path: list[int]) -> None:
        """Each kept token is a child of the one before it, the first a child of the committed prefix."""
        parent = -1
        for index in path:
            if not 0 <= index < self._pending:
                raise ValueError(f"cannot commit token {index} of {self._pending} appended tokens")
            actual = index - 1 if self._parents is None else self._parents[index]
            if actual != parent:
                raise ValueError(f"{path} is not a root-to-node path of the last forward's tokens")
            parent = index

    def _drop_pending(self, count: int) -> None:
        """Take the last `count` appended tokens out of the cache. A static cache only moves its write
        position back, on the device (transformers' own `crop` of a static layer, which not every
        transformers 5 release has), and the next pass overwrites the slots."""
        if count and self._static_length is None:
            self._cache.crop(-count)
        elif count:
            rewind_static_cache(self._cache, count)
        self._pending = 0

    def _to_cache_length(self, mask: torch.Tensor) -> torch.Tensor:
        """A mask over the cache after the pass (..., keys), hiding a static cache's unwritten slots."""
        if self._static_length is None:
            return mask
        if mask.shape[-1] > self._static_length:
            raise ValueError(f"a pass needs {mask.shape[-1]} cache slots; the static cache holds {self._static_length}")
        return F.pad(mask, (0, self._static_length - mask.shape[-1]), value=False)

    def _gather(self, path: list[int], start: int) -> torch.Tensor:
        """Move the keys and values of the pending tokens at `path` (indices from cache slot `start`) to the
        slots from `start`, in that order; returns `path` on the device."""
        with intended_sync():  # the kept path's one copy to the device
            index = torch.tensor(path, device=self._device)
        if not isinstance(self._cache, DynamicCache | StaticCache):
            raise TypeError(f"cannot keep a tree path in a {type(self._cache).__name__}; use a DynamicCache")
        source = index + start
        with torch.inference_mode():
            for layer in self._cache.layers:
                layer.keys[..., start : start + len(path), :] = layer.keys[..., source, :]
                layer.values[..., start : start + len(path), :] = layer.values[..., source, :]
        return index

    def _attention(self, ancestors: torch.Tensor, depth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Boolean mask (rows, 1, n, cache length after the pass) and position ids (rows, n) of a pass:
        the visible prompt, the committed tokens, and among the new tokens `ancestors` (n, n); `ancestors`
        and `depth` are on the session's device already."""
        prompt, rows, count, device = self._prompt, self._rows, len(depth), self._device
        visible = prompt.visible
        if visible is None:
            visible = torch.ones(rows, prompt.width, dtype=torch.bool, device=device)
        committed = torch.ones(rows, count, self.position, dtype=torch.bool, device=device)
        new = ancestors.expand(rows, count, count)
        mask = self._to_cache_length(torch.cat([visible[:, None, :].expand(rows, count, -1), committed, new], dim=-1))
        mask = mask[:, None]
        first = prompt.first_position
        if first is None:
            first = torch.full((rows,), prompt.width, device=device)
        positions = first[:, None] + self.position + depth[None, :]
        return mask, positions

    def _force(self, logits: torch.Tensor, first: int, depth: torch.Tensor | None) -> torch.Tensor:
        """One-hot logits where row i predicts a layout slot: position `first + depth[i]` (first + i in a
        chain). Computed on the logits' device without reading anything back, so a pass stays free of
        host syncs."""
        if not self._has_layout:
            return logits
        steps = torch.arange(len(logits), device=logits.device) if depth is None else depth
        positions = (first + steps).clamp(max=self.geometry.seq_len)  # past the end: the sentinel, no slot
        forced = self._layout_device[positions]
        one_hot = torch.where(self._token_ids == forced[:, None], 0.0, float("-inf"))
        return torch.where((forced != IMAGE_CELL)[:, None], one_hot, logits)


# ---- transformers models -------------------------------------------------------------------------


@functools.cache
def _cache_keyword(module_type: type) -> str:
    """The keyword a transformers module's forward takes its cache by: `cache` since transformers renamed
    it in 5.24 (`past_key_values` warns from there and is removed in 5.40), `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(module_type.forward).parameters else "past_key_values"


def cache_keyword(module: torch.nn.Module, cache) -> dict[str, Any]:
    """`cache` as the keyword argument `module`'s forward takes it by, in whichever transformers is installed."""
    return {_cache_keyword(type(module)): cache}


def transformers_mask(mask: torch.Tensor | None, config, dtype: torch.dtype) -> torch.Tensor | None:
    """The session's boolean mask as a ready 4D mask for the model's attention implementation.

    transformers 5 passes a 4D mask through unchanged (`masking_utils._preprocess_mask_arguments`);
    SDPA takes it boolean (True attends), eager attention adds it, so it needs 0 and the dtype's minimum.
    """
    if mask is None:
        return None
    implementation = config._attn_implementation
    if implementation == "sdpa":
        return mask
    if implementation == "eager":
        return torch.where(mask, torch.zeros((), dtype=dtype, device=mask.device), torch.finfo(dtype).min)
    raise ValueError(
        f"{implementation} attention takes no custom 4D mask, which padded prompts and draft trees need; "
        "load the model with attn_implementation='sdpa' or 'eager'"
    )


def image_head(weight: torch.Tensor, layout_tokens: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """hidden (..., H) -> logits (..., V + layout_tokens): the LM head rows of the image tokens (weight
    (V, H)) and masked (-inf) layout tokens, which the session forces where the layout has them."""

    def head(hidden: torch.Tensor) -> torch.Tensor:
        logits = F.linear(hidden, weight)
        if not layout_tokens:
            return logits
        return torch.cat([logits, logits.new_full((*logits.shape[:-1], layout_tokens), float("-inf"))], dim=-1)

    return head


def merge_left_padded(caches: list[DynamicCache], width: int, config) -> DynamicCache:
    """One cache holding every row's cache, shorter ones left-padded with zero keys and values."""
    layers = []
    for index in range(len(caches[0].layers)):
        rows = [cache.layers[index] for cache in caches]
        keys = [F.pad(row.keys, (0, 0, width - row.keys.shape[2], 0)) for row in rows]
        values = [F.pad(row.values, (0, 0, width - row.values.shape[2], 0)) for row in rows]
        layers.append((torch.cat(keys), torch.cat(values)))
    return DynamicCache(ddp_cache_data=layers, config=config)


@torch.inference_mode()
def separate_prompts_session(
    geometry: Geometry,
    prompts: list[torch.Tensor],
    decoder,
    input_ids: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    guidance_scale: float,
    *,
    combine: CombineFn = combine_guidance,
    token_vectors: torch.Tensor | None = None,
    draft_head=None,
    static: StaticPool | None = None,
) -> CachedSession:
    """A session over prompt rows (1, L) of any lengths, row 0 conditional, for a transformers decoder
    that takes input ids and returns `last_hidden_state`; `input_ids` maps method ids to its ids. With an
    EAGLE `draft_head` (`specviz.models.networks.draft_head`), every pass also keeps the decoder's last hidden states.
    With `static` (the model's pool), the session runs on the fast path (`prefilled_session`).

    Each row is prefilled alone, so no padding enters a prefill; the rows are then merged left-padded,
    and the session hides the padding and counts positions from each row's first real token, so every
    row sees exactly what it sees when run alone.
    """
    caches, last = [], []
    for ids in prompts:
        cache = DynamicCache(config=decoder.config)
        hidden = decoder(input_ids=ids, **cache_keyword(decoder, cache), use_cache=True).last_hidden_state
        caches.append(cache)
        last.append(hidden[:, -1])
    lengths = [ids.shape[1] for ids in prompts]
    prompt = PromptRows.left_padded(lengths, last[0].device)
    cache = caches[0] if len(caches) == 1 else merge_left_padded(caches, prompt.width, decoder.config)

    def run(tokens: torch.Tensor, cache: Any, mask: torch.Tensor | None, positions: torch.Tensor | None):
        hidden = decoder(
            input_ids=input_ids[tokens],
            attention_mask=transformers_mask(mask, decoder.config, decoder.dtype),
            position_ids=positions,
            **cache_keyword(decoder, cache),
            use_cache=True,
        ).last_hidden_state
        return (head(hidden), hidden) if draft_head is not None else head(hidden)

    return prefilled_session(
        geometry,
        cache,
        prompt,
        head(torch.cat(last)),
        run,
        guidance_scale,
        static=static,
        combine=combine,
        token_vectors=token_vectors,
        draft_head=draft_head,
        prefill_features=torch.cat(last) if draft_head is not None else None,
    )


def prefilled_session(
    geometry: Geometry,
    cache: DynamicCache,
    prompt: PromptRows,
    prefill_logits: torch.Tensor,
    run: RunFn,
    guidance_scale: float,
    *,
    static: StaticPool | None = None,
    **options: Any,
) -> CachedSession:
    """A `CachedSession` over a prompt prefilled in `cache`; with `static` (the model's pool on the fast
    path), over a static cache of the pool holding the same keys and values, every pass run by its
    fixed-width passes (`specviz.models.fast.fixed_passes`). `options` go to `CachedSession`."""
    if static is None:
        return CachedSession(geometry, cache, prompt, prefill_logits, run, guidance_scale, **options)
    passes = static.holding(cache, run)
    session = CachedSession(geometry, passes.cache, prompt, prefill_logits, passes, guidance_scale, **options)
    static.keep_until_gone(session, passes)
    return session
