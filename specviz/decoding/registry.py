"""The registered decoding methods and what each promises."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from specviz.decoding import ar
from specviz.trace import Iteration


class UnknownMethod(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Method:
    name: str
    decode: Callable[..., Iterator[Iteration]]
    lossless: bool
    description: str


METHODS: dict[str, Method] = {
    "ar": Method("ar", ar.decode, True, "vanilla autoregressive: one token per model pass"),
}


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise UnknownMethod(f"unknown method {name!r}; available: {', '.join(METHODS)}")
    return METHODS[name]
