"""Typed method parameters: one frozen dataclass per method family, validated on construction.

They are the single source of every parameter's default, range and help text: the methods take an
instance, the command line builds its flags from the fields, the app its controls, and a trace
stores `to_dict()`. Values from a UI or a JSON file go through `from_dict`, which refuses unknown
names and values that are not what the field says (a window of 2.5 is an error, not 2).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Self, get_type_hints

from specviz.core.inputs import brief
from specviz.core.settings import SettingsError

MAX_WINDOW = 128
INIT_STRATEGIES = ("random", "repeat-left", "repeat-above", "sample-left", "sample-above")
DRAFTERS = ("training-free", "head")  # draft-tree drafters (specviz.decoding.drafters)
MAX_TREE_DEPTH = 64
MAX_TREE_TOKENS = 1000  # below the trace's bound on one iteration's records
MAX_GRID_SIDE = 4096  # the trace's bound on a grid's rows and columns
# What one pass's own tensors take, beyond the model's (`Parameters.pass_bytes`). Measured on `tiny` (V 1024, one
# thread, peak RSS; docs/app.md "Limits"): EAGLE-2's candidate pool took 81-87 bytes a candidate at 1.4M-5.8M
# candidates a pass (five columns, their concatenation and a sort), and the app's server grew 2.25 GB racing a
# tree of 22.7M (99 bytes each, the race's pictures included); a row of probabilities over the vocabulary is held
# in about eight copies of 4 bytes (logits, guidance, warpers, softmax, the verification's).
CANDIDATE_BYTES = 104
ROW_ENTRY_BYTES = 32
NEIGHBOUR_BYTES = 8  # an entry of a codebook's neighbour table (int64), made once per model and count


@dataclass(frozen=True)
class Spec:
    """What a parameter means and which values it takes (bounds inclusive)."""

    help: str
    label: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None


def parameter(default: Any, help: str, label: str, **limits: Any) -> Any:
    """A dataclass field carrying its Spec."""
    return field(default=default, metadata={"spec": Spec(help, label, **limits)})


@dataclass(frozen=True)
class Parameters:
    """Base of every method's parameters; subclasses only declare fields."""

    def __post_init__(self) -> None:
        for name, kind, spec in self.fields():
            object.__setattr__(self, name, _checked(name, kind, spec, getattr(self, name)))

    @classmethod
    def fields(cls) -> list[tuple[str, type, Spec]]:
        """(name, type, spec) of every parameter, in declaration order."""
        return list(_declared(cls))

    @classmethod
    def from_dict(cls, given: Mapping[str, Any] | None, method: str = "") -> Self:
        """Parameters from a mapping (UI, command line, trace): unset (None) values take the default;
        unknown names are refused, naming the method and what it takes."""
        given = {name: value for name, value in (given or {}).items() if value is not None}
        known = [name for name, _, _ in cls.fields()]
        unknown = sorted(set(given) - set(known))
        if unknown:
            allowed = ", ".join(known) or "none"
            owner = f"method {method}" if method else cls.__name__
            raise SettingsError(f"{owner} has no parameter {', '.join(unknown)} (its parameters: {allowed})")
        return cls(**given)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        """The most memory one pass of these settings allocates beyond the model's own (its distributions,
        draft tables, trees), in bytes, for a model of `vocab_size` image tokens and `seq_len` positions:
        what a request's settings imply, checked against a ceiling before the run starts. AR's one row here."""
        return rows_bytes(1, vocab_size)


def rows_bytes(rows: int, vocab_size: int) -> int:
    """Memory of `rows` distributions over the vocabulary as a pass holds them (ROW_ENTRY_BYTES an entry)."""
    return rows * max(1, vocab_size) * ROW_ENTRY_BYTES


def neighbour_bytes(rows: int, neighbours: int, vocab_size: int) -> int:
    """A relaxed test's codebook neighbours: the table of every token's nearest `neighbours` (at most V - 1;
    kept per model and count) and each tested row's gathered masses (4 + 8 + 1 bytes an entry)."""
    count = min(neighbours, max(1, vocab_size - 1))
    return vocab_size * count * NEIGHBOUR_BYTES + rows * count * 13


def tree_bytes(depth: int, top_k: int, kept: int, widest: int, vocab_size: int) -> int:
    """One EAGLE-2 tree's pass (`specviz.decoding.tree.grow`): the pool of candidates (each level's frontier,
    at most top-k nodes, times its top-k children: depth x top-k^2 at most), the target's rows of the `kept`
    nodes, their ancestor and sibling matrices, and the training-free drafter's tables of `widest` successors
    per token and per (token, token above) pair (the larger of the two drafters' needs)."""
    width = min(top_k, max(1, vocab_size))
    candidates, frontier = 0, 1
    for _ in range(depth):
        candidates += frontier * width
        frontier = min(top_k, frontier * width)
    nodes = min(kept, candidates) + 1
    drafter = (vocab_size + 1 + (1 << 14) + 1) * min(widest, max(1, vocab_size)) * 12
    return candidates * CANDIDATE_BYTES + rows_bytes(nodes, vocab_size) + 3 * nodes * nodes * 4 + drafter


@functools.cache
def _declared(cls: type[Parameters]) -> tuple[tuple[str, type, Spec], ...]:
    """A class's parameters, resolved once: `get_type_hints` evaluates every annotation's string, and
    parameters are checked on every run and read for every command line flag."""
    hints = get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.metadata["spec"]) for f in fields(cls))


def _checked(name: str, kind: type, spec: Spec, value: Any) -> Any:
    """The value converted to the field's type, or a SettingsError that says what is allowed."""
    if kind is bool:
        if not isinstance(value, bool):
            raise SettingsError(f"{name} must be true or false, got {brief(value)}")
        return value
    if kind is str:
        if spec.choices is not None and value not in spec.choices:
            raise SettingsError(f"{name} must be one of {', '.join(spec.choices)}; got {brief(value)}")
        return value
    limits = f"from {_number(spec.low)} to {_number(spec.high)}"
    if kind is int:
        integral = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
        if isinstance(value, bool) or not integral or not spec.low <= value <= spec.high:
            raise SettingsError(f"{name} must be an integer {limits}, got {brief(value)}")
        return int(value)
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not is_number or not math.isfinite(value) or not spec.low <= value <= spec.high:
        raise SettingsError(f"{name} must be a number {limits}, got {brief(value)}")
    return float(value)


def _number(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class NoParameters(Parameters):
    """Methods without parameters (AR)."""


@dataclass(frozen=True)
class WindowParameters(Parameters):
    """The sliding Jacobi window shared by jacobi, sjd, scd-mc and scd-gs."""

    window: int = parameter(
        16, "Jacobi window W: drafts verified per pass (a pass feeds the decided head plus W drafts)", "Window W",
        low=1, high=MAX_WINDOW,
    )  # fmt: skip
    init: str = parameter(
        "random", "initialisation of new window slots (SJD section 4.2)", "New-slot initialisation",
        choices=INIT_STRATEGIES,
    )  # fmt: skip
    refine: bool = parameter(
        True,
        "after a rejection, draft the first new slot from the model's row after the window, as the official SJD "
        "code does (false: initialise it like the other new slots)",
        "Refined draft after the window",
    )
    reset_in_stall: int = parameter(
        0,
        "once this many passes in a row accepted no draft, a rejection also discards the drafts after it (they "
        "were drawn after the rejected token) and initialises their slots afresh; lossless, not the papers' "
        "method; helps with a repeat-* or sample-* initialisation (0: never)",
        "Reset drafts in a stall after",
        low=0, high=1000,
    )  # fmt: skip

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        return rows_bytes(self.window + 1, vocab_size)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.reset_in_stall and self.init == "random":
            raise SettingsError(
                "reset_in_stall needs a repeat-* or sample-* initialisation: uniformly random drafts are almost "
                "never accepted, so resetting to them makes every pass a stall"
            )


def _reuse_threshold(help: str) -> Any:
    """SJD++'s and PJD's threshold, one control in the app: the same label, default and range for both."""
    return parameter(0.5, help, "Reuse threshold", low=0.0, high=1.0)


@dataclass(frozen=True)
class SjdPlusParameters(WindowParameters):
    """SJD++ (Teng et al., TPAMI 2026): SJD's window, and after a rejection each later draft reused where its
    confidence passes `reuse_threshold` (the threshold PJD's flag of the same name also sets)."""

    reuse_threshold: float = _reuse_threshold(
        "SJD++: after the first rejection, a later draft is reused (kept, not redrawn) where its confidence "
        "min(1, p_new/p_old) exceeds this tau; its next draft distribution is the mixture this makes, so it stays "
        "exact (0 reuses nearly every draft, 1 none: plain SJD)"
    )

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        # the reuse test at every token and the mixture it makes: a few more rows of the window's size
        return super().pass_bytes(vocab_size, seq_len) + rows_bytes(self.window, vocab_size)

    def __post_init__(self) -> None:
        tau = self.reuse_threshold
        if isinstance(tau, int | float) and not isinstance(tau, bool) and tau > 1:  # inf included
            raise SettingsError(
                f"reuse_threshold must be from 0 to 1, got {brief(tau)}: the confidence min(1, p_new/p_old) never "
                "exceeds 1, so 1 already reuses no draft, which is plain SJD (the sjd method)"
            )
        super().__post_init__()


def _neighbours() -> Any:
    return parameter(
        1000, "nearest codebook neighbours k (LANTERN: the candidates for B(x); GSD: the latent filter)",
        "Codebook neighbours k",
        low=1, high=1_000_000,
    )  # fmt: skip


def _delta() -> Any:
    return parameter(
        0.1, "LANTERN: probability mass of neighbours that may be added to the draft's own", "LANTERN budget delta",
        low=0.0, high=1.0,
    )  # fmt: skip


@dataclass(frozen=True)
class LanternParameters(WindowParameters):
    neighbours: int = _neighbours()
    delta: float = _delta()

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        return super().pass_bytes(vocab_size, seq_len) + neighbour_bytes(self.window, self.neighbours, vocab_size)


@dataclass(frozen=True)
class GsdParameters(WindowParameters):
    ranks_above: int = parameter(
        6, "GSD: candidates ranked just above the draft in p (the authors' code: 6)", "GSD ranks above the draft",
        low=0, high=1000,
    )  # fmt: skip
    ranks_below: int = parameter(
        7, "GSD: candidates ranked just below the draft in p (the authors' code: 7)", "GSD ranks below the draft",
        low=0, high=1000,
    )  # fmt: skip
    prob_gap: float = parameter(
        0.15, "GSD: largest difference |p(y) - p(x)| of a group member y to the draft x", "GSD probability gap",
        low=0.0, high=1.0,
    )  # fmt: skip
    neighbours: int = parameter(
        128, "GSD: a group member must be among the draft's k nearest codebook vectors", "GSD codebook neighbours k",
        low=1, high=1_000_000,
    )  # fmt: skip

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        ranked = rows_bytes(self.window, vocab_size) * 2  # the rows masked twice, for the ranks above and below
        near = neighbour_bytes(self.window, self.neighbours, vocab_size)
        return super().pass_bytes(vocab_size, seq_len) + ranked + near


def _tree_depth(default: int) -> Any:
    return parameter(
        default, "levels of drafts below the head token, the most one pass can accept (PEANUT: its first tree's)",
        "Tree depth",
        low=1, high=MAX_TREE_DEPTH,
    )  # fmt: skip


def _tree_top_k(default: int) -> Any:
    return parameter(
        default, "children per expanded node, and nodes expanded per level (PEANUT: its first tree's)", "Tree top-k",
        low=1, high=MAX_TREE_TOKENS,
    )  # fmt: skip


@dataclass(frozen=True)
class DraftTreeParameters(Parameters):
    """A method that verifies a draft tree in each pass, so it needs tree attention (a transformers cache)."""


@dataclass(frozen=True)
class DraftedTreeParameters(DraftTreeParameters):
    """A tree whose tokens a drafter proposes (eagle2, peanut, lantern++)."""

    drafter: str = parameter(
        "training-free",
        "who proposes the tree's tokens: training-free (the top-k continuations the model itself gave earlier "
        "in the run; no training, every model) or head (EAGLE's trained draft head, where the model ships one)",
        "Drafter",
        choices=DRAFTERS,
    )


@dataclass(frozen=True)
class TreeParameters(DraftedTreeParameters):
    """A draft tree verified in one pass (eagle2, peanut), grown as EAGLE-2 grows it.

    Depth counts levels of drafts below the decided head token; size counts drafts. EAGLE-2's released
    code counts differently: its `depth` is the rounds after the first level and its `total_token`
    includes the head, so its defaults (60, 7, 10) are 59 drafts on 8 levels here, and LANTERN's image
    setting (59, 4, 10) is `--tree-tokens 58 --tree-depth 5`.
    """

    tree_depth: int = _tree_depth(8)
    tree_top_k: int = _tree_top_k(10)
    tree_tokens: int = parameter(
        59, "drafts kept in a tree: those of highest cumulative confidence (the head not counted)", "Tree size",
        low=1, high=MAX_TREE_TOKENS,
    )  # fmt: skip

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        depth = min(self.tree_depth, seq_len)
        return tree_bytes(depth, self.tree_top_k, self.tree_tokens, self.tree_top_k, vocab_size)


@dataclass(frozen=True)
class PeanutParameters(TreeParameters):
    """PEANUT's controller (section 4). Defaults: the paper's Anole setting, bounds exclusive; its LlamaGen
    setting is `--top-k-step 10 --top-k-max 40`. The first tree's shape is the middle of the bounds."""

    tree_depth: int = _tree_depth(5)
    tree_top_k: int = _tree_top_k(8)
    beta: float = parameter(
        1.0, "PEANUT: a tree whose acceptance rate (accepted drafts / depth) reaches beta makes the next one deeper "
        "and narrower, else shallower and wider", "PEANUT threshold beta",
        low=0.0, high=1.0,
    )  # fmt: skip
    depth_step: int = parameter(1, "PEANUT: depth step l_d", "PEANUT depth step", low=1, high=MAX_TREE_DEPTH)
    top_k_step: int = parameter(
        3, "PEANUT: top-k step l_k", "PEANUT top-k step", low=1, high=MAX_TREE_TOKENS
    )  # fmt: skip
    depth_min: int = parameter(
        0, "PEANUT: depth stays above this", "PEANUT: lower bound of the depth (exclusive)", low=0, high=MAX_TREE_DEPTH
    )
    depth_max: int = parameter(
        10, "PEANUT: depth stays below this", "PEANUT: upper bound of the depth (exclusive)",
        low=2, high=MAX_TREE_DEPTH + 1,
    )  # fmt: skip
    top_k_min: int = parameter(
        3, "PEANUT: top-k stays above this", "PEANUT: lower bound of top-k (exclusive)", low=0, high=MAX_TREE_TOKENS
    )
    top_k_max: int = parameter(
        14, "PEANUT: top-k stays below this while the depth exceeds 1 (a depth-1 tree is bounded by its size)",
        "PEANUT: upper bound of top-k (exclusive)",
        low=2, high=MAX_TREE_TOKENS + 1,
    )  # fmt: skip

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        """The largest tree the controller may reach: the deepest at the widest top-k its bounds allow (a
        depth-1 tree, whose width is bounded by its size, is smaller), with the drafter's widest tables."""
        widest = max(self.top_k_max - 1, self.tree_tokens)
        deepest = min(self.depth_max - 1, seq_len)
        trees = [(deepest, self.top_k_max - 1), (1, self.tree_tokens)]
        return max(tree_bytes(depth, top_k, self.tree_tokens, widest, vocab_size) for depth, top_k in trees)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.depth_min < self.tree_depth < self.depth_max:
            raise SettingsError(
                f"tree_depth {self.tree_depth} must lie strictly between depth_min {self.depth_min} and "
                f"depth_max {self.depth_max}"
            )
        if not self.top_k_min < self.tree_top_k < self.top_k_max:
            raise SettingsError(
                f"tree_top_k {self.tree_top_k} must lie strictly between top_k_min {self.top_k_min} and "
                f"top_k_max {self.top_k_max}"
            )


@dataclass(frozen=True)
class PeanutLanternParameters(PeanutParameters):
    neighbours: int = _neighbours()
    delta: float = _delta()

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        return super().pass_bytes(vocab_size, seq_len) + neighbour_bytes(self.tree_tokens, self.neighbours, vocab_size)


@dataclass(frozen=True)
class StaticTreeLanternParameters(DraftedTreeParameters):
    """LANTERN++ (`--static_tree` in the LANTERN code): EAGLE-1's static tree `mc_sim_7b_63` (25 drafts on 5
    levels), each node tested with LANTERN's relaxed acceptance; the authors' k 1000 and delta 0.1."""

    neighbours: int = _neighbours()
    delta: float = _delta()

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        static = 25  # mc_sim_7b_63's drafts on 5 levels (specviz.decoding.lantern_pp)
        return tree_bytes(5, 10, static, 10, vocab_size) + neighbour_bytes(static, self.neighbours, vocab_size)


@dataclass(frozen=True)
class SpeculativeParameters(Parameters):
    """Draft-then-verify with a separate draft model on a continuous-token pair (cspd, cspd-exact)."""

    gamma: int = parameter(
        8, "CSpD: tokens the draft model proposes per target pass (the paper's gamma: 4 to 32)", "Draft length gamma",
        low=1, high=MAX_WINDOW,
    )  # fmt: skip
    prefill: float = parameter(
        0.05, "CSpD token pre-filling: the share of the first tokens the target draws alone before drafting starts "
        "(the paper's 0.05; its released code uses 0.15)", "Pre-filled share",
        low=0.0, high=1.0,
    )  # fmt: skip
    max_tries: int = parameter(
        1000, "resampling after a rejection stops after this many target proposals and keeps the last one; each "
        "time that happens is counted in the trace", "Resampling tries cap",
        low=1, high=100_000,
    )  # fmt: skip

    def prefill_switched(self) -> SpeculativeParameters:
        """The run beside this one in the CSpD paper's figure 11: pre-filling off where it was on, the
        paper's share where it was off."""
        return replace(self, prefill=0.0 if self.prefill > 0 else type(self)().prefill)


def all_fields(classes: list[type[Parameters]]) -> dict[str, tuple[type, Spec]]:
    """Every parameter name of the given classes, once (its first declaration), for flags and controls."""
    result: dict[str, tuple[type, Spec]] = {}
    for cls in classes:
        for name, kind, spec in cls.fields():
            result.setdefault(name, (kind, spec))
    return result


@dataclass(frozen=True)
class SjdPacParameters(DraftTreeParameters):
    """SJD-PAC (Kang et al., CVPR 2026). Defaults are the authors': 64 tokens per pass, of which the head,
    3 candidates on each of the next 2 positions (every combination: 3 + 9 tree nodes) and a chain of 51
    drafts, so 53 positions drafted. Their code's `tree_width` 3 is `candidates`, its `tree_depth` 3
    counts the head and is `tree_positions` 2, its `max_num_new_tokens` 64 counts every token fed."""

    window: int = parameter(
        53, "SJD-PAC: positions drafted after the head (the first tree_positions of them with several candidates)",
        "Window W", low=1, high=MAX_WINDOW,
    )  # fmt: skip
    candidates: int = parameter(
        3, "Proactive Drafting: candidates K drawn without replacement at each tree position", "Candidates K",
        low=1, high=8,
    )  # fmt: skip
    tree_positions: int = parameter(
        2, "positions after the head that get K candidates; the pass verifies every combination (K^n paths)",
        "Tree positions", low=0, high=3,
    )  # fmt: skip
    continuation: bool = parameter(
        True,
        "Adaptive Continuation: after a rejection, a later draft that passes its own test against the stale "
        "target is kept (false: redrawn from it, as SJD does)",
        "Adaptive Continuation",
    )

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        paths = self.candidates**self.tree_positions  # every combination of the tree positions' candidates
        return rows_bytes(self.window + 1 + paths * (self.tree_positions + 1), vocab_size)


@dataclass(frozen=True)
class ZiparParameters(Parameters):
    """ZipAR (He et al., ICML 2025). The default s = 8 is the official LlamaGen code's
    `--zipar-window-size`; its Lumina-mGPT code (48 cells a row) uses 16."""

    window_size: int = parameter(
        8, "ZipAR's window s: a row starts once the row above has s tokens, then every row in flight gains one "
        "token per pass (s of at least the row's width is raster AR)", "Window size s", low=1, high=MAX_GRID_SIDE,
    )  # fmt: skip

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        # at most one token per row in flight, and at most every row: the side of a square grid of seq_len cells
        # (every model's grid is square, a row-end slot or so aside)
        return rows_bytes(math.isqrt(seq_len) + 1, vocab_size)


@dataclass(frozen=True)
class PjdParameters(Parameters):
    """PJD (Liao et al., CVPR 2026). Defaults are the constants of the authors' Lumina-mGPT code
    (`boyaliao/PJD`): `window_size` 8 tokens a row, a row starting at `long_size` 9 decided tokens of the
    row above (its leading token and 8 cells), a draft kept after a rejection where min(1, p/q) > 0.5."""

    window: int = parameter(
        8, "PJD: tokens fed per row in flight, its head and up to window - 1 drafts (a row below the top one feeds "
        "fewer: its drafts stay two columns behind the decided cells of the row above)", "Window W",
        low=2, high=MAX_WINDOW,
    )  # fmt: skip
    row_start: int = parameter(
        8, "PJD: a row starts once the row above has this many cells decided (or is complete)", "Row start",
        low=1, high=MAX_GRID_SIDE,
    )  # fmt: skip
    reuse_threshold: float = _reuse_threshold(
        "PJD: after a row's first rejection, a later draft stays for the next pass where min(1, p/q) exceeds "
        "this, tested then against its old q; else the model's own draw from p takes its slot (0 keeps nearly "
        "every draft, 1 none)"
    )
    row_mask: bool = parameter(
        True,
        "PJD's row-causal mask: a row's tokens see the decided tokens and the heads of the rows above, not their "
        "drafts (false: every token fed at an earlier position)",
        "Row-causal mask",
    )
    residual_all_rows: bool = parameter(
        False,
        "every row in flight, not only the top one, commits the residual at its first rejection and a draw after "
        "a fully accepted window (the authors' code: the top row only; not the paper's method)",
        "Residual in every row",
    )

    def pass_bytes(self, vocab_size: int, seq_len: int) -> int:
        # up to `window` tokens for each row in flight, each with two rows of the vocabulary (its p; a draft's
        # recorded q and its next draft's q count about one more); the rows in flight bounded by the side of a
        # square grid, about eight times the most seen (6 on Lumina-mGPT's 48 x 48)
        return rows_bytes(2 * (math.isqrt(seq_len) + 1) * self.window, vocab_size)
