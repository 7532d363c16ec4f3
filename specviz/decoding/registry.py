"""The registered decoding methods, their parameter classes and what each promises."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from specviz.decoding import (
    ar,
    continuous_ar,
    cspd,
    cspd_exact,
    eagle2,
    gsd,
    jacobi,
    lantern,
    peanut,
    scd_gs,
    scd_mc,
    sjd,
)
from specviz.decoding.drafters import check_needs
from specviz.decoding.params import (
    GsdParameters,
    LanternParameters,
    NoParameters,
    Parameters,
    PeanutLanternParameters,
    PeanutParameters,
    SpeculativeParameters,
    TreeParameters,
    WindowParameters,
)
from specviz.decoding.sampling import neighbour_table
from specviz.models.continuous import is_continuous
from specviz.models.protocol import Session, UnsupportedMethod, token_vectors
from specviz.trace import Iteration


class UnknownMethod(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Method:
    name: str
    iterate: Callable[..., Iterator[Iteration]] | None  # (session, sampling, generator, parameters) -> per pass
    parameters: type[Parameters]
    lossless: bool
    description: str
    lossless_when_greedy: bool = False
    needs_token_vectors: bool = False  # the tokenizer's codebook vectors (relaxed acceptance)
    # on a continuous-token pair: (pair session, sampling, generator, parameters) -> (record, tokens (k, d)) per pass
    iterate_continuous: Callable[..., Iterator[tuple[Iteration, Any]]] | None = None
    needs_draft: bool = False  # the draft model of a continuous pair

    def runs_on(self, model: object) -> Callable[..., Iterator]:
        """The method's loop for this model's kind of tokens; UnsupportedMethod where it has none."""
        if is_continuous(model):
            if self.iterate_continuous is None:
                raise UnsupportedMethod(
                    f"{self.name} decodes discrete tokens; {getattr(model, 'name', 'this model')} samples continuous "
                    f"tokens with a diffusion head: use {', '.join(CONTINUOUS_METHODS)}"
                )
            if self.needs_draft and not getattr(model, "has_draft", True):
                raise UnsupportedMethod(
                    f"{self.name} needs a draft model and {getattr(model, 'name', 'this model')} runs without one: "
                    "pick a draft (for example --draft mar-b for mar-l or mar-h) or use ar"
                )
            return self.iterate_continuous
        if self.iterate is None:
            raise UnsupportedMethod(
                f"{self.name} needs a continuous-token draft/target pair (for example tiny-continuous); "
                f"{getattr(model, 'name', 'this model')} has discrete tokens"
            )
        return self.iterate

    @property
    def drafts_trees(self) -> bool:
        """Verifies a draft tree per pass, which needs tree attention (a transformers cache)."""
        return issubclass(self.parameters, TreeParameters)

    def prepare(self, session: Session, parameters: Parameters) -> None:
        """Per-model work that is not part of decoding (a neighbour table), done before a run is timed;
        raises UnsupportedMethod when the model lacks what the method or its drafter needs."""
        if self.needs_token_vectors:
            neighbour_table(token_vectors(session, self.name), parameters.neighbours)
        if self.drafts_trees:
            check_needs(session, parameters.drafter)

    def is_lossless(self, greedy: bool) -> bool:
        return self.lossless or (greedy and self.lossless_when_greedy)

    def resolve(self, given: Mapping[str, Any] | Parameters | None) -> Parameters:
        """The method's parameters: defaults overridden by `given`; unknown names and bad values refused."""
        if isinstance(given, self.parameters):
            return given
        if isinstance(given, Parameters):
            given = given.to_dict()
        return self.parameters.from_dict(given, self.name)


METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method(
            "ar",
            ar.iterate,
            NoParameters,
            True,
            "vanilla autoregressive: one token per model pass",
            iterate_continuous=continuous_ar.iterate,
        ),
        Method(
            "jacobi",
            jacobi.iterate,
            WindowParameters,
            False,
            "Jacobi decoding: drafts accepted while unchanged between iterations (lossless only when greedy)",
            lossless_when_greedy=True,
        ),
        Method("sjd", sjd.iterate, WindowParameters, True, "speculative Jacobi decoding (SJD), independent redraws"),
        Method("scd-mc", scd_mc.iterate, WindowParameters, True, "speculative coupled decoding, maximal coupling"),
        Method("scd-gs", scd_gs.iterate, WindowParameters, True, "speculative coupled decoding, Gumbel sharing"),
        Method(
            "lantern",
            lantern.iterate,
            LanternParameters,
            False,
            "LANTERN relaxed acceptance: p plus the mass of nearby codebook tokens within a budget delta (lossy)",
            needs_token_vectors=True,
        ),
        Method(
            "gsd",
            gsd.iterate,
            GsdParameters,
            False,
            "grouped speculative decoding: accept by the mass of a dynamic group of similar tokens (lossy)",
            needs_token_vectors=True,
        ),
        Method(
            "eagle2",
            eagle2.iterate,
            TreeParameters,
            True,
            "EAGLE-2 draft trees of a fixed depth and top-k, verified in one pass",
        ),
        Method(
            "peanut",
            peanut.iterate,
            PeanutParameters,
            True,
            "PEANUT: draft trees whose depth and top-k follow the neighbouring tree's acceptance rate",
        ),
        Method(
            "peanut-lantern",
            peanut.iterate_relaxed,
            PeanutLanternParameters,
            False,
            "PEANUT with LANTERN's relaxed acceptance on the tree (lossy)",
            needs_token_vectors=True,
        ),
        Method(
            "ar-draft",
            None,
            NoParameters,
            False,
            "the draft model of a continuous pair alone, for reference (not the target's distribution)",
            iterate_continuous=continuous_ar.iterate_draft,
            needs_draft=True,
        ),
        Method(
            "cspd",
            None,
            SpeculativeParameters,
            False,
            "continuous speculative decoding as the CSpD paper writes it: aligned denoising noise, acceptance by "
            "Sigma p(x0|x1p)/q(x0|x1q) (Eq. 5), acceptance-rejection resampling, pre-filling (close to the target, "
            "not exact: check-lossless measures the gap)",
            iterate_continuous=cspd.iterate,
            needs_draft=True,
        ),
        Method(
            "cspd-exact",
            None,
            SpeculativeParameters,
            True,
            "continuous speculative decoding made exact: speculative sampling on whole denoising paths (target "
            "transitions evaluated along the draft's own path), residual resampling of paths",
            iterate_continuous=cspd_exact.iterate,
            needs_draft=True,
        ),
    )
}
CONTINUOUS_METHODS = tuple(name for name, method in METHODS.items() if method.iterate_continuous is not None)


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise UnknownMethod(f"unknown method {name!r}; available: {', '.join(METHODS)}")
    return METHODS[name]
