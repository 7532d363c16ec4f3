"""SJD-PAC (Kang et al., CVPR 2026, arXiv 2603.18599): SJD with Proactive Drafting and Adaptive
Continuation, lossless.

SJD's pass verifies a chain of drafts and stops at the first rejection; in half its passes only one
token is fixed. SJD-PAC changes two things (official code: `KangJialiang/SJD-PAC`,
`scheduler/sjd_pac_iteration_lumina_mgpt.py`).

- Proactive Drafting. The first D - 1 positions after the head hold K candidates each, drawn without
  replacement from the position's draft distribution q, and the pass verifies every combination: a
  K-ary tree of depth D counting the head (K^d nodes at level d), then a chain of single drafts on below
  the tree's first branch out to the window. With the defaults (`candidates` K 3, `tree_positions`
  D - 1 = 2, `window` 53 positions) a pass feeds the head, 3 + 9 tree nodes and 51 chain drafts: the
  authors' 64 tokens.
- Adaptive Continuation. SJD redraws every position after a rejection from the pass's (stale) rows.
  SJD-PAC first tests the old draft there against that stale row, min(1, p_stale / q_old), and keeps it
  if it passes; otherwise it draws from the residual norm(max(p_stale - q_old, 0)). That is
  speculative sampling, so the token is an exact draw from p_stale, and p_stale is its draft
  distribution on the next pass: images forget distant context fast, so a kept draft is often right.

Verification walks down from the head, as a tree method does, but its drafts are *sampled*: children
x_1..x_K of a node were drawn without replacement from q, so they are tested in order by recursive
rejection sampling, x_b accepted with probability min(1, p_b(x_b) / q_b(x_b)), where p_1 is the node's
target row, p_{b+1} = norm(max(p_b - q_b, 0)) after a rejection and q_{b+1} is q without x_1..x_b,
renormalised; when every child is refused the next token is drawn from p_{K+1}. Each step is
speculative sampling of p_b from a draft that is exactly q_b given the earlier draws, so the token is
an exact sample of the node's row (a rejected x_b has p_b(x_b) <= q_b(x_b), so the residuals never
need it). A chain draft is the case K = 1. Every node gets one uniform; a node passes when its uniform
is below its ratio, the first passing sibling is the accepted child, and everything is vectorised over
the tree (a Python loop over the K sibling ranks only).

Where this differs from the official code, and why:
- Siblings. The official code draws the next pass's K candidates at a position from the residual
  max(p_stale - q_old, 0), the first replaced by the old draft where that draft passed its test, and
  tests them as if drawn without replacement from p_stale: candidates 2..K are then tested against a q
  they were not drawn from. (Emulated on the toys, that law still passes the chi-square at 6,000
  images, so its deviation is small there.) Here candidate 1 is the Adaptive Continuation token (an
  exact draw from p_stale) and candidates 2..K are drawn without replacement from p_stale given it
  (Gumbel top-k): the law the verification assumes.
- Choosing the path. As we read it, the official code accepts the longest run over every root-to-leaf
  row of the tree at once, which can take sibling b + 1's subtree although sibling b passed; here the
  first passing sibling is taken, as recursive rejection sampling requires.
- Stale rows. Like the official code, positions inside the tree take their stale row from the path
  that was accepted, continued through first candidates, and positions beyond it from the chain.
- New slots are drawn uniformly over the image codes (the official code's random initialisation);
  the slot after the window takes the last chain row, as SJD's refined draft (the official code fills
  it uniformly), and after a fully accepted pass the next token is drawn from the last node's row (the
  official code, as we read it, takes it from its uniform padding row, which is not exact). Forced layout slots have
  one candidate. The tree keeps its shape: a candidate that cannot be drawn (fewer than K tokens left in
  q's support) is fed but never accepted.

The trace records each pass as a tree (`TreeRecord`): the tree of candidates and the chain below it,
each node with q_b(x) as its confidence and p_b(x) as its target probability.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import torch

from specviz.core.params import SjdPacParameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.passes import TokenLoop
from specviz.decoding.sampling import RESIDUAL_EPSILON, residual, sample, token_probs
from specviz.decoding.tree import sibling_order
from specviz.models.protocol import IMAGE_CELL, Session
from specviz.models.session import TreeMask
from specviz.models.syncing import read_to_host
from specviz.trace import DraftTree, Iteration, TreeRecord


def iterate(
    session: Session, sampling: SamplingSettings, generator: torch.Generator, params: SjdPacParameters
) -> Iterator[Iteration]:
    """Yield one Iteration per model pass until every position is fixed."""
    yield from PacWindow(session, sampling, generator, params).records()


@dataclass
class PacTree:
    """The static shape of a pass over `columns` drafted positions: the K-ary tree on the first `levels`
    of them (every combination of candidates), then a chain below its first branch. Node i drafts
    position head + depths[i] with candidate `ranks[i]` of that position."""

    parents: list[int]  # -1: a child of the head
    depths: list[int]
    ranks: list[int]
    levels: int
    fed: TreeMask  # the head (row 0) and the nodes, on the device
    on_device: torch.Tensor  # (3, n): parents, depths and ranks on the device

    @classmethod
    def build(cls, columns: int, width: int, tree_positions: int, device: torch.device) -> PacTree:
        levels = min(tree_positions, columns)
        parents, depths, ranks = [], [], []
        level = [-1]
        for depth in range(1, levels + 1):
            below = []
            for parent in level:
                for rank in range(width):
                    below.append(len(parents))
                    parents.append(parent)
                    depths.append(depth)
                    ranks.append(rank)
            level = below
        main = level[0]  # the first branch: first candidates all the way down (-1: no tree)
        for depth in range(levels + 1, columns + 1):
            parents.append(main)
            depths.append(depth)
            ranks.append(0)
            main = len(parents) - 1
        # the mask and the index columns go to the device in one copy (a copy from the host waits for it)
        fed, (columns,) = TreeMask.on(device, [-1] + [p + 1 for p in parents], torch.tensor([parents, depths, ranks]))
        return cls(parents, depths, ranks, levels, fed, columns)

    @cached_property
    def index(self) -> dict[str, torch.Tensor]:
        """The tree's index tensors on the device, made there from the one copy."""
        parents, depths, ranks = self.on_device
        has_children = torch.zeros(len(self.parents) + 1, dtype=torch.bool, device=parents.device)
        return {
            "parent_row": parents + 1,  # row of p holding each node's parent
            "column": depths - 1,  # the position each node drafts
            "rank": ranks,
            "depth": depths,
            "earlier": sibling_order(parents),  # (n, n): siblings tested before each node
            "ancestors": self.fed.ancestors[1:, 1:].float(),  # (n, n): each node and its ancestors
            "has_children": has_children.index_fill_(0, parents + 1, True),  # per row of p
        }


class PacWindow(TokenLoop):
    """The head, and for each drafted position its K candidates (candidate 0 first), which can be drawn,
    and the distribution q they were drawn from; `step()` makes one pass and returns its record."""

    def __init__(
        self, session: Session, sampling: SamplingSettings, generator: torch.Generator, params: SjdPacParameters
    ):
        super().__init__(session, sampling, generator, params)
        geometry, device = session.geometry, self.device
        self.forced = torch.tensor([*geometry.layout, IMAGE_CELL], device=device)
        layout_tokens = sorted({entry for entry in geometry.layout if entry != IMAGE_CELL})
        codes = torch.ones(self.vocab, device=device)
        codes[layout_tokens] = 0
        self.uniform = codes / codes.sum()  # new slots: a uniformly random image code
        self.trees: dict[int, PacTree] = {}
        self.draw_first()
        self.first = torch.empty(0, dtype=torch.long, device=device)  # candidate 0 of every drafted position
        self.q = torch.empty(0, self.vocab, device=device)
        self._fill()

    def tree(self, columns: int) -> PacTree:
        if columns not in self.trees:
            self.trees[columns] = PacTree.build(
                columns, self.params.candidates, self.params.tree_positions, self.device
            )
        return self.trees[columns]

    # ---- one pass ---------------------------------------------------------------------------------

    def step(self) -> TreeRecord:
        start = self.head_position + 1
        started = self.clock.mark()
        tree = self.tree(len(self.first))
        candidates, drawable = self._candidates(tree.levels)  # (columns, K): the tree's candidates
        index = tree.index
        tokens = candidates[index["column"], index["rank"]]
        drafted = self.clock.mark()
        logits = self.session.forward(torch.cat([self.head, tokens]), parents=tree.fed)
        p = self.sampling.probabilities(logits)  # (n + 1, V): row 0 the head's, row i + 1 node i's
        forwarded = self.clock.mark()
        check = self._verify(p, tree, candidates, drawable, tokens)
        verified = self.clock.mark()

        n = len(tokens)
        packed = torch.cat([check["next_token"], check["reached"].long(), tokens]).double()
        values = read_to_host(torch.cat([packed, check["q"].double(), check["p"].double()]))  # the one host read
        host_started = time.perf_counter()
        next_token, reached = int(values[0]), values[1 : 1 + n]
        node_tokens = [int(v) for v in values[1 + n : 1 + 2 * n]]
        path = [node for node in range(n) if reached[node]]  # parents come first: in order of depth
        self.session.commit([0] + [node + 1 for node in path])
        committed = [node_tokens[node] for node in path]
        accepted = len(path)
        self.head_position = start + accepted
        if self.head_position < self.seq_len:
            committed.append(next_token)
            self.head = check["next_token"]
            self._slide(check, accepted)
        verify_ms = self.clock.verify_ms(forwarded, verified, host_started)

        record_started = time.perf_counter()
        probability = [min(1.0, max(0.0, value)) for value in values[1 + 2 * n :]]
        draft_tree = DraftTree.model_construct(
            tokens=node_tokens,
            parents=tree.parents,
            depths=tree.depths,
            confidence=probability[:n],
            p_target=probability[n:],
            fate=[],
        )
        draft_tree.fate = draft_tree.fates_of(path)
        record = TreeRecord.model_construct(
            start=start,
            tree=draft_tree,
            path=path,
            accepted=accepted,
            tree_depth=max(tree.depths),
            tree_top_k=self.params.candidates,
            committed=committed,
            forward_ms=self.clock.ms(drafted, forwarded),
            draft_ms=self.clock.ms(started, drafted),
            verify_ms=verify_ms,
        )
        record.record_ms = (time.perf_counter() - record_started) * 1000
        return record

    def _candidates(self, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(columns, K) candidates and whether each could be drawn: candidate 0 is the position's draft;
        on the tree's levels the others are drawn without replacement from q given it (Gumbel top-k)."""
        width = self.params.candidates
        candidates = self.first[:, None].repeat(1, width)
        drawable = torch.zeros_like(candidates, dtype=torch.bool)
        drawable[:, 0].fill_(True)  # fill_, not `= True`: on CUDA that reads a CPU scalar
        if width > 1 and levels:
            q = self.q[:levels]
            uniform = torch.rand(q.shape, generator=self.generator, device=self.device).clamp(min=1e-20)
            scores = (q.log() - (-uniform.log()).log()).scatter(1, self.first[:levels, None], float("-inf"))
            top = scores.topk(width - 1, dim=1)
            candidates[:levels, 1:] = top.indices
            drawable[:levels, 1:] = top.values > float("-inf")
        return candidates, drawable

    def _verify(
        self, p: torch.Tensor, tree: PacTree, candidates: torch.Tensor, drawable: torch.Tensor, tokens: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Recursive rejection sampling down the tree, on the device; also every node's test against its
        parent's row (Adaptive Continuation reads the tests of nodes past the accepted path)."""
        index, width = tree.index, self.params.candidates
        column, rank = index["column"], index["rank"]
        # q_b per position and rank: q without the candidates before rank b, renormalised (zero if not drawable)
        q_ranked = [self.q]
        for b in range(1, width):
            removed = torch.zeros_like(self.q).scatter_(1, candidates[:, b - 1 : b], 1.0)
            left = q_ranked[-1] * (1 - removed)
            q_ranked.append(left / left.sum(1, keepdim=True).clamp(min=RESIDUAL_EPSILON))
        q_ranked = torch.stack(q_ranked, 1) * drawable[:, :, None]  # (columns, K, V)
        # p_b per parent row and rank: the parent's row, then the residual after each refused sibling
        p_ranked = [p]
        child_column = torch.zeros(len(p), dtype=torch.long, device=p.device).index_copy_(
            0, index["parent_row"], column
        )
        for b in range(1, width):
            p_ranked.append(residual(p_ranked[-1], q_ranked[child_column, b - 1]))
        after_all = residual(p_ranked[-1], q_ranked[child_column, width - 1])  # every child refused
        p_ranked = torch.stack(p_ranked, 1)  # (n + 1, K, V)
        q_node = q_ranked[column, rank]  # (n, V)
        p_node = p_ranked[index["parent_row"], rank]
        q_x, p_x = token_probs(q_node, tokens), token_probs(p_node, tokens)
        ratio = torch.where(drawable[column, rank], p_x / q_x.clamp(min=torch.finfo(q_x.dtype).tiny), 0.0).clamp(max=1)
        passes = torch.rand(len(tokens), generator=self.generator, device=p.device) < ratio
        chosen = passes & ~((index["earlier"] @ passes.float()) > 0)  # the first sibling that passes
        reached = (index["ancestors"] @ (~chosen).float()) == 0
        deepest = torch.where(reached.any(), (reached * index["depth"]).argmax() + 1, 0)  # its row in p
        row = deepest.view(1)  # a device index: indexing with the 0-d `deepest` would read it on the host
        children = index["has_children"].index_select(0, row)[0]
        next_from = torch.where(children, after_all.index_select(0, row)[0], p.index_select(0, row)[0])
        return {
            "reached": reached,
            "passes": passes,
            "p_rows": p,
            "next_token": sample(next_from[None], self.generator),
            "q": q_x,
            "p": p_x,
        }

    # ---- between passes ---------------------------------------------------------------------------

    def _slide(self, check: dict, accepted: int) -> None:
        """The positions after the new head keep a draft: candidate 0 of the stale path where Adaptive
        Continuation passes it (else a residual draw), or a draw from the stale row; the row after the
        window drafts the next slot; new slots are filled."""
        tree, p = self.tree(len(self.first)), check["p_rows"]
        index = tree.index
        # the stale path: the accepted nodes, then first candidates below them (the chain beyond the tree)
        depth = index["depth"]
        in_tree = depth <= tree.levels
        keep_going = torch.where(depth <= accepted, check["reached"], index["rank"] == 0)
        stale = ~in_tree | ((index["ancestors"] * in_tree.float()) @ (~keep_going).float() == 0)
        columns = len(self.first)
        at_depth = depth[:, None] == torch.arange(1, columns + 1, device=self.device)[None]
        node = (stale[:, None] & at_depth).float().argmax(0)  # (columns,) the stale node drafting each position
        rows = p[index["parent_row"][node]]  # (columns, V): the stale target of each position
        old = self.first
        if self.params.continuation:
            passed = check["passes"][node]
            carried = torch.where(passed, old, sample(residual(rows, self.q), self.generator))
        else:
            carried = sample(rows, self.generator)
        after = p.index_select(0, node[-1:] + 1)  # the last stale node's row: the position after the window
        first = accepted + 1  # old column of the first position after the new head
        self.first = torch.cat([carried[first:], sample(after, self.generator)])
        self.q = torch.cat([rows[first:], after])
        self._fill()

    def _fill(self) -> None:
        """Trim the window to W positions (and the image's end), then append uniformly random drafts."""
        last = min(self.head_position + self.params.window, self.seq_len - 1)
        keep = max(0, last - self.head_position)
        self.first, self.q = self.first[:keep], self.q[:keep]
        begin = self.head_position + 1 + len(self.first)
        if begin <= last:
            count = last - begin + 1
            q = self.uniform.expand(count, -1)
            forced = self.forced[begin : last + 1]
            one_hot = torch.nn.functional.one_hot(forced.clamp(min=0), self.vocab).to(q.dtype)
            q = torch.where((forced != IMAGE_CELL)[:, None], one_hot, q)
            self.first = torch.cat([self.first, sample(q, self.generator)])
            self.q = torch.cat([self.q, q])
