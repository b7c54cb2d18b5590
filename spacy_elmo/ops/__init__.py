"""The kernels of the biLM, dispatched to the compiled extension or the reference.

Every function takes ``backend``: ``"reference"`` (pure PyTorch) or
``"fused"`` (the compiled ``spacy_elmo._C`` kernels); ``"auto"`` is resolved
on each call, another name is a ValueError. Modules resolve ``"auto"`` once
with :func:`resolve_backend`, and where it resolved to fused hand on
:data:`AUTO_FUSED`: the fused kernels too, but on a CUDA tensor that a build
without CUDA kernels cannot run, it runs the reference (warned once:
:mod:`spacy_elmo.ops.cuda_route`) where ``"fused"`` raises, as
:func:`resolve_backend` does for ``"fused"`` without the extension. The reference functions in
:mod:`spacy_elmo.ops.reference` define the semantics; see their docstrings for
shapes and weight layouts.
"""

from types import ModuleType

import torch

from ..errors import Errors
from . import cuda_route, reference
from .extension import BuildInfo, build_info, extension_fix, fused_available, load_extension
from .reference import check_char_ids

BACKENDS = ("auto", "fused", "reference")
#: "auto" resolved to "fused", as BiLM hands it to its modules (not a name users pass)
AUTO_FUSED = "auto-fused"


def resolve_backend(name: str) -> str:
    """Map ``"auto"`` to ``"fused"`` when the extension is loaded, else ``"reference"``.

    Raises ValueError for unknown names and RuntimeError for ``"fused"``
    without the extension.
    """
    if name not in BACKENDS:
        raise ValueError(Errors.E_UNKNOWN_BACKEND.format(name=name))
    if name == "auto":
        return "fused" if fused_available() else "reference"
    if name == "fused" and not fused_available():
        raise RuntimeError(Errors.E_FUSED_UNAVAILABLE.format(reason=load_extension()[1], fix=extension_fix()))
    return name


def implementation(backend: str) -> ModuleType:
    """The module implementing ``char_cnn``, ``highway``, ``bilstm_layer`` and
    ``sampled_logsumexp`` for ``backend``: a resolved name (:data:`AUTO_FUSED` included), or ``"auto"``
    (resolved here, by :func:`resolve_backend`, as is any other name: a ValueError, where a typo ran the
    reference)."""
    if backend in ("fused", AUTO_FUSED):
        from . import fused

        return fused
    if backend == "reference":
        return reference
    return implementation(resolve_backend(backend))


def _kernel_implementation(backend: str, args, kwargs) -> ModuleType:
    """:func:`implementation` for an op with a CUDA kernel: ``"fused"`` asked for the kernels, so a CUDA
    tensor with a build that has none (setup.py found no CUDA toolkit) raises here, where
    :data:`AUTO_FUSED` runs the reference (the fused wrappers warn)."""
    module = implementation(backend)
    if backend == "fused" and not module.built_with_cuda() and any(
            isinstance(t, torch.Tensor) and cuda_route.on_cuda(t.device) for t in (*args, *kwargs.values())):
        raise RuntimeError(Errors.E_FUSED_NO_CUDA_KERNELS.format(cuda=torch.version.cuda))
    return module


def char_cnn(*args, backend: str = "reference", **kwargs):
    return _kernel_implementation(backend, args, kwargs).char_cnn(*args, **kwargs)


def highway(*args, backend: str = "reference", **kwargs):
    return _kernel_implementation(backend, args, kwargs).highway(*args, **kwargs)


def bilstm_layer(*args, backend: str = "reference", **kwargs):
    return _kernel_implementation(backend, args, kwargs).bilstm_layer(*args, **kwargs)


def sampled_logsumexp(*args, backend: str = "reference", **kwargs):
    return implementation(backend).sampled_logsumexp(*args, **kwargs)


char_cnn.__doc__ = reference.char_cnn.__doc__
highway.__doc__ = reference.highway.__doc__
bilstm_layer.__doc__ = reference.bilstm_layer.__doc__
sampled_logsumexp.__doc__ = reference.sampled_logsumexp.__doc__

__all__ = ["BACKENDS", "AUTO_FUSED", "resolve_backend", "fused_available", "build_info", "BuildInfo", "extension_fix",
           "check_char_ids", "char_cnn", "highway", "bilstm_layer",
           "sampled_logsumexp", "reference"]
