"""Loading a biLM program that ``torch.export.save`` wrote, in a fresh process."""

import os
from typing import Union

import torch

from .. import ops
from .model import BiLMOutput  # noqa: F401  its module registers it with torch's pytree by name


def load_exported(path: Union[str, "os.PathLike[str]"]) -> "torch.export.ExportedProgram":
    """``torch.export.load(path)`` with what the program needs registered first: the fused kernels
    (``torch.ops.spacy_elmo.*``, which an exported fused biLM calls) and the output type ``BiLMOutput``
    (its structure is saved by name). ``.module()(ids)`` of the result returns a ``BiLMOutput``.

    Raises RuntimeError (:attr:`Errors.E_FUSED_UNAVAILABLE`) where the compiled extension is missing."""
    ops.implementation(ops.resolve_backend("fused"))  # importing spacy_elmo.ops.fused registers the kernels
    return torch.export.load(path)
