"""Every decoding method as the command line and the app describe it: name, parameter class, promise,
and how the exactness check shows that promise.

Light (no torch): the command line builds its parser and checks method parameters from here before
anything heavy is imported. An entry names its loops as `module:function`, a module of `specviz.decoding`
or, dotted, any importable module; `specviz.decoding.registry` imports them to make METHODS. A method is
thus one file holding its rule and loop, and one entry here, whatever kind of pass it records; the exactness
tests (tests/test_lossless.py) are made from the entries. Installed packages add entries under the entry-point
group `specviz.methods` (see `installed_methods`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from specviz.core.inputs import look_up
from specviz.core.params import (
    DraftTreeParameters,
    GsdParameters,
    LanternParameters,
    NoParameters,
    Parameters,
    PeanutLanternParameters,
    PeanutParameters,
    PjdParameters,
    SjdPacParameters,
    SjdPlusParameters,
    SpeculativeParameters,
    StaticTreeLanternParameters,
    TreeParameters,
    WindowParameters,
    ZiparParameters,
)


class UnknownMethod(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


ENTRY_POINT_GROUP = "specviz.methods"
METHOD_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]{0,39}")  # it names files, flags' values and the app's choices
TOYS = ("short", "long", "llama")  # the enumerable toys of the exactness check (specviz.models.toys)
CONTINUOUS_TOY = "continuous"  # the continuous-token toy pair of the two-sample check


@dataclass(frozen=True)
class ToyRun:
    """A toy and parameters to sample a method with in the exactness check (the toy's own settings otherwise)."""

    params: Mapping[str, Any] = field(default_factory=dict)
    toy: str = "short"


@dataclass(frozen=True)
class Deviation(ToyRun):
    """Where the check measures a relaxed method's distance from AR within seconds: at this many images, it
    shows the deviation (p below the significance) unless `shown` is False (a gap too small for a test's time)."""

    samples: int = 2_000
    shown: bool = True


@dataclass(frozen=True)
class MethodInfo:
    name: str
    parameters: type[Parameters]
    lossless: bool
    description: str
    lossless_when_greedy: bool = False
    baseline: bool = False  # the run every other is raced and compared against (vanilla AR)
    needs_token_vectors: bool = False  # the tokenizer's codebook vectors (relaxed acceptance)
    needs_draft: bool = False  # the draft model of a continuous pair
    # its loops, as `module:function` in specviz.decoding: (session, sampling, generator, parameters) -> one
    # record per pass on a discrete model; on a continuous-token pair, (record, the committed values) per pass
    discrete: str | None = None
    continuous: str | None = None
    # a method that decides positions out of raster order names, as `module:function`, the map from the
    # model's geometry and its parameters to its traces' geometry (the positions in the order it decides them)
    decision_order: str | None = None
    # a method whose decision order is known only as it runs (PJD) says so: its records name the positions they
    # decide (`RowsRecord.positions`), and its traces' geometry lists them in that order
    order_as_it_runs: bool = False
    # the exactness check samples a lossless method at its defaults on every toy, then at these settings; a
    # relaxed method is checked exact at these (LANTERN++ at delta 0) and shown to deviate at `deviation`
    exact_with: tuple[ToyRun, ...] = field(default=(), hash=False)
    deviation: Deviation | None = field(default=None, hash=False)

    @property
    def out_of_raster(self) -> bool:
        """Decides positions out of raster order, in a static order or one known as it runs."""
        return self.decision_order is not None or self.order_as_it_runs

    @property
    def drafts_trees(self) -> bool:
        """Verifies a draft tree per pass, which needs tree attention (a transformers cache)."""
        return issubclass(self.parameters, DraftTreeParameters)

    def is_lossless(self, greedy: bool) -> bool:
        return self.lossless or (greedy and self.lossless_when_greedy)

    def resolve(self, given: Mapping[str, Any] | Parameters | None) -> Parameters:
        """The method's parameters: defaults overridden by `given`; unknown names and bad values refused."""
        if isinstance(given, self.parameters):
            return given
        if isinstance(given, Parameters):
            given = given.to_dict()
        return self.parameters.from_dict(given, self.name)


BUILT_IN: dict[str, MethodInfo] = {
    method.name: method
    for method in (
        MethodInfo(
            "ar",
            NoParameters,
            True,
            "vanilla autoregressive: one token per model pass",
            baseline=True,
            discrete="ar:iterate",
            continuous="continuous_ar:iterate",
        ),
        MethodInfo(
            "jacobi",
            WindowParameters,
            False,
            "Jacobi decoding: drafts accepted while unchanged between iterations (lossless only when greedy)",
            lossless_when_greedy=True,
            discrete="jacobi:iterate",
            deviation=Deviation(toy="long", samples=2_000),  # p 2e-11 (on the short toy 8e-4 at 3,000)
        ),
        MethodInfo(
            "sjd",
            WindowParameters,
            True,
            "speculative Jacobi decoding (SJD), independent redraws",
            discrete="sjd:iterate",
            exact_with=(
                *(ToyRun({"init": init}) for init in ("repeat-left", "repeat-above", "sample-left", "sample-above")),
                ToyRun({"window": 1}),
                ToyRun({"refine": False}),
                ToyRun({"init": "sample-left", "reset_in_stall": 1}),
            ),
        ),
        MethodInfo(
            "sjd++",
            SjdPlusParameters,
            True,
            "SJD++: SJD, and after a rejection each later draft reused where its confidence p_new/p_old passes a "
            "threshold, tested next against the mixture this makes (exact)",
            discrete="sjd_plus:iterate",
            exact_with=(
                *(ToyRun({"init": init}) for init in ("repeat-left", "repeat-above", "sample-left", "sample-above")),
                ToyRun({"window": 1}),
                ToyRun({"refine": False}),
                ToyRun({"init": "sample-left", "reset_in_stall": 1}),
                ToyRun({"reuse_threshold": 0.0}),  # every draft that p_new allows reused
                # drafts reused through several passes; where the port's rule is caught (tests/test_lossless.py)
                ToyRun({"reuse_threshold": 0.1}, toy="long"),
                ToyRun({"reuse_threshold": 0.0}, toy="long"),
            ),
        ),
        MethodInfo(
            "scd-mc",
            WindowParameters,
            True,
            "speculative coupled decoding, maximal coupling",
            discrete="scd_mc:iterate",
            exact_with=(
                ToyRun({"init": "sample-above"}),
                ToyRun({"window": 8}),
                ToyRun({"init": "repeat-left", "reset_in_stall": 1}),
            ),
        ),
        MethodInfo(
            "scd-gs",
            WindowParameters,
            True,
            "speculative coupled decoding, Gumbel sharing",
            discrete="scd_gs:iterate",
            exact_with=(ToyRun({"init": "sample-left"}),),
        ),
        MethodInfo(
            "sjd-pac",
            SjdPacParameters,
            True,
            "SJD-PAC: SJD with a K-ary tree of candidates after each rejection and the later drafts kept where "
            "they pass against the stale target",
            discrete="sjd_pac:iterate",
            exact_with=(
                ToyRun({"continuation": False}),
                ToyRun({"candidates": 2, "tree_positions": 3}),  # a deeper binary tree
                ToyRun({"candidates": 1, "tree_positions": 0}),  # the plain chain
            ),
        ),
        MethodInfo(
            "lantern",
            LanternParameters,
            False,
            "LANTERN relaxed acceptance: p plus the mass of nearby codebook tokens within a budget delta (lossy)",
            needs_token_vectors=True,
            discrete="lantern:iterate",
            # small at its default delta on the toys (p 0.02 at 3,000 images), large at 0.5
            deviation=Deviation({"delta": 0.5}, samples=1_500),
        ),
        MethodInfo(
            "gsd",
            GsdParameters,
            False,
            "grouped speculative decoding: accept by the mass of a dynamic group of similar tokens (lossy)",
            needs_token_vectors=True,
            discrete="gsd:iterate",
            deviation=Deviation(samples=3_000),
        ),
        MethodInfo(
            "eagle2",
            TreeParameters,
            True,
            "EAGLE-2 draft trees of a fixed depth and top-k, verified in one pass",
            discrete="eagle2:iterate",
            exact_with=(ToyRun({"drafter": "head"}, toy="llama"),),  # the llama toy's untrained head
        ),
        MethodInfo(
            "peanut",
            PeanutParameters,
            True,
            "PEANUT: draft trees whose depth and top-k follow the neighbouring tree's acceptance rate",
            discrete="peanut:iterate",
            exact_with=(ToyRun({"drafter": "head"}, toy="llama"),),
        ),
        MethodInfo(
            "peanut-lantern",
            PeanutLanternParameters,
            False,
            "PEANUT with LANTERN's relaxed acceptance on the tree (lossy)",
            needs_token_vectors=True,
            discrete="peanut:iterate_relaxed",
            deviation=Deviation({"delta": 0.5}, samples=1_000),  # p near 1e-82 (at 0.3, 9e-4)
        ),
        MethodInfo(
            "lantern++",
            StaticTreeLanternParameters,
            False,
            "LANTERN++: EAGLE-1's static draft tree, each node accepted by LANTERN's relaxed test (lossy)",
            needs_token_vectors=True,
            discrete="lantern_pp:iterate",
            # at delta 0 the static tree under the tree loop's exact rule
            exact_with=(ToyRun({"delta": 0.0}), ToyRun({"delta": 0.0, "drafter": "head"}, toy="llama")),
            deviation=Deviation({"delta": 0.5}, samples=1_000),
        ),
        MethodInfo(
            "zipar",
            ZiparParameters,
            False,
            "ZipAR: a row starts once the row above has s tokens, then every row in flight draws one token per "
            "pass (lossy: the rows above are unfinished)",
            discrete="zipar:iterate",
            decision_order="zipar:decision_geometry",
            # a row that starts only once the row above is whole sees everything AR sees
            exact_with=(ToyRun({"window_size": 2}), ToyRun({"window_size": 2}, toy="llama")),
            # window 1 on the toys: a toy's conditionals have no spatial locality
            deviation=Deviation(samples=2_000),
        ),
        MethodInfo(
            "pjd",
            PjdParameters,
            False,
            "PJD (parallel Jacobi decoding): ZipAR's rows in flight, each with a Jacobi window, all verified in one "
            "pass under a row-causal mask; the top row by SJD's test, the rows below keep their accepted drafts "
            "only (lossy: the rows above are unfinished, and drafts are reused against their old q)",
            discrete="pjd:iterate",
            order_as_it_runs=True,
            # one row in flight at a time and no draft reused against its old q: SJD, row by row
            exact_with=tuple(ToyRun({"row_start": 4096, "reuse_threshold": 1.0}, toy=toy) for toy in TOYS),
            # p 1.5e-16 (tv 0.095); at the defaults the toys' short rows are in flight one at a time and only
            # the reuse rule departs: not shown at 20,000 images (p 0.02)
            deviation=Deviation({"row_start": 1}, samples=2_000),
        ),
        MethodInfo(
            "ar-draft",
            NoParameters,
            False,
            "the draft model of a continuous pair alone, for reference (not the target's distribution)",
            needs_draft=True,
            continuous="continuous_ar:iterate_draft",
            deviation=Deviation(toy=CONTINUOUS_TOY, samples=300),  # energy 0.25, p at the permutation floor
        ),
        MethodInfo(
            "cspd",
            SpeculativeParameters,
            False,
            "continuous speculative decoding as the CSpD paper writes it: aligned denoising noise, acceptance by "
            "Sigma p(x0|x1p)/q(x0|x1q) (Eq. 5), acceptance-rejection resampling, pre-filling (close to the target, "
            "not exact: check-lossless measures the gap)",
            needs_draft=True,
            continuous="cspd:iterate",
            # close to the target on the toy pair (energy 0.008: p 0.25 at 2,000, 0.01 at 6,000): reported, not shown;
            # bench-cspd --deviation measures it on the shipped pair
            deviation=Deviation(toy=CONTINUOUS_TOY, samples=300, shown=False),
        ),
        MethodInfo(
            "cspd-exact",
            SpeculativeParameters,
            True,
            "continuous speculative decoding made exact: speculative sampling on whole denoising paths (target "
            "transitions evaluated along the draft's own path), residual resampling of paths",
            needs_draft=True,
            continuous="cspd_exact:iterate",
        ),
    )
}


(BASELINE,) = (name for name, method in BUILT_IN.items() if method.baseline)


def installed_methods() -> list[MethodInfo]:
    """The entries installed packages declare under the entry-point group `specviz.methods`: each entry point
    names a MethodInfo (or a sequence of them) whose loops name their modules in full. One that cannot be
    loaded, is no MethodInfo, takes a name already taken or claims to be the baseline is left out with a
    warning: the rest still runs."""
    found: list[MethodInfo] = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = point.load()
        except Exception as error:  # a broken package must not take the command line or the app with it
            warnings.warn(f"method package {point.value} could not be loaded and is left out: {error}", stacklevel=2)
            continue
        for info in loaded if isinstance(loaded, (list, tuple)) else [loaded]:
            problem = _refused(info, [*BUILT_IN, *(method.name for method in found)])
            if problem:
                warnings.warn(f"{point.value} is left out: {problem}", stacklevel=2)
            else:
                found.append(info)
    return found


def _refused(info: object, taken: list[str]) -> str | None:
    """Why an installed entry cannot join the catalogue, or None."""
    if not isinstance(info, MethodInfo):
        return f"{info!r} is no MethodInfo"
    if not METHOD_NAME.fullmatch(info.name):
        return f"the method name {info.name!r} is not lower-case letters, digits, '-', '+' or '.' (40 at most)"
    if not (isinstance(info.parameters, type) and issubclass(info.parameters, Parameters)):
        return f"{info.name!r} takes no Parameters class"
    loops = [loop for loop in (info.discrete, info.continuous, info.decision_order) if loop is not None]
    if not loops or not all(isinstance(loop, str) and loop.count(":") == 1 for loop in loops):
        return f"{info.name!r} names no loop as 'module:function'"
    if info.name in taken:
        return f"the method name {info.name!r} is taken"
    if info.baseline:
        return f"{info.name!r} claims to be the baseline, which is {BASELINE}"
    return None


CATALOGUE: dict[str, MethodInfo] = {**BUILT_IN, **{method.name: method for method in installed_methods()}}


def is_baseline(method: str) -> bool:
    """Whether `method` (a trace's or a request's) names the baseline every speedup is measured against."""
    return method == BASELINE


def method_info(name: str) -> MethodInfo:
    """The catalogue's entry for `name`; UnknownMethod naming the methods there are."""
    return look_up(CATALOGUE, name, "method", UnknownMethod)
