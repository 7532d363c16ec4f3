"""Typed method parameters: one frozen dataclass per method family, validated on construction.

They are the single source of every parameter's default, range and help text: the methods take an
instance, the command line builds its flags from the fields, the app its controls, and a trace
stores `to_dict()`. Values from a UI or a JSON file go through `from_dict`, which refuses unknown
names and values that are not what the field says (a window of 2.5 is an error, not 2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Self, get_type_hints

from specviz.models.settings import SettingsError

MAX_WINDOW = 128
INIT_STRATEGIES = ("random", "repeat-left", "repeat-above", "sample-left", "sample-above")


@dataclass(frozen=True)
class Spec:
    """What a parameter means and which values it takes (bounds inclusive)."""

    help: str
    label: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None


def parameter(default: Any, help: str, label: str, **limits: Any) -> Any:
    """A dataclass field carrying its Spec."""
    return field(default=default, metadata={"spec": Spec(help, label, **limits)})


@dataclass(frozen=True)
class Parameters:
    """Base of every method's parameters; subclasses only declare fields."""

    method_names: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for name, kind, spec in self.fields():
            object.__setattr__(self, name, _checked(name, kind, spec, getattr(self, name)))

    @classmethod
    def fields(cls) -> list[tuple[str, type, Spec]]:
        """(name, type, spec) of every parameter, in declaration order."""
        hints = get_type_hints(cls)
        return [(f.name, hints[f.name], f.metadata["spec"]) for f in fields(cls)]

    @classmethod
    def from_dict(cls, given: Mapping[str, Any] | None, method: str = "") -> Self:
        """Parameters from a mapping (UI, command line, trace): unset (None) values take the default;
        unknown names are refused, naming the method and what it takes."""
        given = {name: value for name, value in (given or {}).items() if value is not None}
        known = [name for name, _, _ in cls.fields()]
        unknown = sorted(set(given) - set(known))
        if unknown:
            allowed = ", ".join(known) or "none"
            owner = f"method {method}" if method else cls.__name__
            raise SettingsError(f"{owner} has no parameter {', '.join(unknown)} (its parameters: {allowed})")
        return cls(**given)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _checked(name: str, kind: type, spec: Spec, value: Any) -> Any:
    """The value converted to the field's type, or a SettingsError that says what is allowed."""
    if kind is bool:
        if not isinstance(value, bool):
            raise SettingsError(f"{name} must be true or false, got {value!r}")
        return value
    if kind is str:
        if spec.choices is not None and value not in spec.choices:
            raise SettingsError(f"{name} must be one of {', '.join(spec.choices)}; got {value!r}")
        return value
    limits = f"from {_number(spec.low)} to {_number(spec.high)}"
    if kind is int:
        integral = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
        if isinstance(value, bool) or not integral or not spec.low <= value <= spec.high:
            raise SettingsError(f"{name} must be an integer {limits}, got {value!r}")
        return int(value)
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if not is_number or not math.isfinite(value) or not spec.low <= value <= spec.high:
        raise SettingsError(f"{name} must be a number {limits}, got {value!r}")
    return float(value)


def _number(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class NoParameters(Parameters):
    """Methods without parameters (AR)."""


@dataclass(frozen=True)
class WindowParameters(Parameters):
    """The sliding Jacobi window shared by jacobi, sjd, scd-mc and scd-gs."""

    window: int = parameter(
        16, "Jacobi window W: drafts verified per pass (a pass feeds the decided head plus W drafts)", "Window W",
        low=1, high=MAX_WINDOW,
    )  # fmt: skip
    init: str = parameter(
        "random", "initialisation of new window slots (SJD section 4.2)", "New-slot initialisation",
        choices=INIT_STRATEGIES,
    )  # fmt: skip
    refine: bool = parameter(
        True,
        "after a rejection, draft the first new slot from the model's row after the window, as the official SJD "
        "code does (false: initialise it like the other new slots)",
        "Refined draft after the window",
    )
    reset_in_stall: int = parameter(
        0,
        "once this many passes in a row accepted no draft, a rejection also discards the drafts after it (they "
        "were drawn after the rejected token) and initialises their slots afresh; lossless, not the papers' "
        "method; helps with a repeat-* or sample-* initialisation (0: never)",
        "Reset drafts in a stall after",
        low=0, high=1000,
    )  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.reset_in_stall and self.init == "random":
            raise SettingsError(
                "reset_in_stall needs a repeat-* or sample-* initialisation: uniformly random drafts are almost "
                "never accepted, so resetting to them makes every pass a stall"
            )


@dataclass(frozen=True)
class LanternParameters(WindowParameters):
    neighbours: int = parameter(
        1000, "nearest codebook neighbours k (LANTERN: the candidates for B(x); GSD: the latent filter)",
        "Codebook neighbours k",
        low=1, high=1_000_000,
    )  # fmt: skip
    delta: float = parameter(
        0.1, "LANTERN: probability mass of neighbours that may be added to the draft's own", "LANTERN budget delta",
        low=0.0, high=1.0,
    )  # fmt: skip


@dataclass(frozen=True)
class GsdParameters(WindowParameters):
    ranks_above: int = parameter(
        6, "GSD: candidates ranked just above the draft in p (the authors' code: 6)", "GSD ranks above the draft",
        low=0, high=1000,
    )  # fmt: skip
    ranks_below: int = parameter(
        7, "GSD: candidates ranked just below the draft in p (the authors' code: 7)", "GSD ranks below the draft",
        low=0, high=1000,
    )  # fmt: skip
    prob_gap: float = parameter(
        0.15, "GSD: largest difference |p(y) - p(x)| of a group member y to the draft x", "GSD probability gap",
        low=0.0, high=1.0,
    )  # fmt: skip
    neighbours: int = parameter(
        128, "GSD: a group member must be among the draft's k nearest codebook vectors", "GSD codebook neighbours k",
        low=1, high=1_000_000,
    )  # fmt: skip


def all_fields(classes: list[type[Parameters]]) -> dict[str, tuple[type, Spec]]:
    """Every parameter name of the given classes, once (its first declaration), for flags and controls."""
    result: dict[str, tuple[type, Spec]] = {}
    for cls in classes:
        for name, kind, spec in cls.fields():
            result.setdefault(name, (kind, spec))
    return result
