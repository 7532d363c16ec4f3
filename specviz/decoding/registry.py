"""The registered decoding methods: the catalogue's entries with their loops, and what each needs to run."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

from specviz.core.catalogue import CATALOGUE, MethodInfo, UnknownMethod, method_info
from specviz.core.params import DraftedTreeParameters, Parameters
from specviz.core.settings import SamplingSettings
from specviz.decoding.decoders import Decoder, TokenDecoder, VectorDecoder
from specviz.decoding.drafters import check_needs
from specviz.decoding.sampling import neighbour_table
from specviz.models.protocol import Geometry, ImageModel, Session, UnsupportedMethod, is_continuous, token_vectors
from specviz.trace import ContinuousRecord, Iteration

__all__ = ["CONTINUOUS_METHODS", "METHODS", "Method", "UnknownMethod", "get_method"]


@dataclass(frozen=True, kw_only=True)
class Method(MethodInfo):
    iterate: Callable[..., Iterator[Iteration]] | None = None
    iterate_continuous: Callable[..., Iterator[tuple[ContinuousRecord, Any]]] | None = None
    reorder: Callable[[Geometry, Parameters], Geometry] | None = None

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

    def open(
        self, model: ImageModel, prompt: str, seed: int, sampling: SamplingSettings, parameters: Parameters
    ) -> Decoder:
        """Start this method on `model` (the prefill runs here): the decoder of the model's kind of tokens,
        whose `next` gives one record per pass. UnsupportedMethod where the method has no loop for it."""
        loop = self.runs_on(model)
        if is_continuous(model):
            return VectorDecoder(model, loop, prompt, seed, sampling, parameters)
        geometry = None if self.order_as_it_runs else self.decided_geometry(model.geometry, parameters)
        return TokenDecoder(model, loop, prompt, seed, sampling, parameters, self.prepare, geometry)

    def decided_geometry(
        self, geometry: Geometry, parameters: Parameters, order: Sequence[int] | None = None
    ) -> Geometry:
        """The geometry of this method's traces on a model of `geometry`: the model's, in raster order; a static
        decision order's; or, for a method whose order is known only as it runs, the one a trace's `order`
        implies (the model's positions in that order; without one, or one of another grid, the model's)."""
        if self.reorder is not None:
            return self.reorder(geometry, parameters)
        if self.order_as_it_runs and order is not None and sorted(order) == sorted(geometry.cell_of_position()):
            return geometry.in_decision_order(geometry.positions_in(order))
        return geometry

    def prepare(self, session: Session, parameters: Parameters) -> None:
        """Per-model work that is not part of decoding (a neighbour table), done before a run is timed;
        raises UnsupportedMethod when the model lacks what the method or its drafter needs."""
        if self.needs_token_vectors:
            neighbour_table(token_vectors(session, self.name), parameters.neighbours)
        if isinstance(parameters, DraftedTreeParameters):  # a drafter proposes the tree
            check_needs(session, parameters.drafter)
        needs = ("forward_at", "keep") if self.order_as_it_runs else ("forward_at",)
        if self.out_of_raster and not all(callable(getattr(session, name, None)) for name in needs):
            raise UnsupportedMethod(f"{self.name} feeds tokens out of raster order, which this model's session cannot")
        widest = getattr(session, "widest_pass", None)  # a session of fixed-width passes (the fast path)
        drafts = getattr(parameters, "tree_tokens", None)
        if widest is not None and drafts is not None and drafts + 1 > widest:
            raise UnsupportedMethod(
                f"the fast path takes passes of up to {widest} tokens and a tree of {drafts} drafts needs "
                f"{drafts + 1}: choose at most {widest - 1} tree tokens (--tree-tokens), or run without the fast path"
            )


def _loop(name: str | None) -> Callable | None:
    """The function (a loop) a catalogue entry names as `module:function`: a module of specviz.decoding, or,
    dotted, any importable module (a method from an installed package)."""
    if name is None:
        return None
    module, function = name.split(":")
    return getattr(importlib.import_module(module if "." in module else f"specviz.decoding.{module}"), function)


def _with_loops(info: MethodInfo) -> Method:
    """The catalogue's entry and the loops it names."""
    return Method(
        **{field.name: getattr(info, field.name) for field in fields(MethodInfo)},
        iterate=_loop(info.discrete),
        iterate_continuous=_loop(info.continuous),
        reorder=_loop(info.decision_order),
    )


METHODS: dict[str, Method] = {name: _with_loops(info) for name, info in CATALOGUE.items()}
CONTINUOUS_METHODS = tuple(name for name, method in METHODS.items() if method.iterate_continuous is not None)


def get_method(name: str) -> Method:
    return METHODS[method_info(name).name]
