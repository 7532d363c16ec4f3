"""Decoding methods, one file each; `run` turns any of them into a Trace.

METHODS, `run` and the rest load the methods (and torch) on first use: the catalogue and the
parameter classes (`specviz.core.catalogue`, `.params`) are light, and the command line reads
them before anything heavy is imported.
"""

from importlib import import_module

from specviz.core.catalogue import UnknownMethod
from specviz.core.inputs import MAX_PROMPT_CHARS, PromptError

_HEAVY = {"METHODS": "registry", "Method": "registry", "get_method": "registry", "RunStream": "runner", "run": "runner"}

__all__ = ["MAX_PROMPT_CHARS", "METHODS", "Method", "PromptError", "RunStream", "UnknownMethod", "get_method", "run"]


def __getattr__(name: str) -> object:
    if name in _HEAVY:
        return getattr(import_module(f"specviz.decoding.{_HEAVY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
