"""Decoding methods, one file each; `run` turns any of them into a Trace."""

from specviz.decoding.registry import METHODS, Method, UnknownMethod, get_method
from specviz.decoding.runner import MAX_PROMPT_CHARS, PromptError, run

__all__ = ["MAX_PROMPT_CHARS", "METHODS", "Method", "PromptError", "UnknownMethod", "get_method", "run"]
