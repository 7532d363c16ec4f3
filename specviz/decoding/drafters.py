"""Drafters: who proposes the tokens of a draft tree (eagle2, peanut): `training-free` or `head`.

The tree loop (`specviz.decoding.tree`) grows a tree level by level, as EAGLE-2 does: it hands the
drafter the frontier (the nodes to expand, all at one sequence position) and asks for each node's k
most confident children, with their draft confidences q(x | ancestors). After the model has verified
the tree, the drafter sees the pass (every node's target distribution and the accepted path) and may
learn from it. A drafter declares what it needs from a session beyond the protocol's core (`needs`,
names from `specviz.models.protocol.capabilities`, such as the last hidden states an EAGLE head reads);
a method refuses a model that lacks one before the run starts.

Exactness does not depend on the drafter: the tree's candidates are a function of what happened
before the pass (the prompt, earlier passes, the run's own randomness spent earlier), never of the
uniforms that verify them, and the verification rule in `tree.py` turns any such candidates into exact
samples. A better drafter only makes more of them accepted.

`training-free` works on every model through the protocol: a table of which tokens follow which,
grown from the model's own distributions during the run (token recycling, Luo et al. 2024, made
two-dimensional). Every pass computes, for every tree node, the target distribution of the position
after it; the drafter keeps its k most likely tokens with their probabilities under two keys: the
node's token, and the node's token together with the committed token above the next cell (on an image
grid, what follows a token depends on the row above as much as on the token itself). A child's
candidates come from the pair's entry where the pair has been seen, else from the token's alone. Rows
of the accepted path are written last, so they win over rows of rejected branches. Before the first
pass every token's entry is the prefill's distribution (the first token's), the one row there is.
The rows are the model's own softmax, before temperature, top-k and top-p, as an EAGLE head's
confidences are: under greedy decoding the target is one-hot, but the runners-up of a nearby context
are still the likeliest argmax here. Pairs live in a hash table of fixed size; a collision only costs a worse guess.

`head` is EAGLE's: a trained draft head (`specviz.models.networks.draft_head`) reads, for the token at position
i, the target's feature at i - 1 and predicts the feature at i; the target's LM head turns it into the
draft distribution of position i + 1. The head keeps its own KV cache over the committed image tokens,
whose features come from the target's passes (exact), and drafts a tree level by level on its own
predicted features: each frontier node attends to the committed entries and to its own ancestors in
the tree (an ancestor mask over the level entries, as the target's tree pass has). With guidance, the
head runs both of the session's rows, each on its own row's features, and ranks candidates by the
guided combination of the two rows' draft logits, as the target combines its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers import DynamicCache

from specviz.core.params import DRAFTERS as DRAFTER_NAMES
from specviz.models.protocol import Session, UnsupportedMethod, capabilities
from specviz.models.session import combine_guidance


@dataclass
class Frontier:
    """Nodes of one tree level to expand: all sit at `position`, so their children at `position + 1`."""

    tokens: torch.Tensor  # (f,)
    position: int
    parent_slot: torch.Tensor  # (f,) index of each node's parent in the previous level's frontier (-1: the head)
    state: Any = None  # what the drafter returned for these nodes in `Proposal.state`


@dataclass
class Proposal:
    """Each frontier node's candidates, most confident first."""

    tokens: torch.Tensor  # (f, k)
    log_confidence: torch.Tensor  # (f, k) log q(x | ancestors); -inf where a node has fewer than k candidates
    state: Any = None  # per candidate, (f, k, ...), handed back in the next level's `Frontier.state`


@dataclass
class VerifiedPass:
    """A tree pass after verification: what a drafter may learn from."""

    head_position: int
    accepted: int  # nodes on the accepted path
    tokens: torch.Tensor  # (n + 1,) the head, then the tree's nodes
    depths: torch.Tensor  # (n + 1,) 0 for the head: node i sits at head_position + depths[i]
    rows: torch.Tensor  # (n + 1, V) the model's distribution (softmax of its logits) of the position after each
    on_path: torch.Tensor  # (n + 1,) bool: the head and the accepted nodes
    features: torch.Tensor | None = None  # (rows, n + 1, H) the target's hidden states, where it offers them


class Drafter(Protocol):
    needs: frozenset[str]

    def expand(self, frontier: Frontier, count: int) -> Proposal:
        """The `count` most confident children of every frontier node."""
        ...

    def observe(self, verified: VerifiedPass) -> None:
        """Learn from a verified pass (no host sync: everything stays on the device)."""
        ...


class TrainingFreeDrafter:
    """Each token's most likely successors, alone and under the token above, from the model's own rows."""

    needs: frozenset[str] = frozenset()
    SLOT_BITS = 14
    PAIR_SLOTS = 1 << SLOT_BITS

    def __init__(self, session: Session, first: torch.Tensor, width: int):
        geometry, device = session.geometry, first.device
        self.vocab = first.shape[-1]
        self.width = min(width, self.vocab)
        top = first.topk(self.width)
        # (V, width) the successors of each token; every table has a spare last row (see `_write`)
        self.follows = top.indices.expand(self.vocab + 1, -1).clone()
        self.follows_probs = top.values.expand(self.vocab + 1, -1).clone()
        self.pair_key = torch.full((self.PAIR_SLOTS + 1,), -1, dtype=torch.long, device=device)
        self.pair_follows = torch.zeros(self.PAIR_SLOTS + 1, self.width, dtype=torch.long, device=device)
        self.pair_probs = torch.zeros(self.PAIR_SLOTS + 1, self.width, device=device)
        self.above = above_positions(session)  # per position, the position of the cell above (-1: none)
        self.above_device = torch.tensor([*self.above, -1], device=device)
        self.tokens = torch.zeros(geometry.seq_len + 1, dtype=torch.long, device=device)  # committed; a spare slot
        self.known = 0  # positions before this one are committed and in self.tokens

    def expand(self, frontier: Frontier, count: int) -> Proposal:
        count = min(count, self.width)
        tokens = self.follows[frontier.tokens, :count]
        probs = self.follows_probs[frontier.tokens, :count]
        above = self.above[frontier.position + 1]
        if 0 <= above < self.known:
            key = frontier.tokens * self.vocab + self.tokens[above]
            slot = self._slot(key)
            seen = (self.pair_key[slot] == key)[:, None]
            tokens = torch.where(seen, self.pair_follows[slot, :count], tokens)
            probs = torch.where(seen, self.pair_probs[slot, :count], probs)
        return Proposal(tokens, probs.log())

    def observe(self, verified: VerifiedPass) -> None:
        nodes = len(verified.tokens)
        positions = verified.head_position + verified.depths  # (n + 1,) sequence position of each node
        spare = len(self.tokens) - 1
        self.tokens.scatter_(0, torch.where(verified.on_path, positions, spare), verified.tokens)
        self.known = verified.head_position + 1 + verified.accepted
        top = verified.rows.topk(self.width)
        # one writer per entry, deterministically: the accepted path, then the latest node
        priority = torch.arange(nodes, device=positions.device) + nodes * verified.on_path.long()
        for table, values in ((self.follows, top.indices), (self.follows_probs, top.values)):
            _write(table, verified.tokens, priority, values)
        # pairs: only where every node's context holds the token above (committed before this pass)
        above = self.above_device[positions + 1]
        known = (above >= 0) & (above <= verified.head_position)
        key = verified.tokens * self.vocab + self.tokens[above.clamp(min=0)]
        slot, priority = self._slot(key), torch.where(known, priority, -1)
        for table, values in ((self.pair_key, key), (self.pair_follows, top.indices), (self.pair_probs, top.values)):
            _write(table, slot, priority, values)

    def _slot(self, key: torch.Tensor) -> torch.Tensor:
        """Fibonacci hashing of a (token, token above) key into the pair table (products wrap modulo 2^64,
        which keeps their low 32 bits)."""
        return ((key * 0x9E3779B1) & 0xFFFFFFFF) >> (32 - self.SLOT_BITS)


def _write(table: torch.Tensor, entry: torch.Tensor, priority: torch.Tensor, values: torch.Tensor) -> None:
    """Write values[i] to table[entry[i]] in place, the row of highest priority winning where rows share an
    entry; rows of negative priority go to the table's last row, a spare that is never read. Every row
    writes its entry's winner, so duplicate indices carry equal values and the result is deterministic.
    On the device, no host read, and only the rows written are touched."""
    spare = len(table) - 1
    target = torch.where(priority >= 0, entry, spare)
    winner = torch.full((len(table),), -1, dtype=torch.long, device=entry.device)
    winner = winner.scatter_reduce(0, target, priority, "amax")
    table[target] = values[winner[target].clamp(min=0) % len(priority)]


def above_positions(session: Session) -> list[int]:
    """For every sequence position, the position of the grid cell above it (-1: first row or layout slot)."""
    geometry = session.geometry
    cells = geometry.cell_of_position()
    position_of_cell = {cell: position for position, cell in enumerate(cells) if cell >= 0}
    return [position_of_cell[cell - geometry.cols] if cell >= geometry.cols else -1 for cell in cells]


class HeadDrafter:
    """EAGLE's trained draft head over the session's features (`needs` a session with a `draft_head`)."""

    needs: frozenset[str] = frozenset({"draft_head"})

    def __init__(self, session: Session, first: torch.Tensor, width: int):
        self.head = session.draft_head
        self.scale = session.guidance_scale
        self.feature = session.prefill_features  # (rows, H): the target's feature before the head token
        self.rows = self.feature.shape[0]
        self.cache = DynamicCache()
        self.committed = 0  # head-cache entries of committed positions (one per committed image token)
        self.level_ancestry: torch.Tensor | None = None  # (f, entries of this tree so far) bool

    @torch.inference_mode()
    def expand(self, frontier: Frontier, count: int) -> Proposal:
        nodes = len(frontier.tokens)
        if frontier.state is None:  # the tree's first level: the head token, on the target's feature
            crop_to(self.cache, self.committed)
            parent_features = self.feature[:, None, :]  # (rows, 1, H)
            ancestry = torch.ones(1, 1, dtype=torch.bool, device=frontier.tokens.device)
        else:  # (f, rows, H) each node's parent's predicted feature; the nodes' ancestors, then themselves
            parent_features = frontier.state.transpose(0, 1)
            earlier = self.level_ancestry[frontier.parent_slot]
            ancestry = torch.cat([earlier, torch.eye(nodes, dtype=torch.bool, device=earlier.device)], dim=1)
        self.level_ancestry = ancestry
        committed = torch.ones(nodes, self.committed, dtype=torch.bool, device=ancestry.device)
        mask = torch.cat([committed, ancestry], dim=1).expand(self.rows, 1, -1, -1)
        tokens = frontier.tokens[None].expand(self.rows, -1)
        positions = torch.full_like(tokens, frontier.position)
        predicted = self.head(tokens, parent_features, positions, self.cache, mask)  # (rows, f, H)
        logits = combine_guidance(self.head.logits(predicted).float(), self.scale)  # (f, V)
        top = logits.log_softmax(-1).topk(min(count, logits.shape[-1]))
        state = predicted.transpose(0, 1)[:, None].expand(-1, top.indices.shape[1], -1, -1)  # (f, k, rows, H)
        return Proposal(top.indices, top.values, state)

    @torch.inference_mode()
    def observe(self, verified: VerifiedPass) -> None:
        """Enter the committed tokens into the head's cache, each on the target's feature before it."""
        kept = verified.accepted + 1  # the head token and the accepted path, in order of depth
        order = torch.sort((~verified.on_path).to(torch.int8), stable=True).indices[:kept]
        features = verified.features[:, order]  # (rows, kept, H) the target's feature at each kept token
        before = torch.cat([self.feature[:, None, :], features[:, :-1]], dim=1)
        crop_to(self.cache, self.committed)
        tokens = verified.tokens[order][None].expand(self.rows, -1)
        positions = (verified.head_position + torch.arange(kept, device=tokens.device))[None].expand(self.rows, -1)
        causal = torch.ones(kept, kept, dtype=torch.bool, device=tokens.device).tril()
        past = torch.ones(kept, self.committed, dtype=torch.bool, device=tokens.device)
        mask = torch.cat([past, causal], dim=1).expand(self.rows, 1, -1, -1)
        self.head(tokens, before, positions, self.cache, mask)
        self.committed += kept
        self.feature = features[:, -1]


def crop_to(cache: DynamicCache, length: int) -> None:
    """Drop every cache entry after the first `length` (transformers 5 crops by a negative count)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


class DrafterClass(Protocol):
    needs: frozenset[str]

    def __call__(self, session: Session, first: torch.Tensor, width: int) -> Drafter:
        """A drafter for one run: `first` is the model's distribution (softmax of the prefill's logits) of
        position 0, `width` the most children a node will be asked for."""
        ...


CAPABILITY_WORDS = {"draft_head": "draft_head (a trained EAGLE head: head.safetensors beside the weights)"}

# keyed by the names the parameters offer (`params.DRAFTERS`, light for the command line), in their order
DRAFTERS: dict[str, DrafterClass] = dict(zip(DRAFTER_NAMES, (TrainingFreeDrafter, HeadDrafter), strict=True))


def check_needs(session: Session, name: str) -> None:
    """Refuse, before a run, a session that lacks a capability the drafter declares it needs."""
    missing = sorted(DRAFTERS[name].needs - capabilities(session))
    if missing:
        wanted = ", ".join(CAPABILITY_WORDS.get(need, need) for need in missing)
        raise UnsupportedMethod(
            f"the {name} drafter needs {wanted}, which this model does not provide; "
            "the training-free drafter works with every model"
        )
