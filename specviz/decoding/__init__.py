"""Decoding methods, one file each; `run` turns any of them into a Trace."""

from specviz.decoding.registry import METHODS, Method, UnknownMethod, get_method
from specviz.decoding.runner import MAX_PROMPT_CHARS, PromptError, RunStream, run

__all__ = ["MAX_PROMPT_CHARS", "METHODS", "Method", "PromptError", "RunStream", "UnknownMethod", "get_method", "run"]
