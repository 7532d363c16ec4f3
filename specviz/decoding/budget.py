"""What a run may allocate: the memory its settings imply per pass (`Parameters.pass_bytes`) against a ceiling
derived from the machine, checked before the run starts, so that a tree of a thousand nodes on sixty-four levels
is refused in one line instead of taking gigabytes (or the allocator's traceback) minutes later.

Light: torch is imported only to ask a GPU its size."""

from __future__ import annotations

import os
from fractions import Fraction

from specviz.core.params import Parameters
from specviz.core.settings import SettingsError

MEMORY_ENV_VAR = "SPECVIZ_RUN_MEMORY_MB"  # a fixed ceiling in MB, for the command line and the app alike
COMMAND_SHARE = 0.5  # a command on the user's own machine may take half of it for one pass
GIB = 1024**3


class MemoryBudgetError(SettingsError):
    """Settings whose passes would need more memory than a run may take here."""


def machine_memory() -> int:
    """This machine's memory in bytes (physical pages times their size)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_ceiling(share: float = COMMAND_SHARE, device: object = None) -> tuple[int, str]:
    """The most one pass may allocate beyond the model, in bytes, and where that number comes from: the owner's
    SPECVIZ_RUN_MEMORY_MB, else `share` of this machine's memory (and of the GPU's, for a model on one)."""
    named = os.environ.get(MEMORY_ENV_VAR)
    if named is not None:
        if not (named.isascii() and named.isdigit()) or int(named) < 1:
            raise SettingsError(f"{MEMORY_ENV_VAR} must be a whole number of megabytes, got {named[:40]!r}")
        return int(named) * 1024**2, f"{MEMORY_ENV_VAR}={named}"
    part = str(Fraction(share).limit_denominator(64))
    ceiling, source = int(machine_memory() * share), f"{part} of this machine's memory"
    if getattr(device, "type", None) == "cuda":
        import torch

        on_gpu = int(torch.cuda.get_device_properties(device).total_memory * share)
        if on_gpu < ceiling:
            ceiling, source = on_gpu, f"{part} of the GPU's memory"
    return ceiling, f"{source}; {MEMORY_ENV_VAR} sets another"


def check_pass_memory(method: str, params: Parameters, vocab_size: int, seq_len: int, ceiling: tuple[int, str]) -> int:
    """The bytes one pass of `params` needs on a model of `vocab_size` tokens and `seq_len` positions; a
    MemoryBudgetError naming the settings and the limit where that exceeds `ceiling` (from `memory_ceiling`)."""
    needed = params.pass_bytes(vocab_size, seq_len)
    limit, source = ceiling
    if needed > limit:
        settings = ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in params.to_dict().items())
        raise MemoryBudgetError(
            f"{method} with {settings} needs about {needed / GIB:.1f} GB a pass on a vocabulary of {vocab_size:,} "
            f"tokens; a run may take {limit / GIB:.1f} GB here ({source}): choose a smaller tree, window or "
            "neighbour count"
        )
    return needed
