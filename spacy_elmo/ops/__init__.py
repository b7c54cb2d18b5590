"""The kernels of the biLM, dispatched to the compiled extension or the reference.

Every function takes ``backend``: ``"reference"`` (pure PyTorch) or
``"fused"`` (the compiled ``spacy_elmo._C`` kernels); ``"auto"`` is resolved
on each call, another name is a ValueError. Modules resolve ``"auto"`` once
with :func:`resolve_backend`. The reference functions in
:mod:`spacy_elmo.ops.reference` define the semantics; see their docstrings for
shapes and weight layouts.
"""

from types import ModuleType

from ..errors import Errors
from . import reference
from .extension import BuildInfo, build_info, extension_fix, fused_available, load_extension
from .reference import check_char_ids

BACKENDS = ("auto", "fused", "reference")


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
    ``sampled_logsumexp`` for ``backend``: a resolved name, or ``"auto"`` (resolved here, by
    :func:`resolve_backend`, as is any other name: a ValueError, where a typo ran the reference)."""
    if backend == "fused":
        from . import fused

        return fused
    if backend == "reference":
        return reference
    return implementation(resolve_backend(backend))


def char_cnn(*args, backend: str = "reference", **kwargs):
    return implementation(backend).char_cnn(*args, **kwargs)


def highway(*args, backend: str = "reference", **kwargs):
    return implementation(backend).highway(*args, **kwargs)


def bilstm_layer(*args, backend: str = "reference", **kwargs):
    return implementation(backend).bilstm_layer(*args, **kwargs)


def sampled_logsumexp(*args, backend: str = "reference", **kwargs):
    return implementation(backend).sampled_logsumexp(*args, **kwargs)


char_cnn.__doc__ = reference.char_cnn.__doc__
highway.__doc__ = reference.highway.__doc__
bilstm_layer.__doc__ = reference.bilstm_layer.__doc__
sampled_logsumexp.__doc__ = reference.sampled_logsumexp.__doc__

__all__ = ["BACKENDS", "resolve_backend", "fused_available", "build_info", "BuildInfo", "extension_fix",
           "check_char_ids", "char_cnn", "highway", "bilstm_layer",
           "sampled_logsumexp", "reference"]
