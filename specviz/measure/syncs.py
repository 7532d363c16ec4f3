"""Host reads a decoding pass makes, as a GPU sees them: each `aten::item` is a device synchronisation.

torch's profiler records the `aten::item` calls made in C++ (indexing with a 0-d device tensor reads it
there, unseen by any Python-level count). Checks that read a value only on a CPU are left out:
multinomial's argument check (`_assert_async`, which on CUDA asserts on the device) and one_hot's range
check (skipped on CUDA, where scatter asserts instead). A `.tolist()` reads without an `aten::item` on
a CPU (on CUDA it is a copy to the host): a pass's one intended read is counted apart from these.
Seen on an H200 and not on a CPU: `x[:, 0] = True` on a CUDA tensor wraps the number in a CPU tensor
that `fill_` reads back (an `aten::item` of a CPU scalar, no sync, but counted); the passes write
`x[:, 0].fill_(True)` instead, so the count on a GPU stays a count of syncs.

On CUDA, `torch.cuda.set_sync_debug_mode("error")` turns every other synchronisation into an error
(`specviz.models.syncing`).
"""

from __future__ import annotations

import torch
from torch.autograd import profiler_legacy

from specviz.decoding.registry import get_method
from specviz.models.protocol import ImageModel

CPU_ONLY_READS = frozenset({"aten::_assert_async", "aten::one_hot"})


def hidden_reads(model: ImageModel, method: str, settings: dict, passes: int = 3, prompt: str = "rocket") -> int:
    """`aten::item` calls during `passes` passes of `method` after its first record, CPU-only checks left out."""
    spec = get_method(method)
    params = spec.resolve(settings)
    with torch.inference_mode():
        decoder = spec.open(model, prompt, 0, model.default_sampling, params)
        decoder.next()
        with profiler_legacy.profile() as profiled:  # torch's own op recorder, without kineto's log lines
            for _ in range(passes):
                decoder.next()
    found = 0
    for event in profiled.function_events:
        if event.name == "aten::item":
            callers, parent = set(), event.cpu_parent
            while parent is not None:
                callers.add(parent.name)
                parent = parent.cpu_parent
            found += not callers & CPU_ONLY_READS
    return found
