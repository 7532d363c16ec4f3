"""What a client sends, checked before any handler runs (`CheckedBlocks`): the number of values, each value
against its component as the session shows it, and files only from this server's uploads, a few at most. A
refusal is one message to the client and one line in the log."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from pathlib import Path

import gradio as gr

from specviz.core.inputs import brief
from specviz.trace import MAX_TRACE_BYTES
from specviz.ui.compute import PAGE, QUEUED_EVENT

log = logging.getLogger("specviz.ui")

MAX_UPLOAD_BYTES = MAX_TRACE_BYTES  # launch(max_file_size=...): a trace is the only upload
MAX_REQUEST_FILES = 2  # the files a call may reference: a trace and the AR run it raced
CHOICES = (gr.Dropdown, gr.Radio, gr.CheckboxGroup)
LISTED_CHOICES = 8  # a refusal lists the choices up to this many, else counts them


class CheckedBlocks(gr.Blocks):
    """gr.Blocks whose every endpoint checks what a client sends before its handler runs: the number of
    values, each value against its component as this session shows it (a range or choices that an update
    changed included), and files only from this server's uploads. A refusal is one message to the client
    and one line in the log. Gradio refuses some of these itself, but with a stack trace in the log or a
    message that quotes the whole value (a 10 MB prompt, 1,915 choices), and lets others through to the
    handler (NaN, a list for a number, a decimal where it would round)."""

    async def process_api(self, block_fn, inputs, state=None, request=None, iterator=None, session_hash=None,
                          event_id=None, *args, **kwargs):  # fmt: skip
        """Gradio's, with the queue's event and the page made known to the handler's thread (`Deadline`), and
        an endpoint number that names no endpoint refused in one line (Gradio's own IndexError logged a stack
        trace)."""
        if isinstance(block_fn, int) and not 0 <= block_fn < len(self.fns):
            raise refusal("the app", f"it has no endpoint {block_fn}")
        QUEUED_EVENT.set((self, event_id) if event_id else None)
        PAGE.set(session_hash)
        return await super().process_api(block_fn, inputs, state, request, iterator, session_hash, event_id,
                                         *args, **kwargs)  # fmt: skip

    async def preprocess_data(self, block_fn, inputs: list, state, explicit_call: bool = False) -> list:
        where = block_fn.api_name or block_fn.name
        if len(inputs) != len(block_fn.inputs):
            raise refusal(where, f"takes {len(block_fn.inputs)} values, got {len(inputs)}")
        for component, payload in zip(block_fn.inputs, inputs, strict=True):
            if isinstance(component, gr.File):  # counted before Gradio or the handler reads a byte of them
                problem = files_problem(payload)
                if problem is not None:
                    raise refusal(_label(component, where), problem)
        for component, payload in zip(block_fn.inputs, inputs, strict=True):
            if component.stateful:  # the server's own value is used, whatever a client sends
                continue
            shown = state[component._id] if state is not None and component._id in state else component
            problem = payload_problem(shown, payload, empty=getattr(component, "value", None) is None)
            if problem is not None:
                raise refusal(_label(shown, where), problem + allowed_range(shown))
        try:
            values = await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except Exception as error:  # a file reference outside this server's uploads, or none at all
            files = [c for c in block_fn.inputs if isinstance(c, gr.File)]
            problem = "only files uploaded to this page are taken" if files else "these values cannot be read"
            raise refusal(_label(files[0], where) if files else where, f"{problem} ({type(error).__name__})") from None
        for component, value in zip(block_fn.inputs, values, strict=True):
            if isinstance(component, gr.File):
                for path in value if isinstance(value, list) else [value] if value else []:
                    if not Path(path).is_file():
                        raise refusal(_label(component, where), f"{brief(Path(path).name)} is not an uploaded file")
        return values


def refusal(where: str, problem: str) -> gr.Error:
    """One line in the log and one message to the client, no stack trace."""
    log.warning("refused input to %s: %s", where, problem)
    return gr.Error(f"{where}: {problem}", print_exception=False)


def files_problem(payload: object) -> str | None:
    """What is wrong with the number or total size of the files a call references: at most MAX_REQUEST_FILES,
    together at most MAX_REQUEST_FILES x MAX_UPLOAD_BYTES (each upload is bounded by Gradio already; a call that
    names one upload many times is not)."""
    listed = payload if isinstance(payload, list) else [payload] if payload else []
    if len(listed) > MAX_REQUEST_FILES:
        return f"{len(listed):,} files; a call takes {MAX_REQUEST_FILES} at most (a trace and its AR run)"
    paths = [item.get("path") for item in listed if isinstance(item, dict)]
    if len({path for path in paths if isinstance(path, str)}) < len(paths):
        return "the same file is named twice"
    total = 0
    for path in paths:
        with contextlib.suppress(OSError, TypeError, ValueError):
            total += os.stat(path).st_size if isinstance(path, str) and os.path.isfile(path) else 0
    if total > MAX_REQUEST_FILES * MAX_UPLOAD_BYTES:
        return f"{total:,} bytes of files; a call takes {MAX_REQUEST_FILES * MAX_UPLOAD_BYTES:,} at most"
    return None


def payload_problem(component: gr.components.Component, payload: object, empty: bool = False) -> str | None:
    """What is wrong with a client's value for `component`, in words that quote it briefly; None where
    Gradio's processing and the handler can take it. `empty`: the page may send no choice (the component
    was built without one)."""
    if isinstance(component, gr.Number | gr.Slider):
        problem = _number_problem(component, payload)
    elif isinstance(component, gr.Checkbox):
        problem = None if isinstance(payload, bool) else f"true or false is needed, got {brief(payload)}"
    elif isinstance(component, gr.Textbox | gr.Markdown):
        problem = _text_problem(component, payload)
    elif isinstance(component, CHOICES):
        return _choice_problem(component, payload, empty)
    elif isinstance(component, gr.Dataset):
        problem = None if type(payload) is int else f"an example's number is needed, got {brief(payload)}"
    else:
        return None  # a file: Gradio takes only references to its own uploads (checked after it, above)
    if problem is not None:
        return problem
    try:
        component.preprocess(payload)  # Gradio's own checks: a number's range, an example's index
    except Exception:
        return f"{brief(payload)} is out of range" if isinstance(component, gr.Number | gr.Slider) else "no such value"
    return None


def _number_problem(component: gr.Number | gr.Slider, payload: object) -> str | None:
    if payload is None:
        return None if isinstance(component, gr.Number) else "a number is needed"  # an emptied box: the handler says
    if isinstance(payload, bool) or not isinstance(payload, int | float):
        return f"a number is needed, got {brief(payload)}"
    if isinstance(payload, float) and not math.isfinite(payload):
        return f"{payload} is not a finite number"
    if getattr(component, "precision", None) == 0 and isinstance(payload, float) and not payload.is_integer():
        return f"{payload:g} is not a whole number"  # Gradio would round it silently
    return None


def _text_problem(component: gr.Textbox | gr.Markdown, payload: object) -> str | None:
    if payload is None:
        return None
    if not isinstance(payload, str):
        return f"text is needed, got {brief(payload)}"
    limit = getattr(component, "max_length", None)
    if limit is not None and len(payload) > limit:
        return f"{len(payload):,} characters; the limit is {limit:,}"
    return None


def _choice_problem(component: gr.Dropdown | gr.Radio | gr.CheckboxGroup, payload: object, empty: bool) -> str | None:
    choices = [value for _, value in component.choices]
    several = isinstance(component, gr.CheckboxGroup) or bool(getattr(component, "multiselect", False))
    listed = ", ".join(map(str, choices)) if len(choices) <= LISTED_CHOICES else f"its {len(choices):,} choices"
    if payload is None:
        return None if empty and not several else f"a choice is needed: {listed}"
    if several != isinstance(payload, list):
        return f"{'a list of' if several else 'one of'} its choices is needed, got {brief(payload)}"
    wrong = [value for value in (payload if several else [payload]) if value not in choices]
    if wrong:
        return f"{brief(wrong[0])} is not one of {listed}"
    if several and len(payload) > len(choices):  # a choice named more than once: Compare would run it again
        return f"{len(payload):,} choices; it has {len(choices):,}"
    return None


def allowed_range(component: gr.components.Component) -> str:
    """A number's allowed range as a refusal states it, from the component as the session shows it."""
    low, high = getattr(component, "minimum", None), getattr(component, "maximum", None)
    if low is not None and high is not None:
        return f" (allowed: {low:g} to {high:g})"
    if low is not None:
        return f" (allowed: {low:g} or more)"
    return ""


def _label(component: gr.components.Component, fallback: str) -> str:
    return getattr(component, "label", None) or fallback
