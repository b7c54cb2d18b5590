"""Which fused calls on CUDA tensors run the reference instead: what the build or the GPU cannot run.

The fused wrappers (:mod:`spacy_elmo.ops.fused`) ask :func:`reference_instead` at their entry. A CUDA
tensor runs :mod:`spacy_elmo.ops.reference` (exact, slower) with a warning, once per reason, where

* ``spacy_elmo._C`` has no CUDA kernels (setup.py built it CPU-only: torch had CUDA, but no nvcc /
  CUDA_HOME), for every op: the op would fail in torch's dispatcher ("Could not run ... from the 'CUDA'
  backend");
* the char CNN has more than :data:`MAX_CUDA_FILTERS` filters (``cuda::kMaxFilters``,
  csrc/include/cuda_kernels.h): the CUDA op refuses them;
* the char CNN's CUDA-core forward would need more dynamic shared memory than the GPU allows a block
  (``W * D * 4`` bytes, a token's embeddings in float32: csrc/cuda/char_cnn.cu): its launch would fail.
  (Its fp16/bf16 tensor-core kernel needs more still, 8 tokens of ``W * D * 2``, and runs only within
  48 KB, so it cannot run either.)

The decision is :func:`reason`, on plain facts, so it is testable without a GPU.
"""

import warnings
from typing import Callable, Optional, Set

import torch

from ..errors import Warnings

MAX_CUDA_FILTERS = 16  #: cuda::kMaxFilters in csrc/include/cuda_kernels.h
CHAR_CNN_SHMEM_BYTES = 4  #: bytes of shared memory per character and embedding dim (float32)

_warned: Set[str] = set()


def reason(device_type: str, cuda_kernels: bool, n_filters: Optional[int] = None, width: Optional[int] = None,
           dim: Optional[int] = None, shmem_limit: Optional[int] = None) -> Optional[str]:
    """Why a fused op on a ``device_type`` tensor runs the reference instead (the warning), or None.

    ``cuda_kernels``: the extension has CUDA kernels (``fused.built_with_cuda()``). For the char CNN:
    ``n_filters`` its filter count, ``width`` the characters per token (W), ``dim`` the embedding's
    (D) and ``shmem_limit`` the GPU's opt-in shared memory per block in bytes (None: unknown, not
    checked; the op then checks it)."""
    if device_type != "cuda":
        return None
    if not cuda_kernels:
        return Warnings.W_FUSED_NO_CUDA_KERNELS.format(cuda=torch.version.cuda)
    if n_filters is not None and n_filters > MAX_CUDA_FILTERS:
        return Warnings.W_FUSED_CUDA_MANY_FILTERS.format(n=n_filters, limit=MAX_CUDA_FILTERS)
    if width is not None and dim is not None and shmem_limit is not None:
        need = width * dim * CHAR_CNN_SHMEM_BYTES
        if need > shmem_limit:
            return Warnings.W_FUSED_CUDA_SHARED_MEMORY.format(need=need, width=width, dim=dim, limit=shmem_limit,
                                                              fit=shmem_limit // CHAR_CNN_SHMEM_BYTES)
    return None


def shared_memory_limit(device: torch.device) -> Optional[int]:
    """The most dynamic shared memory a block on CUDA ``device`` may opt in to, in bytes (None: unknown)."""
    props = torch.cuda.get_device_properties(device)
    limit = getattr(props, "shared_memory_per_block_optin", None)
    return None if limit is None else int(limit)


def on_cuda(device: torch.device) -> bool:
    """Whether ``device`` is a GPU (a function of its own: CPU tests fake it)."""
    return device.type == "cuda"


def reference_instead(device: torch.device, cuda_kernels: Callable[[], bool], n_filters: Optional[int] = None,
                      width: Optional[int] = None, dim: Optional[int] = None) -> bool:
    """Whether a fused op on ``device`` runs the reference (:func:`reason`; ``cuda_kernels`` asked only on
    CUDA, as is the GPU's shared memory, only for the char CNN); warns once per reason (not while
    torch.compile traces)."""
    if not on_cuda(device):
        return False
    kernels = cuda_kernels()
    # not while torch.compile traces (the device query): the op then checks it and names W, D and the limit
    check_memory = kernels and width is not None and not torch.compiler.is_compiling()
    limit = shared_memory_limit(device) if check_memory else None
    why = reason("cuda", kernels, n_filters, width, dim, limit)
    if why is None:
        return False
    if why not in _warned and not torch.compiler.is_compiling():
        _warned.add(why)
        warnings.warn(why, RuntimeWarning, stacklevel=4)
    return True
