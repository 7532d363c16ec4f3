"""Decoding methods, one file each; `run` turns any of them into a Trace."""

from specviz.decoding.registry import METHODS, Method, UnknownMethod, get_method
from specviz.decoding.runner import RunStream, run
from specviz.inputs import MAX_PROMPT_CHARS, PromptError

__all__ = ["MAX_PROMPT_CHARS", "METHODS", "Method", "PromptError", "RunStream", "UnknownMethod", "get_method", "run"]
