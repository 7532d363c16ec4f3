"""The command line reads light catalogues (no torch, matplotlib or scipy); the heavy registries are built
from them, so each method, figure and toy is declared once."""

from dataclasses import fields

from specviz.core.catalogue import CATALOGUE, MethodInfo
from specviz.core.figure_options import FIGURE_KINDS
from specviz.models.toys import TOY_DESCRIPTIONS


def test_the_methods_are_the_catalogues_entries_with_the_loops_they_name():
    import importlib

    from specviz.decoding.registry import METHODS

    assert list(METHODS) == list(CATALOGUE)
    for name, info in CATALOGUE.items():
        method = METHODS[name]
        assert all(getattr(method, field.name) == getattr(info, field.name) for field in fields(MethodInfo))
        assert info.discrete or info.continuous, f"{name} names no loop"
        for named, loop in ((info.discrete, method.iterate), (info.continuous, method.iterate_continuous)):
            module, function = named.split(":") if named else (None, None)
            expected = getattr(importlib.import_module(f"specviz.decoding.{module}"), function) if named else None
            assert loop is expected and (loop is None or callable(loop))


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
