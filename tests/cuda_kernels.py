"""The CUDA kernels a call launched, by the profiler's names (GPU tests only)."""

from typing import Any, Callable, List, Tuple

import torch


def launched(fn: Callable[[], Any]) -> Tuple[Any, List[str]]:
    """fn's result and the names of the CUDA kernels it launched."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    return result, [e.name for e in prof.events()]
