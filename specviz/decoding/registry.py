"""The registered decoding methods, their parameters and what each promises."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from specviz.decoding import ar, gsd, jacobi, lantern, scd_gs, scd_mc, sjd
from specviz.models.sampling import SettingsError
from specviz.trace import Iteration

WINDOW_PARAMETERS = {"window": 16, "init": "random"}


class UnknownMethod(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Method:
    name: str
    decode: Callable[..., Iterator[Iteration]]
    lossless: bool
    description: str
    parameters: dict[str, int | float | str] = field(default_factory=dict)
    lossless_when_greedy: bool = False

    def is_lossless(self, greedy: bool) -> bool:
        return self.lossless or (greedy and self.lossless_when_greedy)

    def resolve(self, given: dict | None) -> dict:
        """The method's parameters: defaults overridden by `given`; unknown names are refused."""
        given = {k: v for k, v in (given or {}).items() if v is not None}
        unknown = sorted(set(given) - set(self.parameters))
        if unknown:
            allowed = ", ".join(self.parameters) or "none"
            raise SettingsError(f"method {self.name} has no parameter {', '.join(unknown)} (its parameters: {allowed})")
        return {**self.parameters, **given}


METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method("ar", ar.decode, True, "vanilla autoregressive: one token per model pass"),
        Method(
            "jacobi",
            jacobi.decode,
            False,
            "Jacobi decoding: drafts accepted while unchanged between iterations (lossless only when greedy)",
            WINDOW_PARAMETERS,
            lossless_when_greedy=True,
        ),
        Method("sjd", sjd.decode, True, "speculative Jacobi decoding (SJD), independent redraws", WINDOW_PARAMETERS),
        Method("scd-mc", scd_mc.decode, True, "speculative coupled decoding, maximal coupling", WINDOW_PARAMETERS),
        Method("scd-gs", scd_gs.decode, True, "speculative coupled decoding, Gumbel sharing", WINDOW_PARAMETERS),
        Method(
            "lantern",
            lantern.decode,
            False,
            "LANTERN relaxed acceptance: p plus the mass of nearby codebook tokens within a TV budget (lossy)",
            {**WINDOW_PARAMETERS, "neighbours": 1000, "delta": 0.1},
        ),
        Method(
            "gsd",
            gsd.decode,
            False,
            "grouped speculative decoding: accept by the mass of a dynamic group of similar tokens (lossy)",
            {**WINDOW_PARAMETERS, "group_size": 10, "prob_gap": 0.15, "neighbours": 128},
        ),
    )
}


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise UnknownMethod(f"unknown method {name!r}; available: {', '.join(METHODS)}")
    return METHODS[name]
