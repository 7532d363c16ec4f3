"""The record of one run: settings, final tokens, and one entry per iteration.

Stored as versioned JSON (never pickle) and validated on load with pydantic, so a malformed or
hostile file gets a clear message and nothing else. Only the probabilities of drafted tokens are
kept, never full distributions, so a trace of a 256-token image is a few tens of kilobytes.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from specviz.core.catalogue import CATALOGUE
from specviz.core.errors import TraceError
from specviz.core.inputs import brief, read_bounded
from specviz.core.params import Parameters
from specviz.core.settings import SamplingSettings

TRACE_VERSION = 4
# the largest trace a real run writes is a few MB (Emu3 at 720p, 8,190 positions, W = 128: about 6 MB);
# parsing is bounded by this, and memory with it
MAX_TRACE_BYTES = 32 * 1024 * 1024
# values (numbers, strings, true, false, null, lists and objects) a trace may hold; a W = 128 run of Emu3 at
# 720p records about a million
MAX_JSON_VALUES = 4_000_000
# lists and objects among them: the costliest values per byte (an empty object is 2 bytes of JSON and 64 of
# Python); a 720p Emu3 run holds about 60,000, a MAR run with 100-step denoising paths about 150,000
MAX_JSON_CONTAINERS = 1_000_000
MAX_MESSAGE_CHARS = 200  # of one problem in a refusal: enough for any check's sentence, not for a quoted list
# names a trace gives its model and method: registry names, which become parts of file names and titles
NAME_CHARACTERS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
MAX_PARAMETERS = 64
MAX_SEED = 2**63 - 1
MAX_POSITIONS = 65536  # longest generated sequence a trace may describe
MAX_DRAFTS = 1024  # drafts one iteration may verify
RESIDUAL_ENTRIES = 16  # tokens recorded at a rejected position

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Count = Annotated[int, Field(ge=0)]
Fate = Literal["accepted", "rejected", "kept", "redrawn", "reset"]
# a draft-tree node: on the accepted path, tested and refused, or never tested (its parent was not
# reached, or a sibling tried before it was accepted)
TreeFate = Literal["accepted", "rejected", "untested"]
# where a newly initialised draft came from: an initialisation strategy, the model's row after the
# window ("refined"), a forced layout slot, or "unknown" in a trace converted from version 1
# a continuous-token draft: accepted, the first rejection (resampled), or discarded after it
ContinuousFate = Literal["accepted", "rejected", "discarded"]
# where a committed continuous token came from (see ContinuousStep)
TokenSource = Literal["target", "draft", "resampled", "capped"]
MAX_TOKEN_DIM = 64
MAX_PATH_POINTS = 1001  # a denoising trajectory of at most 1000 steps


def _pair_from_json(value: object) -> object:
    """A JSON list as the tuple a field holds: a trace is validated strictly (see `Trace.from_json`), and
    strict validation takes only a tuple for a tuple."""
    return tuple(value) if isinstance(value, list) else value


Point = Annotated[tuple[float, float], BeforeValidator(_pair_from_json)]
Origin = Literal["random", "repeat-left", "repeat-above", "sample-left", "sample-above", "refined", "forced", "unknown"]


def _registry_name(name: str) -> str:
    if not NAME_CHARACTERS.fullmatch(name):
        raise ValueError(f"a registry name: at most 100 letters, digits and . _ + -, not {brief(name)}")
    return name


RegistryName = Annotated[str, AfterValidator(_registry_name)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TraceGeometry(_Strict):
    rows: Annotated[int, Field(ge=1, le=4096)]
    cols: Annotated[int, Field(ge=1, le=4096)]
    vocab_size: Annotated[int, Field(ge=1, le=1_000_000)]
    layout: Annotated[list[int], Field(max_length=MAX_POSITIONS)]
    # the raster cell of each position (-1: a layout slot), where positions are not in raster order: a
    # model that generates in a random order (MAR), or a method that decides them in its own order (ZipAR)
    order: Annotated[list[int], Field(max_length=MAX_POSITIONS)] | None = None

    @model_validator(mode="after")
    def _layout_matches_grid(self) -> TraceGeometry:
        cells = sum(1 for entry in self.layout if entry == -1)
        if cells != self.rows * self.cols:
            raise ValueError(
                f"layout has {cells} image cells, grid {self.rows}x{self.cols} needs {self.rows * self.cols}"
            )
        if any(entry < -1 or entry >= self.vocab_size for entry in self.layout):
            raise ValueError("layout entries must be -1 (image cell) or a token id below vocab_size")
        if self.order is not None:
            placed = sorted(cell for cell in self.order if cell != -1)
            slots = [cell == -1 for cell in self.order] == [entry != -1 for entry in self.layout]
            if len(self.order) != len(self.layout) or placed != list(range(cells)) or not slots:
                raise ValueError(
                    "a generation order must place every image position on its own grid cell and mark layout slots -1"
                )
        return self


class TraceSampling(_Strict):
    """The run's sampling settings as recorded; `Trace.sampling_settings` holds them to SamplingSettings' bounds."""

    temperature: Annotated[float, Field(ge=0.0)]
    top_k: Annotated[int, Field(ge=1)] | None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)]
    guidance_scale: Annotated[float, Field(ge=0.0)]


def _per_draft(kind: object) -> object:
    return Annotated[list[kind], Field(max_length=MAX_DRAFTS)]


class DraftTree(_Strict):
    """The draft tree one pass verified (eagle2, peanut), its nodes in the order they were tested.

    Per node: its token, `parents` the index of its parent (-1: a child of the head, the token decided
    before the pass), `depths` its level (1 for the head's children; a node at depth d drafts position
    start + d - 1), `confidence` the drafter's q(x | ancestors), `p_target` the target's p(x | ancestors),
    and `fate`. Parents come before their children, and siblings are tested in index order.
    """

    tokens: _per_draft(Count)
    parents: _per_draft(Annotated[int, Field(ge=-1)])
    depths: _per_draft(Annotated[int, Field(ge=1)])
    confidence: _per_draft(Probability)
    p_target: _per_draft(Probability)
    fate: _per_draft(TreeFate)

    @model_validator(mode="after")
    def _consistent(self) -> DraftTree:
        n = len(self.tokens)
        if any(len(values) != n for values in (self.parents, self.depths, self.confidence, self.p_target, self.fate)):
            raise ValueError(f"tokens, parents, depths, confidence, p_target and fate need one entry per node ({n})")
        for index, (parent, depth) in enumerate(zip(self.parents, self.depths, strict=True)):
            if parent >= index:
                raise ValueError(f"node {index}: its parent {parent} must come before it")
            if depth != (1 if parent < 0 else self.depths[parent] + 1):
                raise ValueError(f"node {index}: depth {depth} is not one below its parent's")
        return self

    def fates_of(self, path: list[int]) -> list[str]:
        """Every node's fate given the accepted path: a child of the head or of a path node is tested
        until one sibling is accepted (the path's next node); after it, and below untested nodes, nothing is."""
        chosen = {self.parents[node]: node for node in path}
        reached = {-1, *path}
        fates = []
        for index, parent in enumerate(self.parents):
            accepted = chosen.get(parent)
            if parent not in reached or (accepted is not None and index > accepted):
                fates.append("untested")
            else:
                fates.append("accepted" if index == accepted else "rejected")
        return fates


def decided_listing(positions: list[int], length: int) -> list[int]:
    """The sequence positions in a run's order of decision: those its records name (PJD), then the rest in
    raster order."""
    return [*positions, *sorted(set(range(length)) - set(positions))]


class _Record(_Strict):
    """What every pass records, whatever its kind: `start` the first sequence position it decided,
    `committed` the tokens it fixed from there, `accepted` how many of them were drafts it accepted,
    `forward_ms` the model pass, `draft_ms` the drafter's time, `verify_ms` the method's own work
    (verification, redraws, new slots, cache cropping), `record_ms` the cost of writing the record.

    Each kind answers the questions the views and metrics ask of a pass in its own terms (`outcome`,
    `reach`, `rejects`, `verifies_drafts`), so nothing outside needs to know which kind it holds.
    """

    start: Count
    committed: Annotated[list[Count], Field(max_length=MAX_DRAFTS + 1)]
    accepted: Count = 0
    forward_ms: Annotated[float, Field(ge=0.0)]
    draft_ms: Annotated[float, Field(ge=0.0)] = 0.0
    verify_ms: Annotated[float, Field(ge=0.0)] = 0.0
    record_ms: Annotated[float, Field(ge=0.0)] = 0.0

    @property
    def verifies_drafts(self) -> bool:
        """A pass that verified drafts, as opposed to one that only sampled a token."""
        return False

    def outcome(self) -> list[str]:
        """What the grid shows at each position from `start` that the pass drafted: a window's fates
        (a draft verified for the first time and neither accepted nor rejected shows as `new`)."""
        return []

    def reach(self) -> int:
        """Positions from `start` that the pass drafted: its window, its tree's levels, its drafts."""
        return len(self.outcome())

    def placed_drafts(self) -> list[tuple[int, str]]:
        """(sequence position, what the grid shows there) of drafts that do not follow `start` in the run's
        order of decision, as `outcome()`'s do: the windows of several rows in flight (PJD)."""
        return []

    def rejects(self) -> bool:
        """Whether a draft was tested and refused in this pass."""
        return "rejected" in self.outcome()

    def drafted_ids(self) -> list[int]:
        """The token ids this pass drafted, to check them against the vocabulary."""
        return []

    @property
    def changed(self) -> int:
        """Drafts carried into the next window with another token (what SCD reduces)."""
        return 0

    @property
    def carried(self) -> int:
        """Drafts carried into the next window, changed or not."""
        return 0

    @property
    def window_drafts(self) -> int:
        """Drafts in the pass's Jacobi window (0: the pass had none)."""
        return 0

    @property
    def new_drafts(self) -> int:
        """Drafts the pass verified for the first time (a window's new slots)."""
        return 0

    @property
    def draft_tree(self) -> DraftTree | None:
        """The draft tree the pass verified, if it verified one."""
        return None

    def uncommitted_drafts(self) -> list[int]:
        """The drafts after the committed run that the pass verified but did not keep in place (a window's
        guesses beyond its accepted run and resampled token)."""
        return []

    def accepted_depths(self) -> list[int]:
        """The depth in its draft tree of each accepted draft (none without a tree)."""
        return []

    def asked_shape(self) -> dict[str, float | None] | None:
        """The tree shape the method asked for this pass (depth, top-k, PEANUT's alpha); None without a tree."""
        return None

    def tested_fates(self) -> list[str]:
        """The fates of a continuous pass's drafts that were tested (not those discarded untested)."""
        return []

    @property
    def drawn_by_draft_alone(self) -> bool:
        """Every token of the pass drawn by a continuous pair's draft model, none verified (ar-draft)."""
        return False

    def _commits_path(self, what: str) -> None:
        if len(self.committed) not in (self.accepted, self.accepted + 1):
            raise ValueError(f"a {what} commits its accepted drafts and at most one token after them")


class TokenRecord(_Record):
    """A pass that drew one token and verified no draft: every pass of AR, and the first token of the
    other methods (drawn from the prefill's distribution)."""

    kind: Literal["token"] = "token"

    @model_validator(mode="after")
    def _consistent(self) -> TokenRecord:
        if self.accepted or len(self.committed) != 1:
            raise ValueError("a token pass commits exactly one token and accepts no draft")
        return self


class RowWindow(_Strict):
    """One row's Jacobi window in a pass of rows in flight (PJD): `row` its grid row, `head` the sequence
    position of the token fed before its drafts (the row's latest decided token, or the end of the row
    above), and per draft after it: `drafts` the tokens, `ratio` min(1, p/q), `fate` (`accepted`; at the
    first refusal `rejected`; after it `kept` for the next pass, or `redrawn` from p). `new` counts the
    last drafts drawn at random for this pass (verified for the first time); `committed` the tokens the row
    fixed: its accepted drafts, and where the row resamples (the top row) the token drawn after them."""

    row: Annotated[int, Field(ge=0, lt=4096)]
    head: Count
    drafts: _per_draft(Count)
    ratio: _per_draft(Probability)
    fate: _per_draft(Fate)
    new: Count = 0
    committed: Count

    @property
    def accepted(self) -> int:
        return self.fate.count("accepted")

    def shown(self) -> list[tuple[int, str]]:
        """(offset, what the grid shows) of each draft: its fate, or `new` for a draft verified for the first
        time and neither accepted nor rejected."""
        first_new = len(self.drafts) - self.new
        return [
            (offset, "new" if offset >= first_new and fate not in ("accepted", "rejected") else fate)
            for offset, fate in enumerate(self.fate)
        ]

    @model_validator(mode="after")
    def _consistent(self) -> RowWindow:
        n = len(self.drafts)
        if len(self.ratio) != n or len(self.fate) != n or self.new > n:
            raise ValueError(f"a row's window needs a ratio and a fate per draft ({n}), and at most {n} new")
        accepted = self.accepted
        rejected = ["rejected"] if accepted < n else []
        if self.fate[: accepted + 1] != ["accepted"] * accepted + rejected:
            raise ValueError("a row's fates are accepted, then rejected at its first refusal")
        if not set(self.fate[accepted + 1 :]) <= {"kept", "redrawn"}:
            raise ValueError("a row's drafts after its first refusal are kept or redrawn")
        if self.committed not in (accepted, accepted + 1):
            raise ValueError("a row commits its accepted drafts and at most one token after them")
        return self


class RowsRecord(_Record):
    """A pass over several image rows in flight. ZipAR: one token drawn in each row, nothing verified.
    PJD: each row's Jacobi window verified (`windows`, top row first), each row committing its accepted
    drafts (and the top row the token after them), `accepted` of them in all. `rows` is the grid row of
    each committed token, top row first; `fed` the tokens the pass fed to the model, of which `stand_ins`
    stood in for the unfinished end of a row above. The run's positions are in the order it decided them
    (its geometry's `order`), so a pass commits consecutive positions there; where that order is known
    only as the run goes (PJD), `positions` names the sequence position of each committed token."""

    kind: Literal["rows"] = "rows"
    rows: Annotated[list[Annotated[int, Field(ge=0, lt=4096)]], Field(min_length=1, max_length=MAX_DRAFTS + 1)]
    fed: Count = 0
    stand_ins: Count = 0
    positions: Annotated[list[Count], Field(max_length=MAX_DRAFTS + 1)] | None = None
    windows: Annotated[list[RowWindow], Field(max_length=4096)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> RowsRecord:
        if len(self.rows) != len(self.committed):
            raise ValueError("a rows pass names the row of every token it commits")
        if self.positions is not None and len(set(self.positions)) != len(self.committed):
            raise ValueError("a rows pass names a distinct position for every token it commits")
        if self.stand_ins > self.fed:
            raise ValueError("stand-ins are among the tokens a pass fed")
        if self.windows is None:
            if self.accepted:
                raise ValueError("a rows pass draws its tokens and accepts no draft")
            if any(later <= earlier for earlier, later in zip(self.rows, self.rows[1:], strict=False)):
                raise ValueError("a rows pass draws one token per row, top row first")
            return self
        self._windows_commit_in_order()
        return self

    def _windows_commit_in_order(self) -> None:
        """Rows' windows top row first, each row's committed tokens beginning with its accepted drafts, at
        the positions after its head."""
        windows = self.windows
        if any(later.row <= earlier.row for earlier, later in itertools.pairwise(windows)):
            raise ValueError("a rows pass gives one window per row, top row first")
        if self.rows != [window.row for window in windows for _ in range(window.committed)]:
            raise ValueError("a rows pass commits each row's tokens in its window's order")
        if self.accepted != sum(window.accepted for window in windows):
            raise ValueError("a rows pass accepts the drafts its windows accept")
        at = 0
        for window in windows:
            if self.committed[at : at + window.accepted] != window.drafts[: window.accepted]:
                raise ValueError(f"row {window.row}'s committed tokens must begin with its accepted drafts")
            placed = range(window.head + 1, window.head + 1 + window.committed)
            if self.positions is not None and self.positions[at : at + window.committed] != list(placed):
                raise ValueError(f"row {window.row} commits the positions after its head")
            at += window.committed

    @property
    def verifies_drafts(self) -> bool:
        return any(window.drafts for window in self.windows or [])

    def rejects(self) -> bool:
        return any("rejected" in window.fate for window in self.windows or [])

    def placed_drafts(self) -> list[tuple[int, str]]:
        """Each row's drafts after its head, by fate (a draft verified for the first time and neither
        accepted nor rejected shows as `new`)."""
        return [(window.head + 1 + offset, shown) for window in self.windows or [] for offset, shown in window.shown()]

    def drafted_ids(self) -> list[int]:
        return [token for window in self.windows or [] for token in window.drafts]

    @property
    def changed(self) -> int:
        return sum(window.fate.count("redrawn") for window in self.windows or [])

    @property
    def carried(self) -> int:
        return sum(window.fate.count("redrawn") + window.fate.count("kept") for window in self.windows or [])

    @property
    def new_drafts(self) -> int:
        return sum(window.new for window in self.windows or [])


class GroupTest(_Strict):
    """A relaxed window test (LANTERN, GSD) as its methods record it: per draft, how many tokens the test pooled,
    and their mass under the target now and under the distribution the draft was drawn from."""

    size: _per_draft(Count)
    mass_new: _per_draft(Probability)
    mass_old: _per_draft(Probability)

    @model_validator(mode="after")
    def _one_per_draft(self) -> GroupTest:
        if not len(self.size) == len(self.mass_new) == len(self.mass_old):
            raise ValueError("a group test holds a size and two masses per draft")
        return self


class WindowRecord(_Record):
    """One pass of a Jacobi-window method (jacobi, sjd, sjd++, scd-mc, scd-gs, lantern, gsd).

    Offsets are relative to `start`, the first sequence position of the window. Per verified draft:
    `drafts` the tokens, `p_old`/`p_new` their probabilities under the distribution they were drawn
    from and under the target computed now, `ratio` their acceptance probabilities, `uniform` the
    draw that decided each (None where none did), `tv` the total-variation distance between the two
    distributions (SCD's bound: a coupled draft stays the same with probability up to 1 - tv), and
    `fate`: `accepted`, `rejected` (the first rejection, resampled), then for each later draft `kept`
    (the same token carried into the next window), `redrawn` (its token changed) or `reset`
    (discarded and initialised afresh). `new_init` and `new_source` say where the last
    len(new_init) drafts, verified for the first time, came from (source position, -1 for none).
    `residual_top` lists (token, p_old, p_new) of the most likely tokens at the rejected position.
    A relaxed method's test is its own part, `group` (the group each draft was tested on). A method that
    reuses drafts (SJD++) marks in `reused` each kept draft its rule reused rather than redrew (a redraw can
    give the same token). `committed` are the accepted drafts and the token drawn after them.
    """

    kind: Literal["window"] = "window"
    drafts: Annotated[list[Count], Field(min_length=1, max_length=MAX_DRAFTS)]
    p_old: _per_draft(Probability)
    p_new: _per_draft(Probability)
    ratio: _per_draft(Probability)
    uniform: _per_draft(Probability | None)
    tv: _per_draft(Probability | None)
    fate: _per_draft(Fate)
    rejected_at: Count | None = None
    resampled: Count | None = None
    residual_top: (
        Annotated[
            list[Annotated[tuple[Count, Probability, Probability], BeforeValidator(_pair_from_json)]],
            Field(max_length=RESIDUAL_ENTRIES),
        ]
        | None
    ) = None
    new_init: _per_draft(Origin) = []
    new_source: _per_draft(Annotated[int, Field(ge=-1)]) = []
    group: GroupTest | None = None
    reused: _per_draft(bool) | None = None

    @model_validator(mode="after")
    def _consistent(self) -> WindowRecord:
        n = len(self.drafts)
        per_draft = [self.p_old, self.p_new, self.ratio, self.uniform, self.tv, self.fate]
        if any(len(values) != n for values in per_draft):
            raise ValueError(f"drafts, p_old, p_new, ratio, uniform, tv and fate need one entry per draft ({n})")
        if self.group is not None and len(self.group.size) != n:
            raise ValueError(f"a group test needs one group per draft ({n})")
        if self.reused is not None and (
            len(self.reused) != n or any(r and f != "kept" for r, f in zip(self.reused, self.fate, strict=True))
        ):
            raise ValueError(f"reused needs one entry per draft ({n}), true only where a draft was kept")
        if self.accepted > n or len(self.new_init) > n or len(self.new_source) != len(self.new_init):
            raise ValueError("accepted and new drafts cannot exceed the drafts; new_init and new_source pair up")
        if self.rejected_at is not None and self.rejected_at != self.accepted:
            raise ValueError("the first rejection must come right after the accepted drafts")
        if (self.rejected_at is None) != (self.resampled is None):
            raise ValueError("rejected_at and resampled are given together or not at all")
        if self.committed[: self.accepted] != self.drafts[: self.accepted]:
            raise ValueError("committed tokens must begin with the accepted drafts")
        self._commits_path("window pass")
        expected = ["accepted"] * self.accepted + (["rejected"] if self.rejected_at is not None else [])
        if self.fate[: len(expected)] != expected or not set(self.fate[len(expected) :]) <= LATER_FATES:
            raise ValueError(
                "fate must be accepted for the accepted drafts, rejected at the rejection, then kept, redrawn or reset"
            )
        if self.rejected_at is None and len(expected) != n:
            raise ValueError("a window without a rejection accepts every draft")
        return self

    @property
    def verifies_drafts(self) -> bool:
        return True

    def outcome(self) -> list[str]:
        first_new = len(self.drafts) - len(self.new_init)
        return [
            "new" if offset >= first_new and fate not in ("accepted", "rejected") else fate
            for offset, fate in enumerate(self.fate)
        ]

    def drafted_ids(self) -> list[int]:
        return self.drafts

    @property
    def changed(self) -> int:
        return self.fate.count("redrawn")

    @property
    def carried(self) -> int:
        return self.fate.count("redrawn") + self.fate.count("kept")

    @property
    def window_drafts(self) -> int:
        return len(self.drafts)

    @property
    def new_drafts(self) -> int:
        return len(self.new_init)

    def uncommitted_drafts(self) -> list[int]:
        return self.drafts[len(self.committed) :]


LATER_FATES = {"kept", "redrawn", "reset"}


class TreeRecord(_Record):
    """One pass of a draft-tree method (eagle2, peanut): its `tree`, `path` the accepted nodes from the
    head's child down (`accepted` of them, committed first, then the exact token drawn after them),
    `tree_depth` and `tree_top_k` the shape the method asked for (the tree may be shallower near the
    end of the image or where the drafter ran out of candidates), `alpha` (PEANUT) the acceptance rate
    of the tree that chose that shape; `draft_ms` is the drafter's time."""

    kind: Literal["tree"] = "tree"
    tree: DraftTree
    path: _per_draft(Count)
    tree_depth: Annotated[int, Field(ge=1)] | None = None
    tree_top_k: Annotated[int, Field(ge=1)] | None = None
    alpha: Probability | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TreeRecord:
        tree, path = self.tree, self.path
        if self.accepted != len(path):
            raise ValueError("a tree pass gives its accepted path, `accepted` nodes long")
        if any(node >= len(tree.tokens) for node in path):
            raise ValueError(f"path {path} names a node the tree does not have")
        if [tree.parents[node] for node in path] != [-1, *path][: len(path)]:
            raise ValueError(f"path {path} is not a path down from the head")
        if self.committed[: self.accepted] != [tree.tokens[node] for node in path]:
            raise ValueError("committed tokens must begin with the accepted path's tokens")
        self._commits_path("tree pass")
        if tree.fate != tree.fates_of(path):
            raise ValueError("node fates disagree with the accepted path")
        if self.tree_depth is not None and max(tree.depths, default=0) > self.tree_depth:
            raise ValueError(f"the tree is deeper than the depth {self.tree_depth} asked for")
        return self

    @property
    def verifies_drafts(self) -> bool:
        return True

    def outcome(self) -> list[str]:
        """Per sequence position, as a window's would read: the accepted path's positions accepted, then
        the token drawn after it `rejected` (resampled) where the tree's drafts for that position were
        tested and refused, or nothing where the path ran to a leaf (that token was drawn with no draft
        to test, as after a fully accepted window)."""
        refused = any(
            fate == "rejected" and depth == self.accepted + 1
            for fate, depth in zip(self.tree.fate, self.tree.depths, strict=True)
        )
        return ["accepted"] * self.accepted + (["rejected"] if refused else [])

    def reach(self) -> int:
        return max(self.tree.depths, default=0)

    def rejects(self) -> bool:
        return self.accepted < self.reach()

    def drafted_ids(self) -> list[int]:
        return self.tree.tokens

    @property
    def draft_tree(self) -> DraftTree:
        return self.tree

    def accepted_depths(self) -> list[int]:
        return [self.tree.depths[node] for node in self.path]

    def asked_shape(self) -> dict[str, float | None]:
        return {"depth": self.tree_depth, "top_k": self.tree_top_k, "alpha": self.alpha}


class ContinuousRecord(_Record):
    """One pass of a method on a continuous-token pair (ar, ar-draft, cspd, cspd-exact). Its committed
    token ids are all 0: the values are the trace's `vectors`.

    Per drafted token: `log_ratio` the log of the ratio the method tests (cspd: log Sigma +
    log p(x_0 | x_1^p) - log q(x_0 | x_1^q), the paper's Eq. 5; cspd-exact: log p(path) - log q(path)
    along the draft's own trajectory), `log_sigma` cspd's variance term log Sigma (Eq. 4; None for
    cspd-exact), `ratio` min(1, exp(log_ratio)), `uniform` the draw that decided it (None after the
    first rejection: not tested), `fate`; `draft_path` the first two coordinates of the draft's
    denoising trajectory x_T ... x_0, `target_path` those of the target's trajectory on the same noise
    (cspd's alignment; None for cspd-exact, whose target is evaluated along the draft's own path).

    Per committed token, `source`: drawn by the target alone (AR, pre-fill, the token after a fully
    accepted draft), accepted from the `draft`, `resampled` after a rejection, or `capped` (resampling
    reached its cap of tries and kept the last target proposal, not a draw of the residual); `ar-draft`
    marks its tokens `draft`. `tries` counts the target proposals drawn while resampling,
    `draft_passes` the draft model's passes.
    """

    kind: Literal["continuous"] = "continuous"
    log_ratio: _per_draft(float) = []
    log_sigma: _per_draft(float) | None = None
    ratio: _per_draft(Probability) = []
    uniform: _per_draft(Probability | None) = []
    fate: _per_draft(ContinuousFate) = []
    draft_path: _per_draft(Annotated[list[Point], Field(max_length=MAX_PATH_POINTS)]) = []
    target_path: _per_draft(Annotated[list[Point], Field(max_length=MAX_PATH_POINTS)]) | None = None
    source: _per_draft(TokenSource)
    tries: Count = 0
    draft_passes: Count = 0

    @model_validator(mode="after")
    def _consistent(self) -> ContinuousRecord:
        n = len(self.fate)
        per_draft = [self.log_ratio, self.ratio, self.uniform, self.draft_path]
        optional = [values for values in (self.log_sigma, self.target_path) if values is not None]
        if any(len(values) != n for values in per_draft + optional):
            raise ValueError(f"log_ratio, ratio, uniform, draft_path (and log_sigma, target_path) need {n} entries")
        if any(token != 0 for token in self.committed) or len(self.source) != len(self.committed):
            raise ValueError("a continuous pass commits token id 0 per position, one source each")
        accepted = self.fate.count("accepted")
        if self.accepted != accepted:
            raise ValueError("accepted must count the accepted drafts")
        self._commits_path("continuous pass")
        expected = ["accepted"] * accepted + (["rejected"] if accepted < n else [])
        if self.fate[: len(expected)] != expected or set(self.fate[len(expected) :]) - {"discarded"}:
            raise ValueError("fate must be accepted drafts, then the first rejection, then discarded ones")
        if any(u is None for u in self.uniform[: len(expected)]):
            raise ValueError("every tested draft records the uniform that decided it")
        if self.source[:accepted] != ["draft"] * accepted:
            raise ValueError("committed tokens begin with the accepted drafts")
        return self

    @property
    def verifies_drafts(self) -> bool:
        return bool(self.fate)

    def outcome(self) -> list[str]:
        return list(self.fate)

    def tested_fates(self) -> list[str]:
        return [fate for fate in self.fate if fate != "discarded"]

    @property
    def drawn_by_draft_alone(self) -> bool:
        return not self.fate and set(self.source) <= {"draft"}


# one pass of a run, tagged by its kind; a run's passes are of one kind, after a first token pass
Iteration = Annotated[
    TokenRecord | WindowRecord | TreeRecord | ContinuousRecord | RowsRecord, Field(discriminator="kind")
]
RECORD_KINDS = ("token", "window", "tree", "continuous", "rows")


class Trace(_Strict):
    version: Literal[4] = TRACE_VERSION
    model: RegistryName
    method: RegistryName
    lossless: bool
    prompt: Annotated[str, Field(max_length=10_000)]
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)]
    sampling: TraceSampling
    params: Annotated[
        dict[Annotated[str, Field(max_length=64)], int | float | Annotated[str, Field(max_length=200)] | bool | None],
        Field(max_length=MAX_PARAMETERS),
    ] = {}
    geometry: TraceGeometry
    tokens: Annotated[list[Count], Field(min_length=1, max_length=MAX_POSITIONS)]
    nfe: Annotated[int, Field(ge=1)]  # the prefill's pass included, so even a draft run alone has one
    seconds: Annotated[float, Field(ge=0.0)]
    # the seconds of undisturbed repeats of this run, where it was timed again (`seconds` is their median)
    timings: Annotated[list[Annotated[float, Field(ge=0.0)]], Field(min_length=1, max_length=100)] | None = None
    # the same on the compute clock (CPU seconds of this process: `specviz.core.timing.compute_clock`), which
    # a busy machine's other programs cannot inflate; None in a trace made before it was kept
    compute_seconds: Annotated[float, Field(ge=0.0)] | None = None
    compute_timings: Annotated[list[Annotated[float, Field(ge=0.0)]], Field(min_length=1, max_length=100)] | None = None
    prefill_ms: Annotated[float, Field(ge=0.0)] = 0.0
    iterations: Annotated[list[Iteration], Field(min_length=1, max_length=MAX_POSITIONS)]
    # a continuous-token run: the value of every token (ids are all 0) and the draft model's passes
    vectors: (
        Annotated[
            list[Annotated[list[float], Field(min_length=1, max_length=MAX_TOKEN_DIM)]], Field(max_length=MAX_POSITIONS)
        ]
        | None
    ) = None
    draft_nfe: Count | None = None
    # typed, made once from the catalogue and SamplingSettings when the trace is made or loaded
    _parameters: Parameters | None = PrivateAttr(default=None)
    _sampling_settings: SamplingSettings | None = PrivateAttr(default=None)

    @property
    def parameters(self) -> Parameters | None:
        """The method's typed parameters (its class in the catalogue, defaults filled in); None for a method
        this installation does not have (a trace of an uninstalled package's method still loads)."""
        if self._parameters is None and self.method in CATALOGUE:  # a trace made by model_construct
            self._parameters = CATALOGUE[self.method].resolve(self.params)
        return self._parameters

    @property
    def sampling_settings(self) -> SamplingSettings:
        """The sampling settings under the same bounds a new run meets, so a loaded trace can race again."""
        if self._sampling_settings is None:  # a trace made by model_construct skipped the validator
            self._sampling_settings = SamplingSettings(**self.sampling.model_dump())
        return self._sampling_settings

    @property
    def continuous(self) -> bool:
        return self.vectors is not None

    @property
    def decodable(self) -> list:
        """What the model decodes into the run's image: the tokens, or a continuous run's vectors."""
        return self.vectors if self.continuous else self.tokens

    @property
    def kind(self) -> str:
        """What the run's passes verified: "window", "tree" or "continuous" drafts, "rows" where each pass
        went over several rows in flight (ZipAR's one token each, PJD's window each), or "token" where
        every pass drew one token (AR on a discrete model)."""
        return next((it.kind for it in self.iterations if it.kind != "token"), "token")

    @model_validator(mode="after")
    def _consistent(self) -> Trace:
        g = self.geometry
        if self.method in CATALOGUE:  # a known method's parameters are what its class takes (no window "16")
            try:
                self._parameters = CATALOGUE[self.method].resolve(self.params)
            except ValueError as error:
                raise ValueError(f"params: {error}") from None
        try:
            self._sampling_settings = SamplingSettings(**self.sampling.model_dump())
        except ValueError as error:
            raise ValueError(f"sampling: {error}") from None
        if self.vectors is not None and (
            len(self.vectors) != len(self.tokens) or len({len(vector) for vector in self.vectors}) > 1
        ):
            raise ValueError("vectors need one value of the same size per token")
        kinds = {it.kind for it in self.iterations} - {"token"}
        if len(kinds) > 1:
            raise ValueError(f"a run's passes are of one kind, not {' and '.join(sorted(kinds))}")
        if (self.vectors is not None) != (kinds == {"continuous"}):
            raise ValueError("a continuous run has vectors and continuous iterations, a discrete run neither")
        if kinds == {"rows"}:
            self._rows_on_their_cells()
        if len(self.tokens) > len(g.layout):
            raise ValueError(f"{len(self.tokens)} tokens for a sequence of {len(g.layout)} positions")
        layout_tokens = [entry for entry in g.layout if entry != -1]
        image_vocab = min(layout_tokens) if layout_tokens else g.vocab_size
        for position, (token, entry) in enumerate(zip(self.tokens, g.layout, strict=False)):
            if (entry == -1 and token >= image_vocab) or (entry != -1 and token != entry):
                expected = f"an image token below {image_vocab}" if entry == -1 else f"the layout token {entry}"
                raise ValueError(f"token {token} at position {position} must be {expected}")
        position = 0
        for index, it in enumerate(self.iterations):
            if it.start != position:
                raise ValueError(
                    f"iteration {index} starts at {it.start}, but {position} tokens were committed before it"
                )
            if it.kind == "tree" and it.start + it.reach() > len(g.layout):
                raise ValueError(f"iteration {index}: the tree drafts past the end of the sequence")
            if any(t >= g.vocab_size for t in it.drafted_ids()):
                raise ValueError(f"iteration {index}: drafts must be below vocab_size {g.vocab_size}")
            if self.tokens[position : position + len(it.committed)] != it.committed:
                raise ValueError(f"iteration {index}: committed tokens disagree with the final tokens")
            position += len(it.committed)
        if position != len(self.tokens):
            raise ValueError(f"iterations commit {position} tokens, the trace has {len(self.tokens)}")
        return self

    def decided_index(self) -> dict[int, int]:
        """Sequence position -> its index in the run's order of decision (that of `tokens`): the positions
        the rows passes name, then the rest in raster order; the identity for every other run."""
        named = [p for it in self.iterations if it.kind == "rows" for p in it.positions or []]
        return {position: index for index, position in enumerate(decided_listing(named, len(self.geometry.layout)))}

    def _rows_on_their_cells(self) -> None:
        """A rows run lists its positions in the order it decided them, so its geometry has an order, and
        each token it commits lies in the row the record names."""
        g = self.geometry
        if g.order is None:
            raise ValueError("a rows run decides positions out of raster order: its geometry needs their order")
        for index, it in enumerate(self.iterations):
            cells = g.order[it.start : it.start + len(it.committed)] if it.kind == "rows" else []
            if any(cell != -1 and cell // g.cols != row for cell, row in zip(cells, it.rows, strict=False)):
                raise ValueError(f"iteration {index}: a token lies outside the row the record names")
        named = [it.positions for it in self.iterations if it.kind == "rows"]
        if any(positions is not None for positions in named):
            self._positions_give_the_order([p for positions in named for p in positions or []])

    def _positions_give_the_order(self, positions: list[int]) -> None:
        """A run whose records name the positions they decide (PJD) has the geometry they imply: those
        positions in that order, then the rest in raster order, each with its raster cell and layout entry."""
        g, length = self.geometry, len(self.geometry.layout)
        if any(it.kind == "rows" and it.positions is None for it in self.iterations):
            raise ValueError("every rows pass of a run that names its positions names them")
        if len(set(positions)) != len(positions) or not all(position < length for position in positions):
            raise ValueError(f"the positions a run decides are distinct positions of its {length}")
        listed = decided_listing(positions, length)
        raster = [0] * length
        for position, entry in zip(listed, g.layout, strict=True):
            raster[position] = entry
        cells = list(itertools.accumulate(entry == -1 for entry in raster))
        if [cells[position] - 1 if raster[position] == -1 else -1 for position in listed] != g.order:
            raise ValueError("the order does not list the cells of the positions the run decided, in that order")

    def to_json(self) -> str:
        return self.model_dump_json()

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def from_json(cls, text: str | bytes) -> Trace:
        """Parse and validate; a trace of an earlier version is converted to this one on the way.

        The parser counts numbers and object members as it goes and stops at MAX_JSON_VALUES, so a file
        of one enormous list (which pydantic would build whole before checking its length) costs memory
        in proportion to the bound, not to the file.

        Validation is strict: a number is a JSON number, never text ("Infinity", "1e999" and "NaN" in a
        string would otherwise be read as the non-finite floats the parser refuses), a count is a whole
        number (not 2.0 or true), a flag is true or false. The parser itself refuses NaN, Infinity and
        any number that overflows a float (1e999).
        """
        if len(text) > MAX_TRACE_BYTES:
            raise TraceError(f"trace is {len(text)} bytes; the limit is {MAX_TRACE_BYTES}")
        data = _bounded_json(text)
        if isinstance(data, dict) and data.get("version") == 1:
            data = _upgrade_from_version_1(data)
        if isinstance(data, dict) and data.get("version") == 2:
            data = _upgrade_from_version_2(data)
        if isinstance(data, dict) and data.get("version") == 3:
            data = _upgrade_from_version_3(data)
        try:
            return cls.model_validate(data, strict=True)
        except ValidationError as error:
            raise TraceError(_describe(error)) from None

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """A trace from a regular file (not a folder, device or pipe), reading at most the size limit."""
        data = read_bounded(path, MAX_TRACE_BYTES, "trace", TraceError)
        return cls.from_json(data)


def _bounded_json(text: str | bytes) -> object:
    """json.loads of a text that holds at most MAX_JSON_VALUES values and MAX_JSON_CONTAINERS lists and
    objects, with no duplicate keys and only finite numbers; anything else is a TraceError.

    The values are bounded before parsing, from the text itself: every value but the first of a list or
    object follows a comma, so commas plus brackets plus one bound the values (commas inside strings only
    make the bound stricter). A file of a million `{}` thus costs a count, not a gigabyte. A duplicate key
    is refused because two readers of the file could see two different traces (the last or the first name).
    """
    comma, square, curly = (",", "[", "{") if isinstance(text, str) else (b",", b"[", b"{")
    containers = text.count(square) + text.count(curly)
    if containers > MAX_JSON_CONTAINERS:
        raise TraceError(f"invalid trace: more than {MAX_JSON_CONTAINERS} lists and objects; no run records that many")
    if text.count(comma) + containers + 1 > MAX_JSON_VALUES:
        raise TraceError(f"invalid trace: more than {MAX_JSON_VALUES} values; no run records that many")

    def finite(value: str) -> float:
        number = float(value)
        if not math.isfinite(number):
            raise TraceError(f"invalid trace: {brief(value)} is beyond the numbers a trace may hold")
        return number

    def members(pairs: list) -> dict:
        names = dict(pairs)
        if len(names) < len(pairs):
            repeated = next(name for index, (name, _) in enumerate(pairs) if name in dict(pairs[:index]))
            raise TraceError(f"invalid trace: the key {brief(repeated)} appears twice in one object")
        return names

    def constant(name: str):
        raise TraceError(f"invalid trace: {name} is not a number a trace may hold")

    try:
        return json.loads(text, parse_float=finite, parse_constant=constant, object_pairs_hook=members)
    except (ValueError, RecursionError) as error:
        if isinstance(error, TraceError):
            raise
        raise TraceError(f"invalid trace: not valid JSON ({brief(str(error), 120)})") from None


def _upgrade_from_version_1(data: dict) -> dict:
    """A version 1 trace as version 2 (then converted to 3). Version 1 kept no uniforms and no TV
    distances (None), and only counted new drafts (origin "unknown"); kept and redrawn are read off the
    next window, which starts with the drafts carried from this one. Anything malformed is left for
    validation to report."""
    iterations = data.get("iterations")
    if not isinstance(iterations, list) or not all(isinstance(it, dict) for it in iterations):
        return data
    for index, it in enumerate(iterations):
        drafts, accepted, new = it.get("drafts", []), it.get("accepted", 0), it.pop("new_drafts", 0)
        it.pop("changed", None)
        if not (isinstance(drafts, list) and isinstance(accepted, int) and isinstance(new, int)):
            continue
        if not (0 <= accepted <= len(drafts) and 0 <= new <= len(drafts)):  # counts that no window holds
            continue
        following = iterations[index + 1].get("drafts", []) if index + 1 < len(iterations) else []
        following = following if isinstance(following, list) else []
        fate = ["accepted"] * accepted
        if it.get("rejected_at") is not None:
            later = drafts[accepted + 1 :]
            fate += ["rejected"] + [
                "kept" if i < len(following) and following[i] == token else "redrawn" for i, token in enumerate(later)
            ]
        it.update(fate=fate, uniform=[None] * len(drafts), tv=[None] * len(drafts))
        it.update(new_init=["unknown"] * new, new_source=[-1] * new)
    return {**data, "version": 2}


# the fields of a version 2 iteration that each kind of record keeps (version 2 held them all in one record)
_KEPT = {
    kind: set(record.model_fields) - {"kind"}
    for kind, record in zip(
        RECORD_KINDS, (TokenRecord, WindowRecord, TreeRecord, ContinuousRecord, RowsRecord), strict=True
    )
}


def _upgrade_from_version_2(data: dict) -> dict:
    """A version 2 trace as version 3. Version 2 kept every kind of pass in one record, its window fields
    empty where a tree or a continuous step was given; each becomes the record of its kind, the
    continuous step's fields moved up into it. An empty field of another kind is dropped; anything
    else is left in place for validation to report."""
    iterations = data.get("iterations")
    if not isinstance(iterations, list) or not all(isinstance(it, dict) for it in iterations):
        return data
    converted = []
    for it in iterations:
        step = it.pop("continuous", None)
        if isinstance(step, dict):
            kind, it = "continuous", {**it, **step}
        elif it.get("tree") is not None:
            kind = "tree"
        elif it.get("drafts"):
            kind = "window"
        else:
            kind = "token"
        unused = {name: value for name, value in it.items() if name not in _KEPT[kind]}
        kept = {name: value for name, value in it.items() if name in _KEPT[kind]}
        leftover = {name: value for name, value in unused.items() if value not in (None, [])}
        converted.append({"kind": kind, **kept, **leftover})
    return {**data, "version": 3, "iterations": converted}


VERSION_3_GROUP = {"group_size": "size", "group_mass_new": "mass_new", "group_mass_old": "mass_old"}


def _upgrade_from_version_3(data: dict) -> dict:
    """A version 3 trace as version 4. Version 3 kept a relaxed test's group size and masses in every window
    record (empty for the exact methods); they become the record's own `group` part."""
    iterations = data.get("iterations")
    if not isinstance(iterations, list):
        return data
    for it in iterations:
        if isinstance(it, dict) and it.get("kind") == "window":
            group = {new: it.pop(old) for old, new in VERSION_3_GROUP.items() if old in it}
            if any(value is not None for value in group.values()):
                it["group"] = group
    return {**data, "version": TRACE_VERSION}


NUMBER_ERRORS = ("float_type", "int_type", "float_parsing", "int_parsing")


def _describe(error: ValidationError) -> str:
    """The first few problems of a validation error, each with where in the file it is; a value from the
    file is quoted as a short prefix (a hostile file may hold megabytes in one string)."""
    problems = []
    for item in error.errors()[:3]:
        where = ".".join(str(part) if isinstance(part, int) else brief(part, 24).strip("'") for part in item["loc"])
        if item["type"] == "literal_error" and item["loc"] == ("version",):
            problems.append(
                f"unsupported trace version {brief(item.get('input'))}; this specviz reads version {TRACE_VERSION}"
            )
        elif item["type"] in NUMBER_ERRORS and isinstance(item.get("input"), str):
            problems.append(f"{where}: {brief(item['input'])} is text, not a number")
        else:
            message = item["msg"].removeprefix("Value error, ")
            message = message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "..."
            problems.append(f"{where}: {message}" if where else message)
    more = error.error_count() - len(problems)
    return "invalid trace: " + "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")
