"""The command line reads light catalogues (no torch, matplotlib or scipy); the heavy registries are built
from them, so each method, figure and toy is declared once."""

from dataclasses import fields

import pytest

from specviz.core.catalogue import CATALOGUE, MethodInfo
from specviz.core.figure_options import FIGURE_KINDS
from specviz.models.toys import TOY_DESCRIPTIONS


def test_every_entry_names_loops_that_take_what_the_decoders_give():
    """An entry names its loops by strings, which nothing else holds to the contract the decoders call
    them with: a discrete loop takes (session, sampling, generator, parameters), a continuous one the same
    with a draft/target pair and yields (record, committed values); either reads the entry's own parameter
    class or a base of it; a decision order maps a geometry and the parameters to the same cells in
    another order. A model of each kind gets the loop for its kind, or a refusal."""
    import inspect
    from types import SimpleNamespace
    from typing import get_args, get_origin, get_type_hints

    from specviz.decoding.registry import METHODS
    from specviz.models.continuous import PairSession
    from specviz.models.protocol import Geometry, Session, UnsupportedMethod
    from specviz.trace import ContinuousRecord

    assert list(METHODS) == list(CATALOGUE)
    discrete_model = SimpleNamespace(name="discrete")
    continuous_model = SimpleNamespace(name="pair", token_dim=4, has_draft=True)
    for name, info in CATALOGUE.items():
        method = METHODS[name]
        assert all(getattr(method, field.name) == getattr(info, field.name) for field in fields(MethodInfo)), name
        assert info.discrete or info.continuous, f"{name} names no loop"
        for named, loop, session, model in (
            (info.discrete, method.iterate, Session, discrete_model),
            (info.continuous, method.iterate_continuous, PairSession, continuous_model),
        ):
            if named is None:
                assert loop is None, name
                with pytest.raises(UnsupportedMethod):
                    method.runs_on(model)
                continue
            assert method.runs_on(model) is loop and f"{loop.__module__}:{loop.__name__}" == f"specviz.decoding.{named}"
            signature = inspect.signature(loop)
            signature.bind("session", "sampling", "generator", "parameters")  # as the decoders call it
            hints = get_type_hints(loop)
            first, *_, last = signature.parameters
            assert hints[first] is session, f"{name}: {named} takes a {hints[first].__name__}"
            assert issubclass(info.parameters, hints[last]), f"{name}: {named} reads {hints[last].__name__}"
            (record,) = get_args(hints["return"])
            assert (get_origin(record) is tuple and get_args(record)[0] is ContinuousRecord) == (session is PairSession)
        if info.decision_order is not None:
            decided = method.reorder(Geometry.plain_grid(4, 32, 16), info.parameters())  # rows wider than a window
            assert (decided.rows, decided.cols, decided.vocab_size) == (4, 32, 16), name
            assert sorted(decided.order) == list(range(128)) != list(decided.order), name


def test_the_figures_drawn_are_the_catalogues():
    from specviz.viz.publication import FIGURES

    drawn = [kind for kind in FIGURES if kind.draw is not None]
    assert [(kind.name, kind.title, kind.per_trace, kind.at_iteration) for kind in drawn] == [
        (kind.name, kind.title, kind.per_trace, kind.at_iteration) for kind in FIGURE_KINDS
    ]


def test_the_toys_are_the_catalogues():
    from specviz.models.toys.discrete import TOYS

    assert list(TOYS) == list(TOY_DESCRIPTIONS)


def test_every_entry_states_its_promise_and_parameters_by_type():
    """A misplaced argument in an entry (a class where the promise goes) would read as a truthy promise."""
    from specviz.core.params import Parameters

    for info in CATALOGUE.values():
        assert isinstance(info.lossless, bool) and isinstance(info.lossless_when_greedy, bool), info.name
        assert issubclass(info.parameters, Parameters) and isinstance(info.description, str), info.name
