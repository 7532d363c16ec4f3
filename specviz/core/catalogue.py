"""Every decoding method as the command line and the app describe it: name, parameter class, promise.

Light (no torch): the command line builds its parser and checks method parameters from here before
anything heavy is imported. An entry names its loops as `module:function` in `specviz.decoding`;
`specviz.decoding.registry` imports them to make METHODS. A method is thus one file holding its rule
and loop, and one entry here, whatever kind of pass it records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
    SjdPacParameters,
    SpeculativeParameters,
    StaticTreeLanternParameters,
    TreeParameters,
    WindowParameters,
    ZiparParameters,
)


class UnknownMethod(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


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


CATALOGUE: dict[str, MethodInfo] = {
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
        ),
        MethodInfo(
            "sjd",
            WindowParameters,
            True,
            "speculative Jacobi decoding (SJD), independent redraws",
            discrete="sjd:iterate",
        ),
        MethodInfo(
            "scd-mc",
            WindowParameters,
            True,
            "speculative coupled decoding, maximal coupling",
            discrete="scd_mc:iterate",
        ),
        MethodInfo(
            "scd-gs", WindowParameters, True, "speculative coupled decoding, Gumbel sharing", discrete="scd_gs:iterate"
        ),
        MethodInfo(
            "sjd-pac",
            SjdPacParameters,
            True,
            "SJD-PAC: SJD with a K-ary tree of candidates after each rejection and the later drafts kept where "
            "they pass against the stale target",
            discrete="sjd_pac:iterate",
        ),
        MethodInfo(
            "lantern",
            LanternParameters,
            False,
            "LANTERN relaxed acceptance: p plus the mass of nearby codebook tokens within a budget delta (lossy)",
            needs_token_vectors=True,
            discrete="lantern:iterate",
        ),
        MethodInfo(
            "gsd",
            GsdParameters,
            False,
            "grouped speculative decoding: accept by the mass of a dynamic group of similar tokens (lossy)",
            needs_token_vectors=True,
            discrete="gsd:iterate",
        ),
        MethodInfo(
            "eagle2",
            TreeParameters,
            True,
            "EAGLE-2 draft trees of a fixed depth and top-k, verified in one pass",
            discrete="eagle2:iterate",
        ),
        MethodInfo(
            "peanut",
            PeanutParameters,
            True,
            "PEANUT: draft trees whose depth and top-k follow the neighbouring tree's acceptance rate",
            discrete="peanut:iterate",
        ),
        MethodInfo(
            "peanut-lantern",
            PeanutLanternParameters,
            False,
            "PEANUT with LANTERN's relaxed acceptance on the tree (lossy)",
            needs_token_vectors=True,
            discrete="peanut:iterate_relaxed",
        ),
        MethodInfo(
            "lantern++",
            StaticTreeLanternParameters,
            False,
            "LANTERN++: EAGLE-1's static draft tree, each node accepted by LANTERN's relaxed test (lossy)",
            needs_token_vectors=True,
            discrete="lantern_pp:iterate",
        ),
        MethodInfo(
            "zipar",
            ZiparParameters,
            False,
            "ZipAR: a row starts once the row above has s tokens, then every row in flight draws one token per "
            "pass (lossy: the rows above are unfinished)",
            discrete="zipar:iterate",
            decision_order="zipar:decision_geometry",
        ),
        MethodInfo(
            "ar-draft",
            NoParameters,
            False,
            "the draft model of a continuous pair alone, for reference (not the target's distribution)",
            needs_draft=True,
            continuous="continuous_ar:iterate_draft",
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


(BASELINE,) = (name for name, method in CATALOGUE.items() if method.baseline)


def is_baseline(method: str) -> bool:
    """Whether `method` (a trace's or a request's) names the baseline every speedup is measured against."""
    return method == BASELINE


def method_info(name: str) -> MethodInfo:
    """The catalogue's entry for `name`; UnknownMethod naming the methods there are."""
    return look_up(CATALOGUE, name, "method", UnknownMethod)
