"""What a visitor is told when a handler fails: known problems as a message, unknown ones without a stack
trace (the one stack trace goes to the server log)."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable

import gradio as gr
import torch

from specviz.core.errors import USER_ERRORS

log = logging.getLogger("specviz.ui")


def user_errors(fn: Callable) -> Callable:
    """Show known problems as a message in the UI, and unknown ones without a stack trace."""

    def report(error: Exception) -> gr.Error:
        if isinstance(error, gr.Error):  # already a message (from work checked inside a GPU call)
            return error
        if isinstance(error, torch.OutOfMemoryError):
            log.warning("out of memory in %s", fn.__name__)
            return gr.Error("Out of memory: try a smaller window, a smaller model, or the CPU.", print_exception=False)
        if isinstance(error, USER_ERRORS):
            log.warning("refused in %s: %s", fn.__name__, error)  # one line; the user sees the message
            return gr.Error(str(error), print_exception=False)
        log.exception("unexpected error")  # the one stack trace, for a bug
        message = f"Something went wrong ({type(error).__name__}); the details are in the server log."
        return gr.Error(message, print_exception=False)

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args):
            try:
                yield from fn(*args)
            except Exception as error:
                raise report(error) from None

        return stream

    @functools.wraps(fn)
    def call(*args):
        try:
            return fn(*args)
        except Exception as error:
            raise report(error) from None

    return call
