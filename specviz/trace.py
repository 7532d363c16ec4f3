"""The record of one run: settings, final tokens, and one entry per iteration.

Stored as versioned JSON (never pickle) and validated on load with pydantic, so a malformed or
hostile file gets a clear message and nothing else. Only the probabilities of drafted tokens are
kept, never full distributions, so a trace of a 256-token image is a few tens of kilobytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

TRACE_VERSION = 1
MAX_TRACE_BYTES = 64 * 1024 * 1024
MAX_POSITIONS = 65536  # longest generated sequence a trace may describe
MAX_WINDOW = 1024

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Count = Annotated[int, Field(ge=0)]


class TraceError(ValueError):
    """A trace file that cannot be used; the message says why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TraceGeometry(_Strict):
    rows: Annotated[int, Field(ge=1, le=4096)]
    cols: Annotated[int, Field(ge=1, le=4096)]
    vocab_size: Annotated[int, Field(ge=1, le=1_000_000)]
    layout: Annotated[list[int], Field(max_length=MAX_POSITIONS)]

    @model_validator(mode="after")
    def _layout_matches_grid(self) -> TraceGeometry:
        cells = sum(1 for entry in self.layout if entry == -1)
        if cells != self.rows * self.cols:
            raise ValueError(
                f"layout has {cells} image cells, grid {self.rows}x{self.cols} needs {self.rows * self.cols}"
            )
        if any(entry < -1 or entry >= self.vocab_size for entry in self.layout):
            raise ValueError("layout entries must be -1 (image cell) or a token id below vocab_size")
        return self


class TraceSampling(_Strict):
    temperature: Annotated[float, Field(ge=0.0)]
    top_k: Annotated[int, Field(ge=1)] | None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)]
    guidance_scale: Annotated[float, Field(ge=0.0)]


class Iteration(_Strict):
    """One model pass of a method (AR: one token).

    Offsets are relative to `start`, the first sequence position of the window. `drafts` are the
    tokens verified this iteration, `p_old`/`p_new` their probabilities under the distribution
    they were drafted from and under the target computed now, `ratio` their acceptance
    probabilities. `committed` are the tokens fixed by this iteration, from `start` on.
    `forward_ms` is the model pass, `verify_ms` the method's own work (verification, redraws,
    new slots, cache cropping), `record_ms` the cost of writing this record.
    """

    start: Count
    drafts: Annotated[list[Count], Field(max_length=MAX_WINDOW)] = []
    p_old: Annotated[list[Probability], Field(max_length=MAX_WINDOW)] = []
    p_new: Annotated[list[Probability], Field(max_length=MAX_WINDOW)] = []
    ratio: Annotated[list[Probability], Field(max_length=MAX_WINDOW)] = []
    accepted: Count = 0
    rejected_at: Count | None = None
    resampled: Count | None = None
    new_drafts: Count = 0
    changed: Count = 0
    committed: Annotated[list[Count], Field(max_length=MAX_WINDOW + 1)]
    forward_ms: Annotated[float, Field(ge=0.0)]
    verify_ms: Annotated[float, Field(ge=0.0)] = 0.0
    record_ms: Annotated[float, Field(ge=0.0)] = 0.0

    @model_validator(mode="after")
    def _consistent(self) -> Iteration:
        n = len(self.drafts)
        if not len(self.p_old) == len(self.p_new) == len(self.ratio) == n:
            raise ValueError(f"drafts, p_old, p_new and ratio must have one entry per draft ({n})")
        if self.accepted > n or self.new_drafts > n or self.changed > n:
            raise ValueError("accepted, new_drafts and changed cannot exceed the number of drafts")
        if self.rejected_at is not None and self.rejected_at != self.accepted:
            raise ValueError("the first rejection must come right after the accepted drafts")
        if (self.rejected_at is None) != (self.resampled is None):
            raise ValueError("rejected_at and resampled are given together or not at all")
        if self.committed[: self.accepted] != self.drafts[: self.accepted]:
            raise ValueError("committed tokens must begin with the accepted drafts")
        return self


class Trace(_Strict):
    version: Literal[1] = TRACE_VERSION
    model: Annotated[str, Field(max_length=200)]
    method: Annotated[str, Field(max_length=100)]
    lossless: bool
    prompt: Annotated[str, Field(max_length=10_000)]
    seed: int
    sampling: TraceSampling
    params: dict[str, int | float | str | bool | None] = {}
    geometry: TraceGeometry
    tokens: Annotated[list[Count], Field(max_length=MAX_POSITIONS)]
    nfe: Count
    seconds: Annotated[float, Field(ge=0.0)]
    prefill_ms: Annotated[float, Field(ge=0.0)] = 0.0
    iterations: Annotated[list[Iteration], Field(max_length=MAX_POSITIONS)]

    @model_validator(mode="after")
    def _consistent(self) -> Trace:
        g = self.geometry
        if len(self.tokens) > len(g.layout):
            raise ValueError(f"{len(self.tokens)} tokens for a sequence of {len(g.layout)} positions")
        if any(t >= g.vocab_size for t in self.tokens):
            raise ValueError(f"tokens must be below vocab_size {g.vocab_size}")
        position = 0
        for index, it in enumerate(self.iterations):
            if it.start != position:
                raise ValueError(
                    f"iteration {index} starts at {it.start}, but {position} tokens were committed before it"
                )
            if any(t >= g.vocab_size for t in it.drafts):
                raise ValueError(f"iteration {index}: drafts must be below vocab_size {g.vocab_size}")
            if self.tokens[position : position + len(it.committed)] != it.committed:
                raise ValueError(f"iteration {index}: committed tokens disagree with the final tokens")
            position += len(it.committed)
        if position != len(self.tokens):
            raise ValueError(f"iterations commit {position} tokens, the trace has {len(self.tokens)}")
        return self

    @property
    def accepted_drafts(self) -> int:
        return sum(it.accepted for it in self.iterations)

    def to_json(self) -> str:
        return self.model_dump_json()

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def from_json(cls, text: str | bytes) -> Trace:
        if len(text) > MAX_TRACE_BYTES:
            raise TraceError(f"trace is {len(text)} bytes; the limit is {MAX_TRACE_BYTES}")
        try:
            return cls.model_validate_json(text)
        except ValidationError as error:
            raise TraceError(_describe(error)) from None

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        path = Path(path)
        try:
            size = path.stat().st_size
            if size > MAX_TRACE_BYTES:
                raise TraceError(f"{path} is {size} bytes; the limit is {MAX_TRACE_BYTES}")
            return cls.from_json(path.read_bytes())
        except OSError as error:
            raise TraceError(f"cannot read trace {path}: {error.strerror or error}") from None


def _describe(error: ValidationError) -> str:
    """The first few problems of a validation error, each with where in the file it is."""
    problems = []
    for item in error.errors()[:3]:
        where = ".".join(str(part) for part in item["loc"]) or "file"
        if item["type"] == "json_invalid":
            problems.append(f"not valid JSON ({item['msg']})")
        elif item["type"] == "literal_error" and item["loc"] == ("version",):
            problems.append(
                f"unsupported trace version {item.get('input')!r}; this specviz reads version {TRACE_VERSION}"
            )
        else:
            problems.append(f"{where}: {item['msg']}")
    more = error.error_count() - len(problems)
    return "invalid trace: " + "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")
