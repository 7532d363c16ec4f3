"""Draft trees: the one loop every tree method runs (EAGLE-2, PEANUT) and its verification rule.

State between passes: a decided *head* token h at position t (an exact sample, not yet in the KV
cache). A pass has four steps.

1. Grow (EAGLE-2, `grow`): the drafter gives the head's top-k children with their confidences; for
   each later level the top-k nodes of the level before, by cumulative log-confidence (the log of the
   product of confidences down from the head), each give their top-k children; after `depth` levels
   the `tree_tokens` nodes of highest cumulative confidence are kept (a parent's is never below its
   child's, so parents are kept with their children), parents before children, siblings most
   confident first. A layout slot takes its forced token as its only candidate. A method decides the
   shape (depth, top-k) of every tree: fixed (eagle2) or adapted tree by tree (peanut).
2. One model pass over [h, nodes] with the tree's ancestor mask: row i is the target p of the
   position after node i, given the prefix, h and node i's ancestors.
3. Verify (`verify_tree`): walk down from h; at a reached node take its row p and test its children
   in order, child x accepted with probability p(x); a rejected child's probability is set to 0 and p
   renormalised before the next child is tested (EAGLE's rule, SpecInfer's min(1, p/q) with a
   deterministic draft, q one-hot). The accepted child is reached in turn. At the deepest reached node,
   whose children were all rejected (or which has none), the next token is drawn from what is left of
   its p. The token after the accepted path is therefore p(x) (accepted at the i-th sibling after
   i - 1 rejections: prod_{j<i} (1 - p_j(x_j)) * p_i(x_i) = p(x_i), the product telescoping to
   1 - sum_{j<i} p(x_j)), or, with the remaining mass 1 - sum p(x_j), a draw from p without the
   tried children: p again. So every committed token is an exact sample of p given the tokens before
   it, whatever the candidates, as long as they were chosen before the pass (their choice may use
   anything that came before, including the run's earlier random numbers, but not the uniforms of this
   verification). Greedy decoding (p one-hot) reduces to the longest path of argmax tokens.
   Drafts *sampled* from a distribution q could be tested with min(1, p/q) (SpecInfer, or with q
   renormalised over the siblings not yet drawn), which accepts more; EAGLE-2 cannot use that rule:
   keeping the nodes of highest confidence picks a node by its own token, so a kept draft is no longer
   distributed as q. Our drafters pick, so this rule is the one.
   Verification is vectorised over the whole tree: every node gets a uniform; a node passes its test
   when u < p(x) / (1 - mass of the siblings tested before it); the accepted child of a node is its
   first passing one, and the reached nodes are those whose every ancestor was accepted (a matrix
   product with the ancestor mask). No Python loop over nodes, no host read before the record.
4. Commit the head and the accepted path into the cache (a gather for a path that is not the first
   tokens appended); the drawn token becomes the head. The drafter sees the verified pass.

A pass reads the host twice on a GPU: the tree's shape once it is grown (the attention mask is built
on the host) and the record, with the accepted path, after verification. The tree goes to the device
in one copy before the pass (tokens, parents, depths, ancestor mask): a copy from the host waits for
the device, so none is left between the pass and the record.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from specviz.core.params import TreeParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.drafters import DRAFTERS, Drafter, Frontier, VerifiedPass
from specviz.decoding.passes import TokenLoop
from specviz.decoding.sampling import RESIDUAL_EPSILON, sample
from specviz.models.protocol import IMAGE_CELL, Session
from specviz.models.session import TreeMask
from specviz.models.syncing import intended_sync, read_to_host
from specviz.trace import DraftTree, Iteration, TreeRecord

FATES = ("untested", "rejected", "accepted")  # fate codes 0, 1, 2 on the device


@dataclass(frozen=True)
class TreeShape:
    """The shape a method asks of one tree, and (PEANUT) the acceptance rate that chose it. `paths`, where
    given, is a static tree (EAGLE-1's): each node named by the ranks of the candidates down to it, (0, 1)
    the second most confident child of the most confident child of the head."""

    depth: int
    top_k: int
    alpha: float | None = None
    paths: tuple[tuple[int, ...], ...] | None = None


class ShapeRule(Protocol):
    """How a method shapes its trees: fixed (eagle2) or adapted to earlier trees (peanut)."""

    @property
    def widest(self) -> int:
        """The most children a node will be asked for."""
        ...

    def shape(self, first_position: int) -> TreeShape:
        """The shape of the tree whose first level drafts `first_position`."""
        ...

    def learn(self, first_position: int, shape: TreeShape, levels: int, accepted: int, committed: int) -> None:
        """A tree of `levels` levels (its shape's depth, or fewer at the end of the image) accepted `accepted`
        drafts and committed `committed` tokens from `first_position` on."""
        ...


class FixedShape:
    """The same tree every pass: a depth and top-k (eagle2), or a static tree (lantern++)."""

    def __init__(self, shape: TreeShape):
        self.fixed = shape

    @property
    def widest(self) -> int:
        return self.fixed.top_k

    def shape(self, first_position: int) -> TreeShape:
        return self.fixed

    def learn(self, first_position: int, shape: TreeShape, levels: int, accepted: int, committed: int) -> None:
        """Nothing to learn: the shape is fixed."""


# (the rows of the nodes' parents (n, V), the nodes' tokens (n,)) -> (mass added to each node's p(x) (n,),
# tokens pooled with it (n, m), which of them are (n, m)): a relaxed test (PEANUT + LANTERN); lossy
Relaxation = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass
class GrownTree:
    """A grown tree on the host (for the attention mask and the record) and on the device (for the pass
    and its verification)."""

    tokens: list[int]
    parents: list[int]  # a node's parent, -1 for the head's children
    depths: list[int]  # a node's level, 1 for the head's children
    confidence: list[float]
    device_tokens: torch.Tensor
    device_parents: torch.Tensor
    device_depths: torch.Tensor
    ancestors: torch.Tensor  # (n, n) float on the device: [v, u] = 1 where u is v or an ancestor of v
    fed: TreeMask  # the pass's tree: the head (row 0) and the nodes below it, its mask on the device

    @classmethod
    def on(
        cls, device: torch.device, tokens: list[int], parents: list[int], depths: list[int], confidence: list[float]
    ) -> GrownTree:
        """The tree, sent to the device in one copy: the pass's mask and the verification's columns."""
        below_head = [-1] + [parent + 1 for parent in parents]
        fed, (columns,) = TreeMask.on(device, below_head, torch.tensor([tokens, parents]))
        device_tokens, device_parents = columns
        on_device = (device_tokens, device_parents, fed.depth[1:], fed.ancestors[1:, 1:].float())
        return cls(tokens, parents, depths, confidence, *on_device, fed)


@dataclass
class TreeVerdict:
    """The verification of one tree, on the device."""

    reached: torch.Tensor  # (n,) bool: the accepted path
    fate: torch.Tensor  # (n,) codes into FATES
    p_target: torch.Tensor  # (n,) p(x | ancestors) of every node
    next_token: torch.Tensor  # (1,) the exact token after the accepted path


def only_the_forced(tokens: torch.Tensor, log_conf: torch.Tensor, forced: int) -> tuple[torch.Tensor, torch.Tensor]:
    """At a layout slot its forced token, certain, is the only candidate (the others get confidence 0)."""
    if forced == IMAGE_CELL:
        return tokens, log_conf
    log_conf = torch.full_like(log_conf, float("-inf"))
    log_conf[:, 0].fill_(0.0)  # fill_, not `= 0.0`: on CUDA that reads a CPU scalar
    return torch.full_like(tokens, forced), log_conf


def grow(
    drafter: Drafter, head: torch.Tensor, head_position: int, levels: int, top_k: int, size: int, layout: tuple
) -> GrownTree:
    """EAGLE-2's dynamic tree below `head`: `levels` levels, the top-k frontier expanded by cumulative
    log-confidence, the `size` most confident nodes kept. One host read at the end."""
    device = head.device
    frontier = Frontier(head, head_position, torch.full((1,), -1, device=device))
    frontier_score = torch.zeros(1, device=device)
    frontier_node = torch.full((1,), -1, device=device)  # index in the pool of candidates
    pool: dict[str, list[torch.Tensor]] = {"tokens": [], "score": [], "log_conf": [], "parent": [], "depth": []}
    offset = 0
    for level in range(1, levels + 1):
        proposal = drafter.expand(frontier, top_k)
        tokens, log_conf = proposal.tokens, proposal.log_confidence
        tokens, log_conf = only_the_forced(tokens, log_conf, layout[head_position + level])
        count, width = tokens.shape
        score = (frontier_score[:, None] + log_conf).flatten()
        pool["tokens"].append(tokens.flatten())
        pool["score"].append(score)
        pool["log_conf"].append(log_conf.flatten())
        pool["parent"].append(frontier_node.repeat_interleave(width))
        pool["depth"].append(torch.full((count * width,), level, device=device))
        if level < levels:
            best = score.topk(min(top_k, len(score))).indices  # the next frontier, most confident first
            state = None if proposal.state is None else proposal.state.flatten(0, 1)[best]
            frontier = Frontier(tokens.flatten()[best], head_position + level, best // width, state)
            frontier_score, frontier_node = score[best], offset + best
        offset += count * width
    columns = {name: torch.cat(parts) for name, parts in pool.items()}
    kept = columns["score"].sort(descending=True, stable=True).indices[:size].sort().values
    packed = torch.stack(
        [kept.double()] + [columns[name][kept].double() for name in ("tokens", "parent", "depth", "score", "log_conf")]
    )
    index, tokens, parents, depths, scores, log_conf = read_to_host(packed)  # the tree's one host read
    node_of: dict[int, int] = {}
    kept_tokens, kept_parents, kept_depths, kept_confidence = [], [], [], []
    nodes = zip(index, tokens, parents, depths, scores, log_conf, strict=True)
    for pool_index, token, parent, depth, score, own in nodes:
        if score == float("-inf"):  # no candidate there (a drafter with fewer than k), nor below it
            continue
        node_of[int(pool_index)] = len(kept_tokens)
        kept_tokens.append(int(token))
        kept_parents.append(node_of[int(parent)] if parent >= 0 else -1)
        kept_depths.append(int(depth))
        kept_confidence.append(min(1.0, math.exp(own)))
    return GrownTree.on(device, kept_tokens, kept_parents, kept_depths, kept_confidence)


def grow_static(
    drafter: Drafter,
    head: torch.Tensor,
    head_position: int,
    paths: tuple[tuple[int, ...], ...],
    levels: int,
    layout: tuple,
) -> GrownTree:
    """EAGLE-1's static tree below `head`: the nodes `paths` names, each the candidate of its rank among its
    parent's children, down to `levels` levels. A layout slot has one candidate, its forced token, so nodes
    of a higher rank there are left out with everything below them. One host read at the end."""
    device = head.device
    frontier = Frontier(head, head_position, torch.full((1,), -1, device=device))
    level_paths: tuple[tuple[int, ...], ...] = ((),)  # the frontier's nodes, by path
    placed: list[tuple[int, ...]] = []  # every node's path, in the order its token is gathered
    token_parts, confidence_parts = [], []
    for level in range(1, levels + 1):
        below = tuple(path for path in sorted(paths) if len(path) == level and path[:-1] in level_paths)
        if not below:
            break
        proposal = drafter.expand(frontier, max(path[-1] for path in below) + 1)
        tokens, log_conf = proposal.tokens, proposal.log_confidence
        tokens, log_conf = only_the_forced(tokens, log_conf, layout[head_position + level])
        width = tokens.shape[1]  # a drafter may give fewer candidates than asked
        below = tuple(path for path in below if path[-1] < width)
        chosen = _static_slots(level_paths, below, width, device)
        token_parts.append(tokens.flatten()[chosen])
        confidence_parts.append(log_conf.flatten()[chosen])
        state = None if proposal.state is None else proposal.state.flatten(0, 1)[chosen]
        frontier = Frontier(tokens.flatten()[chosen], head_position + level, chosen // width, state)
        placed += below
        level_paths = below
    if not placed:
        return GrownTree.on(device, [], [], [], [])
    packed = torch.stack([torch.cat(token_parts).double(), torch.cat(confidence_parts).double()])
    tokens, log_conf = read_to_host(packed)  # the tree's one host read
    node_of: dict[tuple[int, ...], int] = {}
    kept_tokens, kept_parents, kept_depths, kept_confidence = [], [], [], []
    for path, token, own in zip(placed, tokens, log_conf, strict=True):
        parent = path[:-1]
        if own == float("-inf") or (parent and parent not in node_of):  # no candidate there, nor below it
            continue
        node_of[path] = len(kept_tokens)
        kept_tokens.append(int(token))
        kept_parents.append(node_of[parent] if parent else -1)
        kept_depths.append(len(path))
        kept_confidence.append(min(1.0, math.exp(own)))
    return GrownTree.on(device, kept_tokens, kept_parents, kept_depths, kept_confidence)


@functools.cache
def _static_slots(
    frontier: tuple[tuple[int, ...], ...], below: tuple[tuple[int, ...], ...], width: int, device: torch.device
) -> torch.Tensor:
    """Where each node of a static tree's level sits among its frontier's candidates (frontier slot x width +
    rank), on the device: copied there once per shape, so later passes copy nothing."""
    with intended_sync():
        return torch.tensor([frontier.index(path[:-1]) * width + path[-1] for path in below], device=device)


def sibling_order(parents: torch.Tensor) -> torch.Tensor:
    """(n, n) float: [v, u] = 1 where u is a sibling of v tested before it; `parents` (n,) on the device."""
    index = torch.arange(len(parents), device=parents.device)
    return ((parents[:, None] == parents[None, :]) & (index[None, :] < index[:, None])).float()


def sibling_acceptance(mass: torch.Tensor, earlier: torch.Tensor) -> torch.Tensor:
    """Probability that each node is accepted once tested: p(x) renormalised over what the siblings tested
    before it (and refused) left, p(x) / (1 - sum of their p)."""
    left = (1 - earlier @ mass).clamp(min=RESIDUAL_EPSILON)
    return (mass / left).clamp(max=1.0)


def without_refused(p: torch.Tensor, refused: torch.Tensor) -> torch.Tensor:
    """The draw after every tested child was refused: p (V,) without the `refused` tokens, renormalised
    (p itself where nothing is left)."""
    left_over = p * ~refused
    total = left_over.sum()
    return torch.where(total > RESIDUAL_EPSILON, left_over / total.clamp(min=RESIDUAL_EPSILON), p)


def verify_tree(
    p: torch.Tensor, tree: GrownTree, generator: torch.Generator, relaxation: Relaxation | None = None
) -> TreeVerdict:
    """EAGLE's rule over a whole tree at once. `p` (n + 1, V): row 0 the head's, row i + 1 node i's.
    Reads only the tree's device tensors: nothing here waits for the pass."""
    device, n, tokens = p.device, len(tree.tokens), tree.device_tokens
    if not n:  # nothing drafted: the pass is an AR step
        empty = tokens.new_empty(0)
        return TreeVerdict(empty.bool(), empty, p.new_empty(0), sample(p[:1], generator))
    parent_row = tree.device_parents + 1
    rows = p[parent_row]  # (n, V) each node's target distribution
    p_target = rows.gather(1, tokens[:, None]).squeeze(1)
    tested_mass = p_target
    if relaxation is not None:
        extra, pooled, in_group = relaxation(rows, tokens)
        tested_mass = p_target + extra
    earlier = sibling_order(tree.device_parents)
    passes = torch.rand(n, generator=generator, device=device) < sibling_acceptance(tested_mass, earlier)
    chosen = passes & ~((earlier @ passes.float()) > 0)  # the first sibling that passes
    reached = (tree.ancestors @ (~chosen).float()) == 0  # every ancestor, and the node, chosen
    deepest = torch.where(reached.any(), (reached * tree.device_depths).argmax() + 1, 0)  # its row in p
    tried = parent_row == deepest  # the deepest reached node's children: all tested, all refused
    refused = torch.zeros(p.shape[1], device=device).index_add_(0, tokens, tried.float())
    if relaxation is not None:
        refused.index_add_(0, pooled.flatten(), (in_group & tried[:, None]).flatten().float())
    residual = without_refused(p.index_select(0, deepest.view(1))[0], refused > 0)  # no host read of `deepest`
    parent_reached = torch.cat([torch.ones(1, dtype=torch.bool, device=device), reached])[parent_row]
    tested = parent_reached & ~((earlier @ chosen.float()) > 0)
    fate = tested.long() + reached.long()
    return TreeVerdict(reached, fate, p_target, sample(residual[None], generator))


def run_tree(
    session: Session,
    sampling: SamplingSettings,
    generator: torch.Generator,
    params: TreeParameters,
    shapes: ShapeRule,
    relaxation: Relaxation | None = None,
) -> Iterator[Iteration]:
    """Yield one Iteration per model pass until every position is fixed."""
    yield from TreeLoop(session, sampling, generator, params, shapes, relaxation).records()


class TreeLoop(TokenLoop):
    """The head and the drafter that grows each pass's tree below it; the shape rule sets each tree's depth
    and top-k, the relaxation (if any) each node's acceptance."""

    def __init__(
        self,
        session: Session,
        sampling: SamplingSettings,
        generator: torch.Generator,
        params: TreeParameters,
        shapes: ShapeRule,
        relaxation: Relaxation | None,
    ):
        super().__init__(session, sampling, generator, params)
        self.shapes, self.relaxation = shapes, relaxation
        self.drafter = DRAFTERS[params.drafter](session, session.next_logits.float().softmax(-1), shapes.widest)
        self.draw_first()

    def step(self) -> TreeRecord:
        """Grow a tree below the head, verify it in one pass, commit the accepted path and the next token."""
        start = self.head_position + 1
        shape = self.shapes.shape(start)
        levels = min(shape.depth, self.seq_len - start)
        started = self.clock.mark()
        if shape.paths is None:
            size = self.params.tree_tokens
            tree = grow(self.drafter, self.head, self.head_position, levels, shape.top_k, size, self.layout)
        else:
            tree = grow_static(self.drafter, self.head, self.head_position, shape.paths, levels, self.layout)
        drafted = self.clock.mark()
        fed = torch.cat([self.head, tree.device_tokens])
        logits = self.session.forward(fed, parents=tree.fed)
        p = self.sampling.probabilities(logits)
        forwarded = self.clock.mark()
        verdict = verify_tree(p, tree, self.generator, self.relaxation)
        verified = self.clock.mark()
        n = len(tree.tokens)
        packed = torch.cat([verdict.next_token, verdict.reached.long(), verdict.fate]).double()
        values = read_to_host(torch.cat([packed, verdict.p_target.double()]))  # the record's one host read
        host_started = time.perf_counter()
        next_token, reached = int(values[0]), values[1 : 1 + n]
        fate = [FATES[int(code)] for code in values[1 + n : 1 + 2 * n]]
        path = [node for node in range(n) if reached[node]]  # parents come first: in order of depth
        self.session.commit([0] + [node + 1 for node in path])
        on_path = torch.cat([torch.ones(1, dtype=torch.bool, device=p.device), verdict.reached])
        depths = tree.fed.depth
        model_rows = logits.float().softmax(-1)
        features = getattr(self.session, "features", None)
        self.drafter.observe(VerifiedPass(self.head_position, len(path), fed, depths, model_rows, on_path, features))
        committed = [tree.tokens[node] for node in path]
        self.head_position = start + len(path)
        if self.head_position < self.seq_len:
            committed.append(next_token)
            self.head = verdict.next_token
        self.shapes.learn(start, shape, levels, len(path), len(committed))
        verify_ms = self.clock.verify_ms(forwarded, verified, host_started)

        record_started = time.perf_counter()
        record = TreeRecord.model_construct(
            start=start,
            tree=DraftTree.model_construct(
                tokens=tree.tokens,
                parents=tree.parents,
                depths=tree.depths,
                confidence=tree.confidence,
                p_target=[min(1.0, max(0.0, value)) for value in values[1 + 2 * n :]],
                fate=fate,
            ),
            path=path,
            accepted=len(path),
            tree_depth=shape.depth,
            tree_top_k=shape.top_k,
            alpha=shape.alpha,
            committed=committed,
            forward_ms=self.clock.ms(drafted, forwarded),
            draft_ms=self.clock.ms(started, drafted),
            verify_ms=verify_ms,
        )
        record.record_ms = (time.perf_counter() - record_started) * 1000
        return record
