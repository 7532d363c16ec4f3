"""The fast path: a static KV cache, passes padded to a few widths, CUDA graphs.

At batch 1 on a GPU a pass is bound by kernel launches, not arithmetic: a pass of 65 tokens of `tiny`
costs what a pass of one does, and a 7B release in eager transformers queues about 1,380 kernels a pass,
58-83 ms a token where reading its weights takes about 4. A CUDA graph replays a pass's kernels in one
launch, as gpt-fast does with `torch.compile(mode="reduce-overhead")`. A graph needs fixed shapes and
fixed addresses: transformers' `StaticCache` gives the addresses (keys and values allocated once, the
write position a tensor on the device), and padding every pass to the next power of two gives one of a
few shapes. Each width is captured the first time a pass uses it and replayed after. A graph is bound to
its cache's addresses, so caches and their graphs outlive sessions: a model keeps a pool of them
(`StaticPool`), and a session takes one while it lives (a race holds two at once): the prompt is prefilled
on the plain path, and its keys and values are copied into the rewound cache (`session.prefilled_session`).

Padding changes no result. The padding tokens follow the pass's own in the cache; the session's mask
hides every slot past a pass's tokens, so no real token sees them; their slots are given back right
after the pass, and the next pass overwrites them. A padding token attends to the first prompt slot
alone, so its keys and values stay finite (a masked NaN would still poison a softmax).

Off CUDA the same padded passes run without graphs: everything but the capture is tested on the CPU,
where this path is no faster (every pass attends over the whole static cache).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from transformers import DynamicCache, PretrainedConfig, StaticCache

from specviz.core.params import MAX_WINDOW
from specviz.models.protocol import Geometry
from specviz.models.syncing import intended_sync

# (tokens (rows, n), cache, attention_mask (rows, 1, n, cache length after the pass) bool or None,
#  position_ids (rows, n) or None) -> raw logits (rows, n, V): one model pass appending n tokens per row.
#  A model with a draft head returns (raw logits, last hidden states (rows, n, H)).
RunFn = Callable[
    [torch.Tensor, Any, torch.Tensor | None, torch.Tensor | None], torch.Tensor | tuple[torch.Tensor, torch.Tensor]
]


def rewind_static_cache(cache: StaticCache, count: int) -> None:
    """Move a static cache's write position back by `count` slots, on the device and without a sync, as
    transformers' own `crop` of a static layer does (a method not every transformers 5 release has)."""
    with torch.inference_mode():  # the position is an inference tensor, written in place
        for layer in cache.layers:
            layer.cumulative_length.sub_(count)


def pass_width(count: int) -> int:
    """The padded width of a pass of `count` tokens: the next power of two."""
    return 1 << max(count - 1, 0).bit_length()


def widest_pass(seq_len: int) -> int:
    """The most tokens a pass may feed: the whole sequence, and at least the widest Jacobi window with its
    head (the default trees fit too), padded."""
    return pass_width(max(seq_len, MAX_WINDOW + 1))


def static_capacity(prompt_width: int, seq_len: int) -> int:
    """Cache slots for a generation after a prompt of `prompt_width` tokens: the prompt's room (the next
    power of two, so that prompts of similar lengths share a cache and its graphs), the sequence twice
    (ZipAR's stand-ins stay in the cache beside the tokens that replace them), and room for the widest
    padded pass."""
    return pass_width(prompt_width) + 2 * seq_len + widest_pass(seq_len)


class FixedWidthPasses:
    """A session's model pass (`RunFn`) over its own static cache, its tokens padded to `pass_width`;
    with `graphs`, each width is a CUDA graph captured on first use.

    The session passes a mask over the whole cache (`CachedSession` pads it for a static cache)."""

    def __init__(self, run: RunFn, cache: StaticCache, widest: int, *, graphs: bool) -> None:
        self._run = run
        self.cache = cache
        self._graphs = graphs
        self.widest = widest
        # per width: the graph, its input tensors (copied into before each replay) and its outputs
        self._captured: dict[int, tuple[torch.cuda.CUDAGraph, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = {}
        self._pool = torch.cuda.graph_pool_handle() if graphs else None

    @property
    def captured_widths(self) -> list[int]:
        return sorted(self._captured)

    def __call__(
        self, tokens: torch.Tensor, cache: StaticCache, mask: torch.Tensor | None, positions: torch.Tensor | None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if cache is not self.cache or mask is None or positions is None:
            raise ValueError("fixed-width passes run over their own static cache, with a mask and positions")
        count = tokens.shape[1]
        if count > self.widest:
            raise ValueError(f"the fast path takes passes of up to {self.widest} tokens, not {count}")
        width = pass_width(count)
        inputs = self._padded(tokens, mask, positions, width)
        if not self._graphs:
            outputs = self._outputs(self._run(*inputs[:1], cache, *inputs[1:]))
        elif width in self._captured:
            graph, static, outputs = self._captured[width]
            for target, source in zip(static, inputs, strict=True):
                target.copy_(source)
            graph.replay()
            outputs = tuple(output.clone() for output in outputs)  # the next replay overwrites them
        else:
            outputs = self._capture(width, inputs)
        rewind_static_cache(cache, width - count)  # the padding's slots, for the next pass to overwrite
        sliced = tuple(output[:, :count] for output in outputs)
        return sliced if len(sliced) > 1 else sliced[0]

    @staticmethod
    def _padded(
        tokens: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, width: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tokens, mask, positions) of `width` queries: the padding repeats the last token and position
        and sees the first cache slot alone."""
        extra = width - tokens.shape[1]
        if not extra:
            return tokens, mask, positions
        padding_mask = torch.zeros_like(mask[:, :, :1]).expand(-1, -1, extra, -1).clone()
        padding_mask[..., 0].fill_(True)  # on the view: assigning a Python scalar reads it back on CUDA
        return (
            torch.cat([tokens, tokens[:, -1:].expand(-1, extra)], dim=1),
            torch.cat([mask, padding_mask], dim=2),
            torch.cat([positions, positions[:, -1:].expand(-1, extra)], dim=1),
        )

    @staticmethod
    def _outputs(raw: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        return raw if isinstance(raw, tuple) else (raw,)

    def _capture(self, width: int, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """Run the pass on a side stream (its result is this pass's; it also warms the kernels up), then
        capture it as a graph. Capturing runs nothing: the cache's write position, a device tensor,
        advances only when the graph replays."""
        static = tuple(tensor.clone() for tensor in inputs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            outputs = self._outputs(self._run(static[0], self.cache, *static[1:]))
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with intended_sync(), torch.cuda.graph(graph, pool=self._pool):  # a capture synchronises once
            captured = self._outputs(self._run(static[0], self.cache, *static[1:]))
        self._captured[width] = (graph, static, captured)
        return outputs

    def empty(self) -> None:
        """Rewind the cache to no slot written, for the next session's prompt (on the device, no sync)."""
        with torch.inference_mode():
            for layer in self.cache.layers:
                layer.cumulative_length.zero_()


class StaticPool:
    """A model's static caches and their captured passes, lent to one session at a time and taken back
    when the session is gone, so a graph captured for one generation serves the next. Caches are kept by
    batch rows (guidance adds one; a cache's rows are fixed at its first write) and by capacity (the
    prompt's room)."""

    def __init__(self, config: PretrainedConfig, seq_len: int, *, graphs: bool) -> None:
        self._config = config  # the decoder's (its layers), as transformers' `StaticCache` reads it
        self._seq_len = seq_len
        self._graphs = graphs
        self.widest = widest_pass(seq_len)
        self._free: dict[tuple[int, int], list[FixedWidthPasses]] = {}  # by (rows, capacity)
        self._lock = threading.Lock()  # the app serves several visitors from one model
        self.made = 0

    @classmethod
    def for_model(cls, config: PretrainedConfig, geometry: Geometry, device: torch.device | str) -> StaticPool:
        """The pool of a model generating `geometry`'s sequence on `device`: CUDA graphs on a GPU."""
        return cls(config, geometry.seq_len, graphs=torch.device(device).type == "cuda")

    def holding(self, prefilled: DynamicCache, run: RunFn) -> FixedWidthPasses:
        """A cache of the pool holding what `prefilled` (a prompt's dynamic cache) holds, its passes running
        `run`; `keep_until_gone` returns it. The prompt is prefilled on the plain path, so both paths start
        from the same keys and values. A cache lent again keeps the `run` its graphs were captured over:
        every session of a model passes the same computation over the same modules."""
        first = prefilled.layers[0].keys
        key = (first.shape[0], static_capacity(first.shape[2], self._seq_len))
        with self._lock:
            free = self._free.setdefault(key, [])
            passes = free.pop() if free else None
            if passes is None:
                self.made += 1
        if passes is None:
            cache = StaticCache(config=self._config, max_cache_len=key[1])
            passes = FixedWidthPasses(run, cache, self.widest, graphs=self._graphs)
        passes.empty()
        with torch.inference_mode():
            for index, layer in enumerate(prefilled.layers):
                passes.cache.update(layer.keys, layer.values, index)
        return passes

    @property
    def captured_widths(self) -> list[int]:
        """The pass widths captured as graphs by the caches lent out and back so far (those at home)."""
        with self._lock:
            home = [passes for free in self._free.values() for passes in free]
        return sorted({width for passes in home for width in passes.captured_widths})

    @property
    def cache_bytes(self) -> int:
        """Keys and values of the largest cache at home: what every pass over it reads besides the weights
        (its attention spans every slot)."""
        with self._lock:
            home = [passes.cache for free in self._free.values() for passes in free]
        sizes = [sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers) for cache in home]
        return max(sizes, default=0)

    def keep_until_gone(self, owner: object, passes: FixedWidthPasses) -> None:
        """Take `passes` back once `owner` (the session) is garbage."""
        key = (passes.cache.layers[0].keys.shape[0], passes.cache.get_max_length())
        weakref.finalize(owner, self._take_back, passes, key)

    def _take_back(self, passes: FixedWidthPasses, key: tuple[int, int]) -> None:
        with self._lock:
            self._free.setdefault(key, []).append(passes)
