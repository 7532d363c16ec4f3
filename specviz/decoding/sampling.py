"""Shared sampling pieces of the speculative methods: acceptance, residuals and couplings.

Everything works on whole windows at once (rows = window positions), so verification costs a
handful of tensor operations per model pass, never a Python loop over tokens.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import torch

RESIDUAL_EPSILON = 1e-12


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of `probs` (n, V) -> (n,)."""
    if probs.shape[0] == 0:
        return torch.empty(0, dtype=torch.long, device=probs.device)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def token_probs(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """probs[i, tokens[i]] for every row."""
    return probs.gather(1, tokens[:, None]).squeeze(1)


def acceptance_ratio(p_new: torch.Tensor, p_old: torch.Tensor) -> torch.Tensor:
    """min(1, p_new(x) / p_old(x)) of drafts x drawn from p_old (so p_old(x) > 0)."""
    return (p_new / p_old.clamp(min=torch.finfo(p_old.dtype).tiny)).clamp(max=1.0)


def leading_true(mask: torch.Tensor) -> torch.Tensor:
    """Length of the run of True at the start of a 1-D mask, as a 0-d tensor on the mask's device
    (no host sync: the window reads it with the rest of the pass's record)."""
    return mask.long().cumprod(0).sum()


def residual(p_new: torch.Tensor, p_old: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p_new - p_old)) per row; where p_new == p_old (no residual mass) it is p_new."""
    mass = (p_new - p_old).clamp(min=0)
    total = mass.sum(-1, keepdim=True)
    return torch.where(total > RESIDUAL_EPSILON, mass / total.clamp(min=RESIDUAL_EPSILON), p_new)


def maximal_coupling(
    p_new: torch.Tensor, p_old: torch.Tensor, previous: torch.Tensor, uniform: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """A draw from p_new coupled to `previous` ~ p_old: keep it with prob min(1, p_new/p_old), else
    sample the residual. P[same token] reaches the bound 1 - TV(p_new, p_old) (SCD, maximal coupling).
    """
    keep = uniform < acceptance_ratio(token_probs(p_new, previous), token_probs(p_old, previous))
    return torch.where(keep, previous, sample(residual(p_new, p_old), generator))


_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN, _MIX1, _MIX2 = _signed(0x9E3779B97F4A7C15), _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def gumbel_noise(key: int, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(n, V) standard Gumbel noise, a pure function of (key, absolute position, token).

    A counter-based generator (the splitmix64 finaliser over a unique counter), so every iteration
    regenerates the same noise for a position without storing a table of positions x vocabulary.
    """
    tokens = torch.arange(vocab_size, device=positions.device, dtype=torch.long)
    x = (positions.long()[:, None] * vocab_size + tokens[None, :]) * _GOLDEN + key
    x = (x ^ _shift_right(x, 30)) * _MIX1
    x = (x ^ _shift_right(x, 27)) * _MIX2
    x = x ^ _shift_right(x, 31)
    uniform = (_shift_right(x, 11).double() + 0.5) * 2.0**-53  # in (0, 1)
    return -torch.log(-torch.log(uniform)).float()


def gumbel_argmax(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """argmax(log p + g): an exact sample from p per row when g is fresh Gumbel noise."""
    return (probs.log() + noise).argmax(-1)


# the neighbour tables kept, most recently used last: every run of a model reuses its table, but a visitor who
# tries many neighbour counts must not make the server keep a table for each (each V x count int64)
_NEIGHBOUR_TABLES: OrderedDict[tuple[int, int], tuple[weakref.ref, torch.Tensor]] = OrderedDict()
NEIGHBOUR_TABLES_KEPT = 4


def neighbour_table(vectors: torch.Tensor, count: int) -> torch.Tensor:
    """`nearest_tokens` computed once per codebook and count (a count beyond the codebook is the whole
    codebook): a model's table is reused by every run, and is not part of any run's decoding time. The
    NEIGHBOUR_TABLES_KEPT most recently used tables are kept."""
    key = (id(vectors), min(count, vectors.shape[0] - 1))
    cached = _NEIGHBOUR_TABLES.get(key)
    if cached is not None and cached[0]() is vectors:
        _NEIGHBOUR_TABLES.move_to_end(key)
        return cached[1]
    table = nearest_tokens(vectors, count)
    _NEIGHBOUR_TABLES[key] = (weakref.ref(vectors), table)
    while len(_NEIGHBOUR_TABLES) > NEIGHBOUR_TABLES_KEPT:
        _NEIGHBOUR_TABLES.popitem(last=False)
    return table


def nearest_tokens(vectors: torch.Tensor, count: int, chunk: int = 4096) -> torch.Tensor:
    """(V, count) ids of each token's nearest other tokens by codebook-vector distance, nearest first."""
    vectors = vectors.float()
    count = min(count, vectors.shape[0] - 1)
    norms = (vectors**2).sum(1)
    rows = []
    for start in range(0, vectors.shape[0], chunk):
        part = vectors[start : start + chunk]
        distance = norms[start : start + chunk, None] - 2 * part @ vectors.T + norms[None, :]
        distance[torch.arange(len(part)), torch.arange(start, start + len(part))] = float("inf")  # not itself
        rows.append(distance.topk(count, dim=1, largest=False).indices)
    return torch.cat(rows)


def next_exact_token(
    p: torch.Tensor,
    q: torch.Tensor,
    accepted: torch.Tensor,
    generator: torch.Generator,
    target: torch.Tensor | None = None,
) -> torch.Tensor:
    """The token fixed after `accepted` (a 0-d device tensor) of the w drafts: a draw from the residual
    norm(max(0, target - q)) at the first rejection, or, when the whole window was accepted, a draw
    from p's row after it (p has w + 1 rows). Either is an exact sample of the target, which is p
    unless a relaxed method passes its own (w, V) rows. No host sync: rows are picked on the device.
    """
    w = q.shape[0]
    row = accepted.clamp(max=w - 1).view(1)
    rows = p[:w] if target is None else target
    at_rejection = residual(rows.index_select(0, row), q.index_select(0, row))
    return sample(torch.where(accepted < w, at_rejection, p[w : w + 1]), generator)
