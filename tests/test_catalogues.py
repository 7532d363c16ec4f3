"""The command line reads light catalogues (no torch, matplotlib or scipy); the heavy registries are built
from them, so each method, figure and toy is declared once."""

from dataclasses import fields

from specviz.decoding.catalogue import CATALOGUE, MethodInfo
from specviz.figure_options import FIGURE_KINDS
from specviz.lossless_toys import TOY_DESCRIPTIONS


def test_the_methods_are_the_catalogues_entries_with_their_loops():
    from specviz.decoding.registry import CONTINUOUS_LOOPS, DISCRETE_LOOPS, METHODS

    assert list(METHODS) == list(CATALOGUE)
    assert set(DISCRETE_LOOPS) == {name for name, info in CATALOGUE.items() if info.discrete}
    assert set(CONTINUOUS_LOOPS) == {name for name, info in CATALOGUE.items() if info.continuous}
    for name, info in CATALOGUE.items():
        method = METHODS[name]
        assert all(getattr(method, field.name) == getattr(info, field.name) for field in fields(MethodInfo))
        assert method.iterate is DISCRETE_LOOPS.get(name) and method.iterate_continuous is CONTINUOUS_LOOPS.get(name)


def test_the_figures_drawn_are_the_catalogues():
    from specviz.viz.publication import FIGURES

    drawn = [kind for kind in FIGURES if kind.draw is not None]
    assert [(kind.name, kind.title, kind.per_trace, kind.at_iteration) for kind in drawn] == [
        (kind.name, kind.title, kind.per_trace, kind.at_iteration) for kind in FIGURE_KINDS
    ]


def test_the_toys_are_the_catalogues():
    from specviz.models.toys import TOYS

    assert list(TOYS) == list(TOY_DESCRIPTIONS)
