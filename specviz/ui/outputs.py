"""A handler's outputs by name: the components an event sets, each under a name, and the handler's values
under the same names, handed to Gradio keyed by component. No value depends on its position in a list of
outputs kept somewhere else."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping

import gradio as gr
from gradio.blocks import Block


class Outputs(dict[str, Block]):
    """Components by name, in the order of the event's outputs (the order a client's API call returns them)."""

    def __init__(self, *parts: Mapping[str, Block]):
        """The parts' components in turn; a name given twice is refused (one would hide the other)."""
        super().__init__()
        for part in parts:
            for name, component in part.items():
                if name in self:
                    raise ValueError(f"two outputs are named {name!r}")
                self[name] = component

    @property
    def components(self) -> list[Block]:
        """What the event's `outputs` takes."""
        return list(self.values())

    def of(self, values: Mapping[str, object]) -> dict[Block, object]:
        """Values by name as Gradio takes them, keyed by component; an output not named keeps what it shows
        (no values at all: `gr.skip()`, nothing changes)."""
        return {self[name]: value for name, value in values.items()} or gr.skip()

    def set_by(self, fn: Callable) -> Callable:
        """`fn`, whose return value (or each frame it yields) names its values, as a handler of these outputs;
        its name stays (the endpoint's)."""
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def frames(*args):
                for frame in fn(*args):
                    yield self.of(frame)

            return frames

        @functools.wraps(fn)
        def handler(*args):
            return self.of(fn(*args))

        return handler
